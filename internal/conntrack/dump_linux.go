//go:build linux

package conntrack

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"

	ct "github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"
)

// The ctnetlink message and attribute numbers dump reads
// (linux/netfilter/nfnetlink_conntrack.h, nf_conntrack_common.h).
const (
	ctnlGet = unix.NFNL_SUBSYS_CTNETLINK<<8 | 1 // IPCTNL_MSG_CT_GET

	ctaTupleOrig, ctaTupleReply, ctaStatus, ctaProtoInfo, ctaTimeout, ctaZone = 1, 2, 3, 4, 7, 18
	ctaTupleIP, ctaTupleProto                                                 = 1, 2
	ctaIPv4Src, ctaIPv4Dst, ctaIPv6Src, ctaIPv6Dst                            = 1, 2, 3, 4
	ctaProtoNum, ctaProtoSrcPort, ctaProtoDstPort                             = 1, 2, 3
	ctaProtoICMPID, ctaProtoICMPType, ctaProtoICMPCode                        = 4, 5, 6
	ctaProtoICMPv6ID, ctaProtoICMPv6Type, ctaProtoICMPv6Code                  = 7, 8, 9
	ctaProtoInfoTCP, ctaProtoInfoTCPState                                     = 1, 1

	ipsSeenReply = 1 << 1 // IPS_SEEN_REPLY

	nlaTypeMask = 0x3fff // without NLA_F_NESTED and NLA_F_NET_BYTEORDER
)

// entry is what dump decodes of an entry: enough to judge it and to
// delete it.
type entry struct {
	orig, reply ct.Tuple
	zone        uint16
	timeout     uint32 // seconds left
	status      uint32 // IPS_* bits
	tcpState    uint8  // TCP entries only
}

// seenReply reports whether the entry has seen a packet in the reply
// direction.
func (e entry) seenReply() bool { return e.status&ipsSeenReply != 0 }

// family is the dump's address family for the families wanted:
// unix.AF_INET, AF_INET6 or, for both, AF_UNSPEC (one pass over the whole
// table).
func family(v4, v6 bool) uint8 {
	switch {
	case v4 && !v6:
		return unix.AF_INET
	case v6 && !v4:
		return unix.AF_INET6
	}
	return unix.AF_UNSPEC
}

// dump streams the conntrack table of family (unix.AF_INET, AF_INET6 or
// AF_UNSPEC for both) of the calling thread's network namespace and calls
// fn for every entry it can read. Memory stays one receive buffer whatever
// the table's size (ti-mo/conntrack's Dump holds the whole table, ~2.6 KB
// an entry: 26 MB at 10,000 entries).
func dump(family uint8, fn func(entry)) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return fmt.Errorf("conntrack: netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("conntrack: netlink bind: %w", err)
	}
	req := make([]byte, unix.NLMSG_HDRLEN+4)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], ctnlGet)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], 1) // sequence
	req[unix.NLMSG_HDRLEN] = family           // nfgenmsg: family, version 0, resource id 0
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("conntrack: dump request: %w", err)
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("conntrack: reading the dump: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("conntrack: reading the dump: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
						return fmt.Errorf("conntrack: dump: %w", syscall.Errno(-errno))
					}
				}
				return nil
			}
			if len(m.Data) < 4 {
				continue
			}
			if e, ok := decode(m.Data[4:]); ok {
				fn(e)
			}
		}
	}
}

// eachAttr calls fn with every attribute of b (netlink TLVs) until fn
// returns false; a malformed tail ends the walk.
func eachAttr(b []byte, fn func(typ uint16, v []byte) bool) {
	for len(b) >= unix.SizeofNlAttr {
		l := int(binary.NativeEndian.Uint16(b))
		if l < unix.SizeofNlAttr || l > len(b) {
			return
		}
		if !fn(binary.NativeEndian.Uint16(b[2:])&nlaTypeMask, b[unix.SizeofNlAttr:l]) {
			return
		}
		b = b[min(len(b), (l+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1)):]
	}
}

// decode decodes one entry's attributes; ok is false for an entry without
// both tuples.
func decode(b []byte) (e entry, ok bool) {
	var origOK, replyOK bool
	eachAttr(b, func(typ uint16, v []byte) bool {
		switch typ {
		case ctaTupleOrig:
			e.orig, origOK = decodeTuple(v)
		case ctaTupleReply:
			e.reply, replyOK = decodeTuple(v)
		case ctaTimeout:
			if len(v) == 4 {
				e.timeout = binary.BigEndian.Uint32(v)
			}
		case ctaZone:
			if len(v) == 2 {
				e.zone = binary.BigEndian.Uint16(v)
			}
		case ctaStatus:
			if len(v) == 4 {
				e.status = binary.BigEndian.Uint32(v)
			}
		case ctaProtoInfo:
			eachAttr(v, func(typ uint16, v []byte) bool {
				if typ == ctaProtoInfoTCP {
					eachAttr(v, func(typ uint16, v []byte) bool {
						if typ == ctaProtoInfoTCPState && len(v) == 1 {
							e.tcpState = v[0]
						}
						return true
					})
				}
				return true
			})
		}
		return true
	})
	return e, origOK && replyOK
}

// decodeTuple decodes a CTA_TUPLE_ORIG or CTA_TUPLE_REPLY: addresses, the
// protocol and its ports or, for ICMP and ICMPv6, its identifier, type and
// code (what a delete request must name).
func decodeTuple(b []byte) (t ct.Tuple, ok bool) {
	eachAttr(b, func(typ uint16, v []byte) bool {
		switch typ {
		case ctaTupleIP:
			eachAttr(v, func(typ uint16, v []byte) bool {
				a, _ := netip.AddrFromSlice(v)
				switch typ {
				case ctaIPv4Src, ctaIPv6Src:
					t.IP.SourceAddress = a
				case ctaIPv4Dst, ctaIPv6Dst:
					t.IP.DestinationAddress = a
				}
				return true
			})
		case ctaTupleProto:
			eachAttr(v, func(typ uint16, v []byte) bool {
				switch {
				case typ == ctaProtoNum && len(v) == 1:
					t.Proto.Protocol = v[0]
				case typ == ctaProtoSrcPort && len(v) == 2:
					t.Proto.SourcePort = binary.BigEndian.Uint16(v)
				case typ == ctaProtoDstPort && len(v) == 2:
					t.Proto.DestinationPort = binary.BigEndian.Uint16(v)
				case (typ == ctaProtoICMPID || typ == ctaProtoICMPv6ID) && len(v) == 2:
					t.Proto.ICMPID = binary.BigEndian.Uint16(v)
				case (typ == ctaProtoICMPType || typ == ctaProtoICMPv6Type) && len(v) == 1:
					t.Proto.ICMPType = v[0]
				case (typ == ctaProtoICMPCode || typ == ctaProtoICMPv6Code) && len(v) == 1:
					t.Proto.ICMPCode = v[0]
				}
				return true
			})
		}
		return true
	})
	return t, t.IP.SourceAddress.IsValid() && t.IP.DestinationAddress.IsValid()
}

// deleteSelected deletes the entries of family sel picks: one streamed
// dump, then one delete request per entry picked. An entry that expired in
// between is not an error.
func deleteSelected(family uint8, sel func(entry) bool) (int, error) {
	var picked []ct.Flow
	if err := dump(family, func(e entry) {
		if sel(e) {
			picked = append(picked, ct.Flow{TupleOrig: e.orig, TupleReply: e.reply, Zone: e.zone})
		}
	}); err != nil {
		return 0, err
	}
	if len(picked) == 0 {
		return 0, nil
	}
	c, err := ct.Dial(nil)
	if err != nil {
		return 0, fmt.Errorf("conntrack: opening netlink: %w", err)
	}
	defer c.Close()
	return deleteFlows(c, picked)
}
