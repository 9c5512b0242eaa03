package netlab

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// pingInterval is how often Ping repeats its echo request while no reply
// has come; the first one may be spent on neighbour resolution.
const pingInterval = 100 * time.Millisecond

// Ping sends ICMP echo requests from host from to addr until one is answered
// (nil) or ctx ends (ctx's error, wrapped). It uses a raw ICMP socket opened
// in from's namespace: unprivileged ping sockets are disabled in new
// namespaces (ping_group_range is "1 0"). Give ctx a deadline.
func Ping(ctx context.Context, from *Host, addr netip.Addr) error {
	addr = addr.Unmap()
	network, listen := "ip4:icmp", "0.0.0.0"
	var echo, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	proto := 1
	if addr.Is6() {
		network, listen = "ip6:ipv6-icmp", "::"
		echo, reply, proto = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply, 58
	}
	var conn *icmp.PacketConn
	err := from.Do(func() error {
		var err error
		conn, err = icmp.ListenPacket(network, listen)
		return err
	})
	if err != nil {
		return fmt.Errorf("netlab: ping from %s: opening ICMP socket: %w", from.Name, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	// A raw socket sees every ICMP message of the namespace; the random ID
	// tells our replies apart from other pingers'.
	id := int(rand.Uint32() & 0xffff)
	dst := &net.IPAddr{IP: addr.AsSlice()}
	buf := make([]byte, 1500)
	for seq := 1; ; seq++ {
		msg := icmp.Message{Type: echo, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("mooring-netlab")}}
		// For ICMPv6 the kernel fills in the checksum of raw sockets.
		b, err := msg.Marshal(nil)
		if err != nil {
			return fmt.Errorf("netlab: ping: %w", err)
		}
		if _, err := conn.WriteTo(b, dst); err != nil {
			return fmt.Errorf("netlab: ping %s from %s: %w", addr, from.Name, err)
		}
		if err := conn.SetReadDeadline(time.Now().Add(pingInterval)); err != nil {
			return err
		}
		for {
			if ctx.Err() != nil {
				return fmt.Errorf("netlab: ping %s from %s: no reply: %w", addr, from.Name, ctx.Err())
			}
			n, peer, err := conn.ReadFrom(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				return fmt.Errorf("netlab: ping %s from %s: %w", addr, from.Name, err)
			}
			if isReply(buf[:n], peer, proto, reply, id, addr) {
				return nil
			}
		}
	}
}

func isReply(b []byte, peer net.Addr, proto int, reply icmp.Type, id int, addr netip.Addr) bool {
	ip, ok := peer.(*net.IPAddr)
	if !ok {
		return false
	}
	if from, ok := netip.AddrFromSlice(ip.IP); !ok || from.Unmap() != addr {
		return false
	}
	m, err := icmp.ParseMessage(proto, b)
	if err != nil || m.Type != reply {
		return false
	}
	e, ok := m.Body.(*icmp.Echo)
	return ok && e.ID == id
}
