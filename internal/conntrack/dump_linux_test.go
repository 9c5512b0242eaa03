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

// tcpAttrs is a TCP entry as ctnetlink sends it (IPv4, ESTABLISHED).
func tcpAttrs(proto uint8) []byte {
	const nested = unix.NLA_F_NESTED
	tuple := func(src, dst string, sport, dport uint16) []byte {
		return cat(
			attr(nested|ctaTupleIP, cat(attr(ctaIPv4Src, netip.MustParseAddr(src).AsSlice()), attr(ctaIPv4Dst, netip.MustParseAddr(dst).AsSlice()))),
			attr(nested|ctaTupleProto, cat(attr(ctaProtoNum, []byte{proto}), attr(ctaProtoSrcPort, be16(sport)), attr(ctaProtoDstPort, be16(dport)))))
	}
	return cat(
		attr(nested|ctaTupleOrig, tuple("10.214.0.250", "10.213.0.101", 40001, 80)),
		attr(nested|ctaTupleReply, tuple("10.244.1.5", "10.214.0.250", 8080, 40001)),
		attr(nested|ctaProtoInfo, attr(nested|ctaProtoInfoTCP, attr(ctaProtoInfoTCPState, []byte{tcpEstablished}))),
		attr(ctaTimeout, binary.BigEndian.AppendUint32(nil, 431990)),
		attr(ctaZone, be16(7)))
}

// TestDecodeTCP reads the fields ForgetIdle needs from an entry as the
// kernel encodes it, and skips entries of other protocols.
func TestDecodeTCP(t *testing.T) {
	e, ok := decodeTCP(tcpAttrs(unix.IPPROTO_TCP))
	if !ok || e.orig.IP.DestinationAddress != netip.MustParseAddr("10.213.0.101") || e.orig.Proto.SourcePort != 40001 ||
		e.reply.IP.SourceAddress != netip.MustParseAddr("10.244.1.5") || e.reply.Proto.SourcePort != 8080 ||
		e.state != tcpEstablished || e.timeout != 431990 || e.zone != 7 {
		t.Errorf("decodeTCP = %+v, %v", e, ok)
	}
	if _, ok := decodeTCP(tcpAttrs(unix.IPPROTO_UDP)); ok {
		t.Error("a UDP entry decoded as TCP")
	}
}

// FuzzDecodeTCP: whatever the bytes, decoding neither panics nor reads
// past them.
func FuzzDecodeTCP(f *testing.F) {
	f.Add(tcpAttrs(unix.IPPROTO_TCP))
	f.Add([]byte{})
	f.Add([]byte{4, 0, 1, 0, 255, 255, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeTCP(b)
	})
}
