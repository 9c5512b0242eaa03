package agent

import (
	"context"
	"fmt"
	"maps"
	"math/rand"
	"net/netip"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/announce"
)

// mutableLinks is agenttest.Links whose interfaces the test changes.
type mutableLinks struct {
	agenttest.Links
	mu     sync.Mutex
	ifaces []announce.Interface
}

func (l *mutableLinks) Interfaces() ([]announce.Interface, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ifaces), nil
}

// tableSet is a responder table as sets (order does not matter).
func tableSet(t map[int][]netip.Addr) map[int]map[netip.Addr]bool {
	out := map[int]map[netip.Addr]bool{}
	for i, addrs := range t {
		for _, a := range addrs {
			if out[i] == nil {
				out[i] = map[netip.Addr]bool{}
			}
			out[i][a] = true
		}
	}
	return out
}

// The responder, told only the addresses that changed after its first
// table, answers exactly for the full recompute's table after random
// sequences of Service events, members leaving and coming back and
// interfaces appearing and going.
func TestResponderUpdatesMatchFullRecompute(t *testing.T) {
	for seed := range int64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			a, c, mem, resp, _ := fixture(t)
			links := &mutableLinks{ifaces: []announce.Interface{{Name: "lo", Index: 1, Loopback: true}, {Name: "eth0", Index: 2}}}
			a.deps.Links = links
			ctx := context.Background()
			if err := a.decide(ctx); err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewSource(seed))
			all := []string{"node-1", "node-2", "node-3"}
			for step := range 150 {
				switch n := r.Intn(10); {
				case n < 6:
					name := fmt.Sprintf("s%d", r.Intn(40))
					svc := agenttest.LBService("default", name, fmt.Sprintf("10.213.1.%d", r.Intn(50)))
					if r.Intn(4) == 0 {
						svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: fmt.Sprintf("fd00:213::%d", r.Intn(20))})
					}
					_ = c.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
					if r.Intn(4) > 0 {
						if err := c.Create(ctx, &svc); err != nil {
							t.Fatal(err)
						}
					}
					a.dirty.service(types.NamespacedName{Namespace: "default", Name: name})
				case n < 8:
					members := slices.DeleteFunc(slices.Clone(all), func(string) bool { return r.Intn(3) == 0 })
					if !slices.Contains(members, a.cfg.NodeName) {
						members = append(members, a.cfg.NodeName)
					}
					mem.Set(members...)
				default:
					next := []announce.Interface{{Name: "lo", Index: 1, Loopback: true}}
					for i := 2; i <= 4; i++ {
						if r.Intn(2) == 0 {
							next = append(next, announce.Interface{Name: fmt.Sprintf("eth%d", i-2), Index: i})
						}
					}
					links.mu.Lock()
					links.ifaces = next
					links.mu.Unlock()
					a.Trigger()
				}
				if r.Intn(3) > 0 {
					continue // several events per decision
				}
				if err := a.decide(ctx); err != nil {
					t.Fatal(err)
				}
				want := tableSet(fullDecision(t, a, c).Desired())
				if got := tableSet(resp.Table()); !maps.EqualFunc(got, want, maps.Equal) {
					t.Fatalf("step %d: responder answers\n%v\nfull recompute\n%v", step, got, want)
				}
			}
		})
	}
}
