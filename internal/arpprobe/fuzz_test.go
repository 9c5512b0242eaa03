package arpprobe

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/mdlayher/arp"
)

// FuzzParseClaim feeds the parser what a segment might carry: it must not
// panic, a claim must name a valid address and a 6-byte MAC, and with
// ExcludeOwn the prober's own MAC never counts.
func FuzzParseClaim(f *testing.F) {
	f.Add(arpFrame(f, arp.OperationReply, macA, netip.MustParseAddr("10.213.0.100")))
	f.Add(naFrame(f, macA, netip.MustParseAddr("fd00:213::64"), true))
	f.Add(naFrame(f, macB, netip.MustParseAddr("fd00:213::64"), false))
	ns, _, _ := solicit(probeHW, probeSrc6, netip.MustParseAddr("fd00:213::64"))
	f.Add(ns)
	f.Add([]byte{})
	f.Add(make([]byte, 60))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, ok := parseClaim(b)
		if !ok {
			return
		}
		if !c.addr.IsValid() || len(c.mac) != 6 || len(c.to) != 6 {
			t.Fatalf("claim %+v from %x", c, b)
		}
		own := Options{ExcludeOwn: true, AnyDestination: true}
		if own.counts(c, probeHW) && (bytes.Equal(c.mac, probeHW) || bytes.Equal(c.from, probeHW)) {
			t.Fatalf("ExcludeOwn counted our own claim %+v", c)
		}
		if (Options{}).counts(c, probeHW) && !bytes.Equal(c.to, probeHW) && c.to[0]&1 == 0 {
			t.Fatalf("an answer to %s counted as one to us", c.to)
		}
	})
}

// FuzzSolicit checks that every request built is a frame the parser reads
// as no claim at all (the prober sees its own requests go out).
func FuzzSolicit(f *testing.F) {
	f.Add([]byte{10, 213, 0, 100}, []byte{10, 213, 0, 250})
	f.Add(netip.MustParseAddr("fd00:213::64").AsSlice(), []byte{})
	f.Add(netip.MustParseAddr("::ffff:10.0.0.1").AsSlice(), netip.MustParseAddr("fe80::1").AsSlice())
	f.Fuzz(func(t *testing.T, addr, src []byte) {
		a, ok := netip.AddrFromSlice(addr)
		if !ok {
			return
		}
		s, _ := netip.AddrFromSlice(src)
		reqs, err := requests(probeHW, []netip.Addr{a}, Options{Src4: s, Src6: s})
		if err != nil {
			return
		}
		if len(reqs) != 1 || reqs[0].addr != a.Unmap() {
			t.Fatalf("requests(%s) = %+v", a, reqs)
		}
		if c, ok := parseClaim(reqs[0].frame); ok {
			t.Fatalf("the request for %s parses as a claim %+v", a, c)
		}
	})
}
