// Package arpprobe asks a segment who claims an address: ONE ARP request
// (IPv4) or ONE neighbour solicitation to the solicited-node group (IPv6)
// per address, then every MAC that answers within a window. More than one
// MAC for an address means more than one machine claims it (a stale copy
// on some node's lo with arp_ignore=0, two announcers), and a client keeps
// whichever answer reaches it first.
//
// Its users: the agent's split-brain check, `mooring audit arp`, and
// netlab.Probe for tests and the lab. Frame building and parsing are pure
// and fuzzed (the parser sees whatever arrives on the segment); the probe
// itself runs over any net.PacketConn carrying Ethernet frames, so it is
// tested without privileges. Listen (Linux) opens the real AF_PACKET
// socket, by ifindex only: Go caches interface names process-wide, which
// is wrong for threads that switched namespaces.
//
// The package may import the mdlayher packet libraries and golang.org/x/sys;
// nothing from k8s.io or sigs.k8s.io, nor any other Mooring package.
package arpprobe

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
)

// ErrUnsupported is returned by Listen on systems without AF_PACKET sockets.
var ErrUnsupported = errors.New("arpprobe: raw ARP/NDP sockets need Linux")

// Family selects the frames a probe socket carries.
type Family uint8

// The two families: ARP for IPv4, ICMPv6 neighbour discovery for IPv6.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// FamilyOf returns the family that probes addr (IPv4 for 4-in-6 addresses).
func FamilyOf(addr netip.Addr) Family {
	if addr.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("Family(%d)", uint8(f))
}

// Options shape one probe round.
type Options struct {
	// Src4 and Src6 are the sender addresses for IPv4 and IPv6 targets, each
	// one of the probing interface's own so that answers come back unicast.
	// The zero Addr sends an address probe instead (sender 0.0.0.0 per RFC
	// 5227, or :: as in duplicate address detection), answered to
	// broadcast / all-nodes. An address of the wrong family is an error.
	Src4, Src6 netip.Addr

	// Wait is how long answers are collected after the requests are sent
	// (less if ctx's deadline comes first).
	Wait time.Duration

	// ExcludeOwn drops frames sent from the probing interface's MAC and
	// claims naming it: for a prober that announces the addresses itself
	// and wants to know who ELSE does (the agent's split-brain check).
	// Without it, the probing interface's own claim counts like any other
	// (an audit run on a node reports that node too).
	ExcludeOwn bool

	// AnyDestination counts claims whatever their Ethernet destination,
	// including answers to other machines' questions that a promiscuous
	// interface sees. Without it, only frames addressed to the probing
	// interface or to broadcast/multicast (where answers to address probes
	// go) count: the answers to this probe.
	AnyDestination bool
}

// Result holds, per probed address that got an answer, the distinct MACs
// that claimed it, sorted. Keys are the probed addresses unmapped and
// without zone; an address nobody claimed has no key.
type Result map[netip.Addr][]net.HardwareAddr

// MACs returns the MACs that claimed addr, looked up as it was probed.
func (r Result) MACs(addr netip.Addr) []net.HardwareAddr { return r[key(addr)] }

// key is the form in which an address is probed and reported.
func key(addr netip.Addr) netip.Addr { return addr.Unmap().WithZone("") }

// ProbeConn sends one request per address in addrs over conn and collects
// the claims until opts.Wait has passed or ctx ends; then it closes conn.
// conn is an Ethernet-framed packet socket (Listen, or any net.PacketConn
// for tests) whose WriteTo takes a *packet.Addr and which carries the
// frames of every family in addrs; hw is the sending interface's MAC.
//
// No answer is not an error: the result is empty (at once for no addrs).
// If ctx ends first, ProbeConn returns what it saw with ctx's error.
func ProbeConn(ctx context.Context, conn net.PacketConn, hw net.HardwareAddr, addrs []netip.Addr, opts Options) (Result, error) {
	defer conn.Close()
	reqs, err := requests(hw, addrs, opts)
	if err != nil || len(reqs) == 0 {
		return nil, err
	}
	beforeSend()
	for _, r := range reqs {
		if _, err := conn.WriteTo(r.frame, &packet.Addr{HardwareAddr: r.dst}); err != nil {
			return nil, fmt.Errorf("arpprobe: sending the request for %s: %w", r.addr, err)
		}
	}
	// The wait counts from the requests' departure, and collect reads
	// what arrived before it concludes: a caller that ran late still waited
	// the whole wait for the answers.
	deadline := time.Now().Add(opts.Wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := conn.SetReadDeadline(deadline); err != nil {
		return nil, fmt.Errorf("arpprobe: setting the read deadline: %w", err)
	}
	// Cancellation without a deadline still has to wake the blocked read
	// (at once if ctx already ended).
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	beforeCollect()
	out, err := collect(conn, hw, reqs, opts)
	for _, macs := range out {
		slices.SortFunc(macs, func(a, b net.HardwareAddr) int { return bytes.Compare(a, b) })
	}
	if err != nil {
		return out, err
	}
	return out, ctx.Err()
}

// ProbeInterface probes addrs from ifi: one socket per family present in
// addrs, opened with Listen on the calling thread (hence in its network
// namespace), one round after the other. Only ifi.Index and
// ifi.HardwareAddr are used. Errors of the families are joined; the result
// holds what the others found.
func ProbeInterface(ctx context.Context, ifi *net.Interface, addrs []netip.Addr, opts Options) (Result, error) {
	out := Result{}
	var errs []error
	for _, fam := range []Family{IPv4, IPv6} {
		want := slices.DeleteFunc(slices.Clone(addrs), func(a netip.Addr) bool { return FamilyOf(a) != fam })
		if len(want) == 0 {
			continue
		}
		conn, err := Listen(ifi, fam)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		got, err := ProbeConn(ctx, conn, ifi.HardwareAddr, want, opts)
		maps.Copy(out, got)
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break // the next family would end at once with the same error
			}
		}
	}
	return out, errors.Join(errs...)
}

func collect(conn net.PacketConn, hw net.HardwareAddr, reqs []request, opts Options) (Result, error) {
	want := make(map[netip.Addr]bool, len(reqs))
	for _, r := range reqs {
		want[r.addr] = true
	}
	out := Result{}
	take := func(frame []byte) {
		c, ok := parseClaim(frame)
		if !ok || !want[c.addr] || !opts.counts(c, hw) ||
			slices.ContainsFunc(out[c.addr], func(m net.HardwareAddr) bool { return bytes.Equal(m, c.mac) }) {
			return
		}
		out[c.addr] = append(out[c.addr], slices.Clone(c.mac))
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := conn.ReadFrom(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Go reports a passed deadline without reading: a process
			// that was starved or stopped past it would miss answers that
			// are waiting in the socket. Read them without waiting.
			drain(conn, buf, take)
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("arpprobe: reading answers: %w", err)
		}
		take(buf[:n])
	}
}

// beforeCollect runs between the requests and the collection of answers:
// a test hook that makes the prober late (export_test.go).
var beforeCollect = func() {}

// beforeSend runs between the socket's opening and the requests: a test
// hook that lets frames queue on the socket first (export_test.go).
var beforeSend = func() {}

// counts applies opts' filters to a claim seen by the interface with MAC hw.
func (o Options) counts(c claim, hw net.HardwareAddr) bool {
	if !o.AnyDestination && !bytes.Equal(c.to, hw) && c.to[0]&1 == 0 {
		return false
	}
	return !o.ExcludeOwn || !bytes.Equal(c.from, hw) && !bytes.Equal(c.mac, hw)
}

// A request is one probe frame, its Ethernet destination and the address
// (unmapped, without zone) it asks about.
type request struct {
	addr  netip.Addr
	frame []byte
	dst   net.HardwareAddr
}

// requests builds every frame before anything is sent, so that a bad
// address fails the round instead of half-sending it.
func requests(hw net.HardwareAddr, addrs []netip.Addr, opts Options) ([]request, error) {
	reqs := make([]request, 0, len(addrs))
	for _, a := range addrs {
		a = key(a)
		if slices.ContainsFunc(reqs, func(r request) bool { return r.addr == a }) {
			continue
		}
		src := opts.Src4
		if a.Is6() {
			src = opts.Src6
		}
		frame, dst, err := solicit(hw, src.Unmap(), a)
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, request{addr: a, frame: frame, dst: dst})
	}
	return reqs, nil
}

// solicit builds the request frame for addr and its Ethernet destination.
func solicit(hw net.HardwareAddr, src, addr netip.Addr) ([]byte, net.HardwareAddr, error) {
	switch {
	case addr.Is4():
		return arpRequest(hw, src, addr)
	case addr.Is6():
		return neighborSolicitation(hw, src, addr)
	default:
		return nil, nil, fmt.Errorf("arpprobe: invalid address %v", addr)
	}
}

func arpRequest(hw net.HardwareAddr, src, addr netip.Addr) ([]byte, net.HardwareAddr, error) {
	if !src.IsValid() {
		src = netip.IPv4Unspecified()
	}
	if !src.Is4() {
		return nil, nil, fmt.Errorf("arpprobe: source %s for %s is not IPv4", src, addr)
	}
	p, err := arp.NewPacket(arp.OperationRequest, hw, src, ethernet.Broadcast, addr)
	if err != nil {
		return nil, nil, fmt.Errorf("arpprobe: building the ARP request for %s: %w", addr, err)
	}
	b, err := p.MarshalBinary()
	if err != nil {
		return nil, nil, fmt.Errorf("arpprobe: building the ARP request for %s: %w", addr, err)
	}
	return ethFrame(ethernet.Broadcast, hw, ethernet.EtherTypeARP, b)
}

func neighborSolicitation(hw net.HardwareAddr, src, addr netip.Addr) ([]byte, net.HardwareAddr, error) {
	if !src.IsValid() {
		src = netip.IPv6Unspecified()
	}
	if !src.Is6() {
		return nil, nil, fmt.Errorf("arpprobe: source %s for %s is not IPv6", src, addr)
	}
	group, err := ndp.SolicitedNodeMulticast(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("arpprobe: %w", err)
	}
	ns := &ndp.NeighborSolicitation{TargetAddress: addr}
	// RFC 4861 7.2.2: no source link-layer option with an unspecified source.
	if !src.IsUnspecified() {
		ns.Options = []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: hw}}
	}
	icmp, err := ndp.MarshalMessageChecksum(ns, src, group)
	if err != nil {
		return nil, nil, fmt.Errorf("arpprobe: building the neighbour solicitation for %s: %w", addr, err)
	}
	// A fixed 40-byte IPv6 header: no extension headers, hop limit 255 as
	// RFC 4861 requires, or receivers drop the message.
	ip6 := make([]byte, 40, 40+len(icmp))
	ip6[0] = 6 << 4
	binary.BigEndian.PutUint16(ip6[4:6], uint16(len(icmp)))
	ip6[6] = 58 // ICMPv6
	ip6[7] = ndp.HopLimit
	s, g := src.As16(), group.As16()
	copy(ip6[8:24], s[:])
	copy(ip6[24:40], g[:])
	// RFC 2464: IPv6 multicast maps to 33:33 and the group's last 32 bits.
	dst := net.HardwareAddr{0x33, 0x33, g[12], g[13], g[14], g[15]}
	return ethFrame(dst, hw, ethernet.EtherTypeIPv6, append(ip6, icmp...))
}

func ethFrame(dst, src net.HardwareAddr, et ethernet.EtherType, payload []byte) ([]byte, net.HardwareAddr, error) {
	f := &ethernet.Frame{Destination: dst, Source: src, EtherType: et, Payload: payload}
	b, err := f.MarshalBinary()
	if err != nil {
		return nil, nil, fmt.Errorf("arpprobe: building the frame: %w", err)
	}
	return b, dst, nil
}

// A claim is one frame's statement that mac owns addr. mac is what a client
// would learn: the ARP sender, or the advertisement's target link-layer
// option, else its Ethernet source. from and to are the frame's Ethernet
// addresses.
type claim struct {
	addr          netip.Addr
	mac, from, to net.HardwareAddr
}

// parseClaim reads an ARP reply or a neighbour advertisement out of an
// Ethernet frame; anything else claims nothing. It must never panic: it
// parses whatever arrives on the segment. A claim always names a 6-byte
// MAC, nothing else being something a client could learn.
func parseClaim(b []byte) (claim, bool) {
	var f ethernet.Frame
	if err := f.UnmarshalBinary(b); err != nil || len(f.Destination) != 6 {
		return claim{}, false
	}
	c := claim{from: f.Source, to: f.Destination}
	switch f.EtherType {
	case ethernet.EtherTypeARP:
		var p arp.Packet
		if err := p.UnmarshalBinary(f.Payload); err != nil || p.Operation != arp.OperationReply {
			return claim{}, false
		}
		c.addr, c.mac = p.SenderIP, p.SenderHardwareAddr
	case ethernet.EtherTypeIPv6:
		var ok bool
		if c.addr, c.mac, ok = advertisement(f.Payload, f.Source); !ok {
			return claim{}, false
		}
	default:
		return claim{}, false
	}
	return c, c.addr.IsValid() && len(c.mac) == 6
}

// advertisement reads a neighbour advertisement out of an IPv6 packet.
func advertisement(ip6 []byte, ethSrc net.HardwareAddr) (netip.Addr, net.HardwareAddr, bool) {
	if len(ip6) < 40 || ip6[0]>>4 != 6 || ip6[6] != 58 || ip6[7] != ndp.HopLimit {
		return netip.Addr{}, nil, false
	}
	end := 40 + int(binary.BigEndian.Uint16(ip6[4:6]))
	if end > len(ip6) {
		return netip.Addr{}, nil, false
	}
	m, err := ndp.ParseMessage(ip6[40:end])
	if err != nil {
		return netip.Addr{}, nil, false
	}
	na, ok := m.(*ndp.NeighborAdvertisement)
	if !ok {
		return netip.Addr{}, nil, false
	}
	target := na.TargetAddress.WithZone("")
	for _, o := range na.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
			return target, lla.Addr, true
		}
	}
	return target, ethSrc, true
}

// InterfaceProber returns a function that probes addresses from the
// interface called name (in this process's network namespace), asked from
// the interface's own global addresses: MetalLB's NDP responder ignores a
// solicitation without a source link-layer address, which a DAD-style one
// from :: does not carry. It is what the operator tools' --interface flag
// builds (`mooring doctor`, `mooring migrate metallb`).
func InterfaceProber(name string, wait time.Duration) (func(context.Context, []netip.Addr) (map[netip.Addr][]net.HardwareAddr, error), error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("--interface %q: %w", name, err)
	}
	po := Options{Wait: wait}
	if as, err := ifi.Addrs(); err == nil {
		for _, a := range as {
			p, err := netip.ParsePrefix(a.String())
			if err != nil || !p.Addr().IsGlobalUnicast() {
				continue
			}
			if ip := p.Addr().Unmap(); ip.Is4() && !po.Src4.IsValid() {
				po.Src4 = ip
			} else if ip.Is6() && !po.Src6.IsValid() {
				po.Src6 = ip
			}
		}
	}
	return func(ctx context.Context, addrs []netip.Addr) (map[netip.Addr][]net.HardwareAddr, error) {
		return ProbeInterface(ctx, ifi, addrs, po)
	}, nil
}
