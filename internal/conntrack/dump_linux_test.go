//go:build linux

package conntrack

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// attr encodes one netlink attribute (nested when typ carries
// NLA_F_NESTED), padded to 4 bytes.
func attr(typ uint16, v []byte) []byte {
	b := make([]byte, unix.SizeofNlAttr, unix.SizeofNlAttr+len(v)+3)
	binary.NativeEndian.PutUint16(b, uint16(unix.SizeofNlAttr+len(v)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, v...)
	for len(b)%unix.NLA_ALIGNTO != 0 {
		b = append(b, 0)
	}
	return b
}

func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

// entryAttrs is an entry as ctnetlink sends it: a client's connection to
// 10.213.0.101 translated to 10.244.1.5 (ESTABLISHED for TCP), with ports
// for TCP and UDP and identifier, type and code for ICMP and ICMPv6.
func entryAttrs(proto uint8) []byte {
	const nested = unix.NLA_F_NESTED
	tuple := func(src, dst string, sport, dport uint16) []byte {
		l4 := cat(attr(ctaProtoSrcPort, be16(sport)), attr(ctaProtoDstPort, be16(dport)))
		switch proto {
		case unix.IPPROTO_ICMP:
			l4 = cat(attr(ctaProtoICMPType, []byte{8}), attr(ctaProtoICMPCode, []byte{0}), attr(ctaProtoICMPID, be16(sport)))
		case unix.IPPROTO_ICMPV6:
			l4 = cat(attr(ctaProtoICMPv6Type, []byte{128}), attr(ctaProtoICMPv6Code, []byte{0}), attr(ctaProtoICMPv6ID, be16(sport)))
		}
		return cat(
			attr(nested|ctaTupleIP, cat(attr(ctaIPv4Src, netip.MustParseAddr(src).AsSlice()), attr(ctaIPv4Dst, netip.MustParseAddr(dst).AsSlice()))),
			attr(nested|ctaTupleProto, cat(attr(ctaProtoNum, []byte{proto}), l4)))
	}
	b := cat(
		attr(nested|ctaTupleOrig, tuple("10.214.0.250", "10.213.0.101", 40001, 80)),
		attr(nested|ctaTupleReply, tuple("10.244.1.5", "10.214.0.250", 8080, 40001)),
		attr(ctaStatus, binary.BigEndian.AppendUint32(nil, ipsSeenReply|1<<3)),
		attr(ctaTimeout, binary.BigEndian.AppendUint32(nil, 431990)),
		attr(ctaZone, be16(7)))
	if proto == unix.IPPROTO_TCP {
		b = cat(b, attr(nested|ctaProtoInfo, attr(nested|ctaProtoInfoTCP, attr(ctaProtoInfoTCPState, []byte{tcpEstablished}))))
	}
	return b
}

// TestDecode reads the fields Delete and ForgetIdle need from entries as
// the kernel encodes them: both tuples (ports, or ICMP's identifier, type
// and code: what a delete request must name), status, timeout, zone and
// TCP's state; an entry without its reply tuple is skipped.
func TestDecode(t *testing.T) {
	for _, proto := range []uint8{unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6} {
		e, ok := decode(entryAttrs(proto))
		if !ok || e.orig.IP.DestinationAddress != netip.MustParseAddr("10.213.0.101") ||
			e.reply.IP.SourceAddress != netip.MustParseAddr("10.244.1.5") || e.orig.Proto.Protocol != proto ||
			!e.seenReply() || e.timeout != 431990 || e.zone != 7 {
			t.Errorf("decode(protocol %d) = %+v, %v", proto, e, ok)
			continue
		}
		switch proto {
		case unix.IPPROTO_TCP:
			if e.tcpState != tcpEstablished || e.orig.Proto.SourcePort != 40001 || e.reply.Proto.SourcePort != 8080 {
				t.Errorf("decode(TCP) = %+v", e)
			}
		case unix.IPPROTO_UDP:
			if e.tcpState != 0 || e.orig.Proto.DestinationPort != 80 || e.reply.Proto.DestinationPort != 40001 {
				t.Errorf("decode(UDP) = %+v", e)
			}
		case unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6:
			want := uint8(8)
			if proto == unix.IPPROTO_ICMPV6 {
				want = 128
			}
			if e.orig.Proto.ICMPID != 40001 || e.orig.Proto.ICMPType != want || e.reply.Proto.ICMPID != 8080 {
				t.Errorf("decode(ICMP %d) = %+v", proto, e)
			}
		}
	}
	b := entryAttrs(unix.IPPROTO_TCP)
	orig := binary.NativeEndian.Uint16(b) // the first attribute: the original tuple
	if _, ok := decode(b[orig:]); ok {
		t.Error("an entry without its original tuple decoded")
	}
}

// FuzzDecode: whatever the bytes, decoding neither panics nor reads past
// them.
func FuzzDecode(f *testing.F) {
	for _, proto := range []uint8{unix.IPPROTO_TCP, unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6} {
		f.Add(entryAttrs(proto))
	}
	f.Add([]byte{})
	f.Add([]byte{4, 0, 1, 0, 255, 255, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		decode(b)
	})
}
