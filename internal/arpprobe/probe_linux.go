//go:build linux

package arpprobe

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
)

// Listen opens an AF_PACKET socket on ifi, bound by ifi.Index, for the
// frames that carry fam's answers (ARP, or IPv6). The socket belongs to the
// network namespace of the calling thread: call Listen on a thread inside
// ifi's namespace (netlab's Host.Do); it may be used from any goroutine
// afterwards. Needs CAP_NET_RAW.
func Listen(ifi *net.Interface, fam Family) (net.PacketConn, error) {
	var proto ethernet.EtherType
	cfg := &packet.Config{}
	switch fam {
	case IPv4:
		proto = ethernet.EtherTypeARP
	case IPv6:
		proto = ethernet.EtherTypeIPv6
		cfg.Filter = neighborAdvertisements
	default:
		return nil, fmt.Errorf("arpprobe: listen: unknown %v", fam)
	}
	c, err := packet.Listen(ifi, packet.Raw, int(proto), cfg)
	if err != nil {
		return nil, fmt.Errorf("arpprobe: opening an %v packet socket on ifindex %d: %w", fam, ifi.Index, err)
	}
	return c, nil
}

// neighborAdvertisements keeps only ICMPv6 neighbour advertisements on
// the IPv6 socket, in the kernel, from before it is bound: without it the
// socket queues every IPv6 frame on the link, and while the prober is
// starved a busy link fills the socket's buffer (a few hundred frames) and
// the kernel drops the answer that came in time. An NA carries no
// extension headers (RFC 4861: hop limit 255, ICMPv6 right after the
// header).
var neighborAdvertisements = mustAssemble([]bpf.Instruction{
	bpf.LoadAbsolute{Off: 14 + 6, Size: 1},                                  // IPv6 next header
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_ICMPV6, SkipFalse: 3}, // not ICMPv6: drop
	bpf.LoadAbsolute{Off: 14 + 40, Size: 1},                                 // ICMPv6 type
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: 136, SkipFalse: 1},                 // not an NA: drop
	bpf.RetConstant{Val: 1 << 16},
	bpf.RetConstant{Val: 0},
})

func mustAssemble(prog []bpf.Instruction) []bpf.RawInstruction {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		panic(err)
	}
	return raw
}

// drain hands each frame already queued on conn to take, without waiting
// (MSG_DONTWAIT on the socket itself: Go's reads refuse to run once the
// deadline passed). A conn without a file descriptor is left alone.
func drain(conn net.PacketConn, buf []byte, take func([]byte)) {
	sc, ok := conn.(interface {
		SyscallConn() (syscall.RawConn, error)
	})
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		for range maxDrained {
			n, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			if err != nil || n <= 0 {
				return
			}
			take(buf[:n])
		}
	})
}

// maxDrained bounds one drain: the IPv6 socket sees every IPv6 frame on
// the link, and a busy link must not keep the prober reading.
const maxDrained = 4096
