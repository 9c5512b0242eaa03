package netlab

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
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
)

func frame(t *testing.T, dst, src net.HardwareAddr, et ethernet.EtherType, payload []byte) []byte {
	t.Helper()
	b, _, err := ethFrame(dst, src, et, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func arpFrame(t *testing.T, op arp.Operation, from net.HardwareAddr, ip netip.Addr) []byte {
	t.Helper()
	p, err := arp.NewPacket(op, from, ip, probeHW, netip.MustParseAddr("10.213.0.250"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.MarshalBinary()
	return frame(t, probeHW, from, ethernet.EtherTypeARP, b)
}

func TestProbeConnARP(t *testing.T) {
	vip, other := netip.MustParseAddr("10.213.0.100"), netip.MustParseAddr("10.213.0.101")
	c := &fakeConn{replies: [][]byte{
		arpFrame(t, arp.OperationReply, macA, vip),
		arpFrame(t, arp.OperationReply, macB, vip),
		arpFrame(t, arp.OperationReply, macA, vip),   // duplicate
		arpFrame(t, arp.OperationReply, macA, other), // another address
		arpFrame(t, arp.OperationRequest, macA, vip), // a request, not an answer
		{0x01, 0x02}, // garbage
	}}
	got, err := ProbeConn(context.Background(), c, probeHW, netip.MustParseAddr("10.213.0.250"), vip, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !bytes.Equal(got[0], macB) || !bytes.Equal(got[1], macA) {
		t.Fatalf("ProbeConn = %v, want [%s %s]", got, macB, macA)
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
		p.TargetIP != vip || p.SenderIP != netip.MustParseAddr("10.213.0.250") || !bytes.Equal(p.SenderHardwareAddr, probeHW) {
		t.Fatalf("request = %+v to %s", p, f.Destination)
	}
}

func naFrame(t *testing.T, from net.HardwareAddr, target netip.Addr, withOption bool) []byte {
	t.Helper()
	na := &ndp.NeighborAdvertisement{Solicited: true, TargetAddress: target}
	if withOption {
		na.Options = []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: from}}
	}
	src, dst := target, netip.MustParseAddr("fd00:213::fa")
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

func TestProbeConnNDP(t *testing.T) {
	vip := netip.MustParseAddr("fd00:213::64")
	c := &fakeConn{replies: [][]byte{
		naFrame(t, macA, vip, true),
		naFrame(t, macB, vip, false), // no option: the Ethernet source counts
		naFrame(t, macA, netip.MustParseAddr("fd00:213::65"), true),
	}}
	got, err := ProbeConn(context.Background(), c, probeHW, netip.MustParseAddr("fd00:213::fa"), vip, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !bytes.Equal(got[0], macB) || !bytes.Equal(got[1], macA) {
		t.Fatalf("ProbeConn = %v, want [%s %s]", got, macB, macA)
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
	if ns, ok := m.(*ndp.NeighborSolicitation); !ok || ns.TargetAddress != vip {
		t.Fatalf("sent %#v, want a neighbour solicitation for %s", m, vip)
	}
}

func FuzzAnswer(f *testing.F) {
	f.Add([]byte{}, true)
	f.Add(make([]byte, 60), false)
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) {
		addr := netip.MustParseAddr("10.213.0.100")
		if v6 {
			addr = netip.MustParseAddr("fd00:213::64")
		}
		if mac, ok := answer(b, probeHW, addr); ok && len(mac) == 0 {
			t.Fatalf("answer accepted %x with an empty MAC", b)
		}
	})
}
