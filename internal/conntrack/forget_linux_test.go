//go:build linux

package conntrack_test

import (
	"net"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	ct "github.com/ti-mo/conntrack"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/mooringlb/mooring/internal/conntrack"
	"github.com/mooringlb/mooring/internal/netlab"
)

const established = 432000 // the kernel's default ESTABLISHED timeout, seconds

// TestForgetIdle writes entries into the kernel's conntrack table of a
// fresh network namespace — a client's connection to a Service address
// translated to a pod, as kube-proxy leaves them — and forgets the idle
// ones: only the idle ESTABLISHED TCP entries of that address go.
func TestForgetIdle(t *testing.T) {
	freshNetns(t)

	vip4, vip6 := netip.MustParseAddr("10.213.0.101"), netip.MustParseAddr("fd00:213::101")
	other := netip.MustParseAddr("10.213.0.102")
	create := func(name string, dst, pod netip.Addr, sport uint16, state uint8, idle time.Duration) {
		t.Helper()
		client, fam := netip.MustParseAddr("10.214.0.250"), netlink.FAMILY_V4
		if dst.Is6() {
			client, fam = netip.MustParseAddr("fd00:214::fa"), netlink.FAMILY_V6
		}
		timeout := uint32(established - idle/time.Second)
		if state != nl.TCP_CONNTRACK_ESTABLISHED {
			timeout = 60
		}
		f := &netlink.ConntrackFlow{FamilyType: uint8(fam), TimeOut: timeout, ProtoInfo: &netlink.ProtoInfoTCP{State: state},
			Forward: netlink.IPTuple{Protocol: unix.IPPROTO_TCP, SrcIP: ip(client), DstIP: ip(dst), SrcPort: sport, DstPort: 80},
			Reverse: netlink.IPTuple{Protocol: unix.IPPROTO_TCP, SrcIP: ip(pod), DstIP: ip(client), SrcPort: 8080, DstPort: sport}}
		if err := netlink.ConntrackCreate(netlink.ConntrackTable, netlink.InetFamily(fam), f); err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
	}
	pod4, pod6 := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("fd00:244:0:1::5")
	create("stale", vip4, pod4, 40001, nl.TCP_CONNTRACK_ESTABLISHED, 100*time.Second)
	create("fresh", vip4, pod4, 40002, nl.TCP_CONNTRACK_ESTABLISHED, 2*time.Second)
	create("another address", other, pod4, 40003, nl.TCP_CONNTRACK_ESTABLISHED, 100*time.Second)
	create("closing", vip4, pod4, 40004, nl.TCP_CONNTRACK_TIME_WAIT, 0)
	create("stale IPv6", vip6, pod6, 40005, nl.TCP_CONNTRACK_ESTABLISHED, 100*time.Second)
	create("fresh IPv6", vip6, pod6, 40006, nl.TCP_CONNTRACK_ESTABLISHED, 2*time.Second)

	n, err := conntrack.ForgetIdle(map[netip.Addr]time.Duration{vip4: 50 * time.Second, vip6: 50 * time.Second})
	if err != nil || n != 2 {
		t.Fatalf("ForgetIdle(both addresses, 50s) = %d, %v; want 2 (the stale ones)", n, err)
	}
	if n, err := conntrack.ForgetIdle(map[netip.Addr]time.Duration{vip4: time.Second}); err != nil || n != 1 {
		t.Fatalf("ForgetIdle(%s, 1s) = %d, %v; want 1 (the fresh one, idle 2 s)", vip4, n, err)
	}
	var left []uint16
	for _, fam := range []netlink.InetFamily{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, fam)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range flows {
			left = append(left, f.Forward.SrcPort)
		}
	}
	slices.Sort(left)
	if want := []uint16{40003, 40004, 40006}; !slices.Equal(left, want) {
		t.Errorf("entries left (by source port): %v, want %v (the other address's, the closing one, the fresh IPv6 one)", left, want)
	}
}

// freshNetns moves the calling goroutine, locked to its thread for good
// (the thread ends with the test), into a new network namespace with an
// empty conntrack table.
func freshNetns(tb testing.TB) {
	tb.Helper()
	netlab.RequirePrivileges(tb)
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		tb.Fatal(err)
	}
	ns, err := netns.New()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = netns.Set(orig); ns.Close(); orig.Close() })
}

func ip(a netip.Addr) net.IP { return net.IP(a.AsSlice()) }

// fillTable writes n ESTABLISHED entries of clients' connections to vip,
// translated to pod, into the calling thread's (fresh) namespace.
func fillTable(b *testing.B, n int, vip, pod netip.Addr) {
	for i := range n {
		client := netip.AddrFrom4([4]byte{10, 214, byte(i >> 8), byte(i)})
		f := &netlink.ConntrackFlow{FamilyType: netlink.FAMILY_V4, TimeOut: established, ProtoInfo: &netlink.ProtoInfoTCP{State: nl.TCP_CONNTRACK_ESTABLISHED},
			Forward: netlink.IPTuple{Protocol: unix.IPPROTO_TCP, SrcIP: ip(client), DstIP: ip(vip), SrcPort: 40000, DstPort: 80},
			Reverse: netlink.IPTuple{Protocol: unix.IPPROTO_TCP, SrcIP: ip(pod), DstIP: ip(client), SrcPort: 8080, DstPort: 40000}}
		if err := netlink.ConntrackCreate(netlink.ConntrackTable, netlink.FAMILY_V4, f); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkForgetIdle is what a node pays before it advertises an address
// again: one dump of a table of 10,000 entries, none of them stale (each
// pass deletes nothing, so every iteration reads the same table).
func BenchmarkForgetIdle(b *testing.B) {
	freshNetns(b)
	vip, pod := netip.MustParseAddr("10.213.0.101"), netip.MustParseAddr("10.244.1.5")
	const entries = 10_000
	fillTable(b, entries, vip, pod)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if n, err := conntrack.ForgetIdle(map[netip.Addr]time.Duration{vip: time.Minute}); err != nil || n != 0 {
			b.Fatalf("ForgetIdle = %d, %v; want 0 (every entry is fresh)", n, err)
		}
	}
	b.ReportMetric(float64(entries), "entries")
}

// BenchmarkDelete is what a node pays when it evicts a dead node: one dump
// of a table of 10,000 entries, none translated to the dead node (each
// pass deletes nothing, so every iteration reads the same table).
func BenchmarkDelete(b *testing.B) {
	freshNetns(b)
	vip, pod := netip.MustParseAddr("10.213.0.101"), netip.MustParseAddr("10.244.1.5")
	const entries = 10_000
	fillTable(b, entries, vip, pod)
	m := conntrack.Match{To: []netip.Addr{vip}, Via: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}, Unreplied: true}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if n, err := conntrack.Delete(m); err != nil || n != 0 {
			b.Fatalf("Delete = %d, %v; want 0 (no entry goes to the dead node)", n, err)
		}
	}
	b.ReportMetric(float64(entries), "entries")
}

// TestDeleteEveryProtocol writes entries of TCP, UDP, ICMP and ICMPv6 into
// the kernel's table of a fresh namespace — connections to Service
// addresses translated to an endpoint of a dead node, as the eviction
// finds them — and Delete removes exactly the unanswered ones translated
// to the dead node: the kernel finds an entry only by its exact tuple, so
// every protocol's fields must have been read back right.
func TestDeleteEveryProtocol(t *testing.T) {
	freshNetns(t)
	c, err := ct.Dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := netip.MustParseAddr
	client4, vip4, dead4, live4 := a("10.214.0.250"), a("10.213.0.101"), a("10.244.1.5"), a("10.244.2.5")
	client6, vip6, dead6 := a("fd00:214::fa"), a("fd00:213::101"), a("fd00:244:0:1::5")
	type want struct {
		name string
		gone bool
	}
	var wants []want
	create := func(name string, proto uint8, client, vip, ep netip.Addr, id uint16, replied, gone bool) {
		t.Helper()
		l4 := func(sport, dport uint16) ct.ProtoTuple {
			p := ct.ProtoTuple{Protocol: proto, SourcePort: sport, DestinationPort: dport}
			switch proto {
			case unix.IPPROTO_ICMP:
				p = ct.ProtoTuple{Protocol: proto, ICMPID: id, ICMPType: 8}
			case unix.IPPROTO_ICMPV6:
				p = ct.ProtoTuple{Protocol: proto, ICMPID: id, ICMPType: 128}
			}
			return p
		}
		f := ct.Flow{Timeout: 120,
			TupleOrig:  ct.Tuple{IP: ct.IPTuple{SourceAddress: client, DestinationAddress: vip}, Proto: l4(id, 80)},
			TupleReply: ct.Tuple{IP: ct.IPTuple{SourceAddress: ep, DestinationAddress: client}, Proto: l4(8080, id)}}
		if proto == unix.IPPROTO_ICMP {
			f.TupleReply.Proto.ICMPType = 0 // echo reply
		}
		if proto == unix.IPPROTO_ICMPV6 {
			f.TupleReply.Proto.ICMPType = 129
		}
		if replied {
			f.Status = ct.StatusSeenReply | ct.StatusConfirmed // the kernel refuses a status without CONFIRMED (EBUSY)
		}
		if err := c.Create(f); err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
		wants = append(wants, want{name, gone})
	}
	create("TCP to the dead node", unix.IPPROTO_TCP, client4, vip4, dead4, 40001, false, true)
	create("TCP to the dead node, answered", unix.IPPROTO_TCP, client4, vip4, dead4, 40002, true, false)
	create("TCP to a live node", unix.IPPROTO_TCP, client4, vip4, live4, 40003, false, false)
	create("UDP to the dead node", unix.IPPROTO_UDP, client4, vip4, dead4, 40004, false, true)
	create("ICMP to the dead node", unix.IPPROTO_ICMP, client4, vip4, dead4, 40005, false, true)
	create("ICMP to the Service address, not translated", unix.IPPROTO_ICMP, client4, vip4, vip4, 40006, false, false)
	create("ICMPv6 to the dead node", unix.IPPROTO_ICMPV6, client6, vip6, dead6, 40007, false, true)
	create("TCP over IPv6 to the dead node", unix.IPPROTO_TCP, client6, vip6, dead6, 40008, false, true)

	n, err := conntrack.Delete(conntrack.Match{
		Via:       []netip.Prefix{netip.PrefixFrom(dead4, 32), netip.PrefixFrom(dead6, 128)},
		Unreplied: true,
	})
	flows, derr := c.Dump(nil)
	if derr != nil {
		t.Fatal(derr)
	}
	left := map[uint16]bool{}
	for _, f := range flows {
		left[f.TupleOrig.Proto.SourcePort+f.TupleOrig.Proto.ICMPID] = true
	}
	gone := 0
	for i, w := range wants {
		if left[uint16(40001+i)] == w.gone {
			t.Errorf("%s: gone = %v, want %v", w.name, !left[uint16(40001+i)], w.gone)
		}
		if w.gone {
			gone++
		}
	}
	if err != nil || n != gone {
		t.Errorf("Delete = %d, %v; want %d, nil", n, err, gone)
	}
}
