package arpprobe

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
)

// fakeConn records what the probe writes and hands back canned frames,
// then reports the read deadline as passed.
type fakeConn struct {
	net.PacketConn // unused methods panic
	written        [][]byte
	to             []net.Addr
	replies        [][]byte
	closed         bool
}

func (c *fakeConn) WriteTo(b []byte, a net.Addr) (int, error) {
	c.written = append(c.written, bytes.Clone(b))
	c.to = append(c.to, a)
	return len(b), nil
}

func (c *fakeConn) ReadFrom(b []byte) (int, net.Addr, error) {
	if len(c.replies) == 0 {
		return 0, nil, os.ErrDeadlineExceeded
	}
	n := copy(b, c.replies[0])
	c.replies = c.replies[1:]
	return n, &packet.Addr{}, nil
}

func (c *fakeConn) SetReadDeadline(time.Time) error { return nil }
func (c *fakeConn) Close() error                    { c.closed = true; return nil }

var (
	probeHW = net.HardwareAddr{0x02, 0x6d, 0, 0, 0, 0xfa}
	macA    = net.HardwareAddr{0x02, 0x6d, 0, 0, 0, 0x0c}
	macB    = net.HardwareAddr{0x02, 0x6d, 0, 0, 0, 0x0b}
	otherHW = net.HardwareAddr{0x02, 0x6d, 0, 0, 0, 0x0d}

	probeSrc4 = netip.MustParseAddr("10.213.0.250")
	probeSrc6 = netip.MustParseAddr("fd00:213::fa")
)

func frame(t testing.TB, dst, src net.HardwareAddr, et ethernet.EtherType, payload []byte) []byte {
	t.Helper()
	b, _, err := ethFrame(dst, src, et, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// arpFrameTo is an ARP packet from MAC from about ip, sent to dst.
func arpFrameTo(t testing.TB, dst net.HardwareAddr, op arp.Operation, from net.HardwareAddr, ip netip.Addr) []byte {
	t.Helper()
	p, err := arp.NewPacket(op, from, ip, dst, probeSrc4)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.MarshalBinary()
	return frame(t, dst, from, ethernet.EtherTypeARP, b)
}

func arpFrame(t testing.TB, op arp.Operation, from net.HardwareAddr, ip netip.Addr) []byte {
	t.Helper()
	return arpFrameTo(t, probeHW, op, from, ip)
}

func naFrame(t testing.TB, from net.HardwareAddr, target netip.Addr, withOption bool) []byte {
	t.Helper()
	na := &ndp.NeighborAdvertisement{Solicited: true, TargetAddress: target}
	if withOption {
		na.Options = []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: from}}
	}
	src, dst := target, probeSrc6
	body, err := ndp.MarshalMessageChecksum(na, src, dst)
	if err != nil {
		t.Fatal(err)
	}
	ip6 := make([]byte, 40)
	ip6[0], ip6[6], ip6[7] = 6<<4, 58, 255
	ip6[4], ip6[5] = byte(len(body)>>8), byte(len(body))
	s, d := src.As16(), dst.As16()
	copy(ip6[8:], s[:])
	copy(ip6[24:], d[:])
	return frame(t, probeHW, from, ethernet.EtherTypeIPv6, append(ip6, body...))
}

func macsEqual(got, want []net.HardwareAddr) bool {
	return slices.EqualFunc(got, want, func(a, b net.HardwareAddr) bool { return bytes.Equal(a, b) })
}

func TestProbeConnARP(t *testing.T) {
	vip, other := netip.MustParseAddr("10.213.0.100"), netip.MustParseAddr("10.213.0.101")
	c := &fakeConn{replies: [][]byte{
		arpFrame(t, arp.OperationReply, macA, vip),
		arpFrame(t, arp.OperationReply, macB, vip),
		arpFrame(t, arp.OperationReply, macA, vip),                          // duplicate
		arpFrame(t, arp.OperationReply, macA, other),                        // another address
		arpFrame(t, arp.OperationRequest, macA, vip),                        // a request, not an answer
		arpFrameTo(t, otherHW, arp.OperationReply, otherHW, vip),            // an answer to somebody else
		arpFrameTo(t, ethernet.Broadcast, arp.OperationReply, probeHW, vip), // ours, broadcast: counts
		{0x01, 0x02}, // garbage
	}}
	got, err := ProbeConn(context.Background(), c, probeHW, []netip.Addr{vip}, Options{Src4: probeSrc4, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if want := []net.HardwareAddr{macB, macA, probeHW}; len(got) != 1 || !macsEqual(got.MACs(vip), want) {
		t.Fatalf("ProbeConn = %v, want %s: %v", got, vip, want)
	}
	if !c.closed || len(c.written) != 1 {
		t.Fatalf("closed=%v, %d frames written; want closed and exactly one request", c.closed, len(c.written))
	}
	var f ethernet.Frame
	var p arp.Packet
	if err := f.UnmarshalBinary(c.written[0]); err != nil {
		t.Fatal(err)
	}
	if err := p.UnmarshalBinary(f.Payload); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.Destination, ethernet.Broadcast) || p.Operation != arp.OperationRequest ||
		p.TargetIP != vip || p.SenderIP != probeSrc4 || !bytes.Equal(p.SenderHardwareAddr, probeHW) {
		t.Fatalf("request = %+v to %s", p, f.Destination)
	}
	if to := c.to[0].(*packet.Addr); !bytes.Equal(to.HardwareAddr, ethernet.Broadcast) {
		t.Fatalf("request written to %v, want broadcast", to)
	}
}

func TestProbeConnNDP(t *testing.T) {
	vip := netip.MustParseAddr("fd00:213::64")
	c := &fakeConn{replies: [][]byte{
		naFrame(t, macA, vip, true),
		naFrame(t, macB, vip, false), // no option: the Ethernet source counts
		naFrame(t, macA, netip.MustParseAddr("fd00:213::65"), true),
	}}
	got, err := ProbeConn(context.Background(), c, probeHW, []netip.Addr{vip}, Options{Src6: probeSrc6, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if want := []net.HardwareAddr{macB, macA}; len(got) != 1 || !macsEqual(got.MACs(vip), want) {
		t.Fatalf("ProbeConn = %v, want %s: %v", got, vip, want)
	}
	var f ethernet.Frame
	if err := f.UnmarshalBinary(c.written[0]); err != nil {
		t.Fatal(err)
	}
	wantDst := net.HardwareAddr{0x33, 0x33, 0xff, 0x00, 0x00, 0x64}
	if !bytes.Equal(f.Destination, wantDst) || f.EtherType != ethernet.EtherTypeIPv6 || f.Payload[7] != 255 {
		t.Fatalf("solicitation to %s type %v hop limit %d", f.Destination, f.EtherType, f.Payload[7])
	}
	m, err := ndp.ParseMessage(f.Payload[40:])
	if err != nil {
		t.Fatal(err)
	}
	ns, ok := m.(*ndp.NeighborSolicitation)
	if !ok || ns.TargetAddress != vip {
		t.Fatalf("sent %#v, want a neighbour solicitation for %s", m, vip)
	}
	if len(ns.Options) != 1 {
		t.Fatalf("solicitation from %s carries %d options, want the source link-layer address", probeSrc6, len(ns.Options))
	}
}

// TestProbeConnExcludeOwn is the split-brain check's view: several
// addresses in one round, its own answers (seen as outgoing frames) and
// answers to other machines.
func TestProbeConnExcludeOwn(t *testing.T) {
	vip, vip2 := netip.MustParseAddr("10.213.0.100"), netip.MustParseAddr("10.213.0.101")
	replies := func() [][]byte {
		return [][]byte{
			arpFrameTo(t, otherHW, arp.OperationReply, probeHW, vip), // our own answer to a client
			arpFrame(t, arp.OperationReply, macA, vip),
			arpFrameTo(t, otherHW, arp.OperationReply, macB, vip2), // macB answering a client
			arpFrameTo(t, ethernet.Broadcast, arp.OperationReply, otherHW, netip.MustParseAddr("10.213.0.102")),
		}
	}
	c := &fakeConn{replies: replies()}
	opts := Options{Src4: probeSrc4, Wait: time.Second, ExcludeOwn: true, AnyDestination: true}
	got, err := ProbeConn(context.Background(), c, probeHW, []netip.Addr{vip, vip2, netip.MustParseAddr("::ffff:10.213.0.100")}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !macsEqual(got[vip], []net.HardwareAddr{macA}) || !macsEqual(got[vip2], []net.HardwareAddr{macB}) {
		t.Fatalf("ProbeConn = %v, want %s: [%s], %s: [%s]", got, vip, macA, vip2, macB)
	}
	if len(c.written) != 2 {
		t.Fatalf("%d requests written, want one per distinct address", len(c.written))
	}
	if mapped := netip.MustParseAddr("::ffff:10.213.0.100"); !macsEqual(got.MACs(mapped), []net.HardwareAddr{macA}) {
		t.Fatalf("MACs(%s) = %v, want the answers for %s", mapped, got.MACs(mapped), vip)
	}

	// The same frames without the options: answers to others do not count,
	// our own does.
	c = &fakeConn{replies: replies()}
	got, err = ProbeConn(context.Background(), c, probeHW, []netip.Addr{vip, vip2}, Options{Src4: probeSrc4, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !macsEqual(got[vip], []net.HardwareAddr{macA}) {
		t.Fatalf("without options ProbeConn = %v, want %s: [%s]", got, vip, macA)
	}

	// Own frames still count when only ExcludeOwn is off.
	c = &fakeConn{replies: replies()}
	got, _ = ProbeConn(context.Background(), c, probeHW, []netip.Addr{vip}, Options{Wait: time.Second, AnyDestination: true})
	if !macsEqual(got[vip], []net.HardwareAddr{macA, probeHW}) {
		t.Fatalf("AnyDestination only: %v", got)
	}
}

func TestProbeConnAddressProbe(t *testing.T) {
	// No source: sender 0.0.0.0 / ::, and no link-layer option in the NS.
	c := &fakeConn{}
	v4, v6 := netip.MustParseAddr("10.213.0.100"), netip.MustParseAddr("fd00:213::64")
	if _, err := ProbeConn(context.Background(), c, probeHW, []netip.Addr{v4, v6}, Options{}); err != nil {
		t.Fatal(err)
	}
	var f ethernet.Frame
	var p arp.Packet
	if err := f.UnmarshalBinary(c.written[0]); err != nil {
		t.Fatal(err)
	}
	if err := p.UnmarshalBinary(f.Payload); err != nil || !p.SenderIP.IsUnspecified() {
		t.Fatalf("ARP address probe from %v (%v)", p.SenderIP, err)
	}
	if err := f.UnmarshalBinary(c.written[1]); err != nil {
		t.Fatal(err)
	}
	m, err := ndp.ParseMessage(f.Payload[40:])
	if err != nil {
		t.Fatal(err)
	}
	if ns := m.(*ndp.NeighborSolicitation); len(ns.Options) != 0 || !netip.AddrFrom16([16]byte(f.Payload[8:24])).IsUnspecified() {
		t.Fatalf("NS address probe: options %v, from %x", ns.Options, f.Payload[8:24])
	}
}

func TestProbeConnErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		addrs []netip.Addr
		opts  Options
	}{
		"invalid address":     {[]netip.Addr{{}}, Options{}},
		"IPv6 source for ARP": {[]netip.Addr{netip.MustParseAddr("10.0.0.1")}, Options{Src4: probeSrc6}},
		"IPv4 source for NS":  {[]netip.Addr{netip.MustParseAddr("fd00::1")}, Options{Src6: probeSrc4}},
	} {
		c := &fakeConn{}
		if _, err := ProbeConn(context.Background(), c, probeHW, tc.addrs, tc.opts); err == nil || len(c.written) != 0 || !c.closed {
			t.Errorf("%s: err=%v, %d frames written, closed=%v; want an error, nothing sent, conn closed", name, err, len(c.written), c.closed)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := &fakeConn{replies: [][]byte{arpFrame(t, arp.OperationReply, macA, netip.MustParseAddr("10.0.0.1"))}}
	got, err := ProbeConn(ctx, c, probeHW, []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Options{Wait: time.Second})
	if !errors.Is(err, context.Canceled) || len(got) != 1 {
		t.Fatalf("cancelled: %v, %v; want what was seen and context.Canceled", got, err)
	}
}

func TestParseClaim(t *testing.T) {
	vip := netip.MustParseAddr("10.213.0.100")
	c, ok := parseClaim(arpFrame(t, arp.OperationReply, macA, vip))
	if !ok || c.addr != vip || !bytes.Equal(c.mac, macA) || !bytes.Equal(c.from, macA) || !bytes.Equal(c.to, probeHW) {
		t.Fatalf("ARP reply: %+v %v", c, ok)
	}
	// Requests claim nothing, ours or theirs.
	req, _, err := solicit(macA, netip.MustParseAddr("10.213.0.12"), vip)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := parseClaim(req); ok {
		t.Fatal("an ARP request counted as a claim")
	}
	// An IPv6 solicitation parses as a frame but claims nothing.
	ns, dst, err := solicit(probeHW, probeSrc6, netip.MustParseAddr("fd00:213::64"))
	if err != nil || dst.String() != "33:33:ff:00:00:64" {
		t.Fatalf("NS to %v: %v", dst, err)
	}
	if _, ok := parseClaim(ns); ok {
		t.Fatal("a solicitation counted as a claim")
	}
	v6 := netip.MustParseAddr("fd00:213::64")
	if c, ok := parseClaim(naFrame(t, macB, v6, false)); !ok || c.addr != v6 || !bytes.Equal(c.mac, macB) {
		t.Fatalf("NA without option: %+v %v", c, ok)
	}
}
