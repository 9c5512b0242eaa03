package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/responder"
)

// nullConn is a GroupConn that reads nothing and writes nowhere.
type nullConn struct{ closed chan struct{} }

func (c nullConn) ReadFrom([]byte) (int, net.Addr, error)  { <-c.closed; return 0, nil, net.ErrClosed }
func (nullConn) WriteTo(b []byte, _ net.Addr) (int, error) { return len(b), nil }
func (c nullConn) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return nil
}
func (nullConn) LocalAddr() net.Addr               { return nil }
func (nullConn) SetDeadline(time.Time) error       { return nil }
func (nullConn) SetReadDeadline(time.Time) error   { return nil }
func (nullConn) SetWriteDeadline(time.Time) error  { return nil }
func (nullConn) JoinGroup(net.HardwareAddr) error  { return nil }
func (nullConn) LeaveGroup(net.HardwareAddr) error { return nil }

func nullOpen(ifindex int) (*responder.Link, error) {
	return &responder.Link{Index: ifindex, Name: fmt.Sprint("eth", ifindex), MAC: net.HardwareAddr{2, 0, 0, 0, 0, byte(ifindex)},
		ARP: nullConn{make(chan struct{})}, NDP: nullConn{make(chan struct{})}}, nil
}

// withNullResponder gives a the real responder over null sockets, running
// until the benchmark ends, and makes the first decision (the whole table).
// One gratuitous round: at thousands of new addresses per second the
// default series (5 rounds over 3 s) would make a benchmark measure the
// responder's pending list instead of the decision.
func withNullResponder(b *testing.B, a *Agent) context.Context {
	b.Helper()
	m := responder.NewWithOpener(responder.Config{GratuitousCount: 1}, nil, prometheus.NewRegistry(), nullOpen)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	a.deps.Responder, a.loop.applied = m, false
	if err := a.decide(ctx); err != nil {
		b.Fatal(err)
	}
	return ctx
}

// BenchmarkDecideNewService10k is one decision for one new Service with
// 10,000 present, as during a burst of creations: "local" when this node
// becomes its owner (the responder is involved), "other" when another node
// does. The responder is the real one, running, over null sockets.
func BenchmarkDecideNewService10k(b *testing.B) {
	a, cs := snapshotBenchAgent(b, 10000)
	ctx := withNullResponder(b, a)
	members := a.deps.Members.Members()
	next := 0
	addrFor := func(local bool) netip.Addr {
		for {
			next++
			ad := netip.AddrFrom4([4]byte{10, byte(200 + next>>16), byte(next >> 8), byte(next)}) // unique up to 3.6M
			if (announce.Rank(members, ad)[0] == a.cfg.NodeName) == local {
				return ad
			}
		}
	}
	base := agenttest.RealisticService(0)
	for _, local := range []bool{true, false} {
		b.Run(map[bool]string{true: "local", false: "other"}[local], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				svc := *base
				svc.Namespace, svc.Name = "burst", fmt.Sprintf("new-%06d", next)
				svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: addrFor(local).String()}}
				if err := cs.Update(&svc); err != nil {
					b.Fatal(err)
				}
				a.dirty.service(types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name})
				if err := a.decide(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecideMemberLoss10k is the decision of a node loss with 10,000
// Services on 3 nodes: one peer leaves the member set and this node takes
// its share of the lost node's addresses (about 870 of these Services'), the real responder
// running over null sockets (its gratuitous round included). Each
// iteration brings the peer back untimed.
func BenchmarkDecideMemberLoss10k(b *testing.B) {
	a, _ := snapshotBenchAgent(b, 10000)
	ctx := withNullResponder(b, a)
	mem := a.deps.Members.(*agenttest.Members)
	owned := func() int { return len(a.loop.answered) }
	before, after := owned(), 0
	b.ReportAllocs()
	for b.Loop() {
		mem.Set("node-1", "node-3")
		if err := a.decide(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		after = owned()
		mem.Set("node-1", "node-2", "node-3")
		if err := a.decide(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(after-before), "taken/op")
}
