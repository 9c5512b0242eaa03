package agenttest

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooringlb/mooring/internal/agent/mailbox"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/responder"
)

// IP parses an address or panics.
func IP(s string) netip.Addr { return netip.MustParseAddr(s) }

// LBService is a LoadBalancer Service with ips in its status.
func LBService(ns, name string, ips ...string) corev1.Service {
	svc := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return svc
}

// Node is a Node with only a name.
func Node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// Members is a member set the test sets.
type Members struct {
	mu      sync.Mutex
	Live    []string
	Peers   []string
	Changed chan struct{}
}

// NewMembers returns the member set names.
func NewMembers(names ...string) *Members {
	return &Members{Live: names, Changed: make(chan struct{}, 1)}
}

func (f *Members) Members() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.Live)
}
func (f *Members) Changes() <-chan struct{} { return f.Changed }
func (f *Members) SetPeers(p []string)      { f.mu.Lock(); f.Peers = p; f.mu.Unlock() }

// Set replaces the live members and signals a change.
func (f *Members) Set(m ...string) {
	f.mu.Lock()
	f.Live = m
	f.mu.Unlock()
	mailbox.Poke(f.Changed)
}

// Responder records the table it is given.
type Responder struct {
	mu    sync.Mutex
	table map[int][]netip.Addr
}

func (f *Responder) Apply(d map[int][]netip.Addr) { f.mu.Lock(); f.table = d; f.mu.Unlock() }

// Update changes the table as responder.Manager does; an interface left
// with no address disappears from it.
func (f *Responder) Update(cs []responder.Change) {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := map[int][]netip.Addr{}
	for i, addrs := range f.table {
		next[i] = slices.Clone(addrs)
	}
	for _, c := range cs {
		next[c.IfIndex] = slices.DeleteFunc(next[c.IfIndex], func(a netip.Addr) bool { return a == c.Addr })
		if c.On {
			next[c.IfIndex] = append(next[c.IfIndex], c.Addr)
			slices.SortFunc(next[c.IfIndex], netip.Addr.Compare)
		}
		if len(next[c.IfIndex]) == 0 {
			delete(next, c.IfIndex)
		}
	}
	f.table = next
}

// Table is the table the responder holds now.
func (f *Responder) Table() map[int][]netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.table
}

// Links is a node with lo and eth0.
type Links struct {
	LocalAddrs []announce.LocalAddr
	Nets       map[int][]netip.Prefix
}

func (Links) Interfaces() ([]announce.Interface, error) {
	return []announce.Interface{{Name: "lo", Index: 1, Loopback: true}, {Name: "eth0", Index: 2}}, nil
}
func (f Links) Addrs() ([]announce.LocalAddr, error)      { return f.LocalAddrs, nil }
func (Links) Watch(ctx context.Context, _ func()) error   { <-ctx.Done(); return nil }
func (f Links) Prefixes() (map[int][]netip.Prefix, error) { return f.Nets, nil }

// Sysctls are arp_ignore values by interface name (0 when absent).
type Sysctls map[string]int

func (f Sysctls) ArpIgnore(name string) (int, error) { return f[name], nil }

// Prober answers every probe with the MACs listed for the address.
type Prober map[netip.Addr][]net.HardwareAddr

func (f Prober) Probe(_ context.Context, _ int, addrs []netip.Addr, _ time.Duration) (map[netip.Addr][]net.HardwareAddr, error) {
	out := map[netip.Addr][]net.HardwareAddr{}
	for _, a := range addrs {
		out[a] = f[a]
	}
	return out, nil
}
