//go:build linux

package responder

import (
	"fmt"
	"net"

	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// nsFilter keeps only ICMPv6 neighbour solicitations (next header 58 right
// after the fixed IPv6 header, ICMPv6 type 135) so that ordinary IPv6
// traffic is never copied to userspace. Offsets count from the Ethernet
// header of an untagged frame (the kernel strips offloaded VLAN tags).
var nsFilter = mustAssemble([]bpf.Instruction{
	bpf.LoadAbsolute{Off: 14 + 6, Size: 1},
	bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: protoICMPv6, SkipTrue: 3},
	bpf.LoadAbsolute{Off: offsetICMPType, Size: 1},
	bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: icmpTypeNS, SkipTrue: 1},
	bpf.RetConstant{Val: 0xffff},
	bpf.RetConstant{Val: 0},
})

func mustAssemble(prog []bpf.Instruction) []bpf.RawInstruction {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		panic(fmt.Sprintf("responder: invalid BPF program: %v", err))
	}
	return raw
}

// openLink opens the ARP and NDP packet sockets of one interface, found by
// index (never by name: Go caches names process-wide). Both are created on
// the calling thread, hence in its network namespace.
func openLink(ifindex int) (*Link, error) {
	ifi, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("responder: interface %d: %w", ifindex, err)
	}
	arpc, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_ARP, nil)
	if err != nil {
		return nil, fmt.Errorf("responder: ARP socket on %s (%d) (needs CAP_NET_RAW): %w", ifi.Name, ifindex, err)
	}
	ndpc, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_IPV6, &packet.Config{Filter: nsFilter})
	if err != nil {
		_ = arpc.Close()
		return nil, fmt.Errorf("responder: NDP socket on %s (%d): %w", ifi.Name, ifindex, err)
	}
	return &Link{Index: ifindex, Name: ifi.Name, MAC: ifi.HardwareAddr, ARP: arpc, NDP: ndpc}, nil
}
