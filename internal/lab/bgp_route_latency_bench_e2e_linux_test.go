package lab_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lab"
)

// envBenchBGPRoute turns TestBenchLabBGPCreateToRoute on with this many
// Services (off by default: a measurement for docs/benchmarks.md).
const envBenchBGPRoute = "MOORING_LAB_BENCH_BGP_ROUTE"

// TestBenchLabBGPCreateToRoute measures issue 20's "Service created →
// route at the router" one Service at a time, in the BGP lab (FRR 8.4
// router, every node a neighbour, TCP-MD5): it creates a dual-stack
// LoadBalancer Service of the demo pool, notes when the Service's status
// names both addresses (its watch), and polls the router's kernel table
// every 5 ms, each family on its own, until the route carries all three
// nodes (externalTrafficPolicy: Cluster: every node advertises); then it
// deletes the Service and polls until both routes are gone. The kernel's
// table is what zebra installed from bgpd's best paths: the whole way from
// the API server through the controller, the agents, GoBGP, bgpd and
// zebra.
//
//	MOORING_LAB_BENCH_BGP_ROUTE=100 go test -count=1 -timeout 20m \
//	    -run 'TestBenchLabBGPCreateToRoute$' -v ./internal/lab
func TestBenchLabBGPCreateToRoute(t *testing.T) {
	n := envInt(t, envBenchBGPRoute, 0)
	if n == 0 {
		t.Skipf("a benchmark: set %s=N (Services, one at a time)", envBenchBGPRoute)
	}
	b := startBGPLab(t, 0)
	cs := labClientset(t, b.r)
	var hops [2][]netip.Addr
	for _, node := range b.nodes {
		hops[0], hops[1] = append(hops[0], b.addr4[node]), append(hops[1], b.addr6[node])
	}
	for f := range hops {
		slices.SortFunc(hops[f], netip.Addr.Compare)
	}
	var created, statused, deleted [2][]time.Duration
	var toStatus []time.Duration
	for i := range n {
		m := measureRouteOnce(t, b, cs, fmt.Sprintf("route-latency-%d", i), hops)
		toStatus = append(toStatus, m.status)
		for f := range 2 {
			created[f] = append(created[f], m.route[f])
			statused[f] = append(statused[f], m.route[f]-m.status)
			deleted[f] = append(deleted[f], m.gone[f])
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("BENCH bgp route, n = %d: created → both addresses in the status: %s", n, percentiles(toStatus))
	for f, fam := range []string{"IPv4", "IPv6"} {
		t.Logf("BENCH bgp route %s: created → route over all 3 nodes in the router's kernel: %s", fam, percentiles(created[f]))
		t.Logf("BENCH bgp route %s: address in the status → that route: %s", fam, percentiles(statused[f]))
		t.Logf("BENCH bgp route %s: deleted → route gone: %s", fam, percentiles(deleted[f]))
	}
}

// routeTimes are one Service's times from its creation (status, route per
// family) and from its deletion (gone per family).
type routeTimes struct {
	status time.Duration
	route  [2]time.Duration
	gone   [2]time.Duration
}

// measureRouteOnce creates the Service name, waits for its addresses and
// their routes over hops, deletes it and waits for the routes to go.
func measureRouteOnce(t *testing.T, b *bgpLab, cs kubernetes.Interface, name string, hops [2][]netip.Addr) routeTimes {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	svcs := cs.CoreV1().Services(lab.DemoNamespace)
	w, err := svcs.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.DemoNamespace},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: ptr.To(mooringv1.LoadBalancerClass),
			IPFamilyPolicy:    ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			IPFamilies:        []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: lab.DemoPort,
				TargetPort: intstr.FromInt32(lab.EchoPort)}},
		},
	}
	var m routeTimes
	start := time.Now()
	if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var vips [2]netip.Prefix
	for !vips[0].IsValid() || !vips[1].IsValid() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: no IPv4 and IPv6 address in its status after a minute", name)
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("%s: the watch ended", name)
			}
			s, isSvc := ev.Object.(*corev1.Service)
			if ev.Type == watch.Error || !isSvc {
				t.Fatalf("%s: watch event %s %v", name, ev.Type, ev.Object)
			}
			for _, in := range s.Status.LoadBalancer.Ingress {
				if a, err := netip.ParseAddr(in.IP); err == nil {
					f := 0
					if a.Is6() {
						f = 1
					}
					vips[f] = netip.PrefixFrom(a, a.BitLen())
				}
			}
		}
	}
	m.status = time.Since(start)
	m.route = pollRoutes(t, b, vips, hops, start)
	start = time.Now()
	if err := svcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	m.gone = pollRoutes(t, b, vips, [2][]netip.Addr{}, start)
	return m
}

// pollRoutes polls the router's kernel routes to vips every 5 ms, each
// family on its own, until their next hops are want (none: no route), and
// returns per family how long after start a poll first saw it.
func pollRoutes(t *testing.T, b *bgpLab, vips [2]netip.Prefix, want [2][]netip.Addr, start time.Time) [2]time.Duration {
	t.Helper()
	seen, last, err := pollKernelRoutes(b.r, vips, start.Add(30*time.Second), 5*time.Millisecond,
		func(f int, hops []netip.Addr) bool { return slices.Equal(hops, want[f]) })
	if err != nil {
		t.Fatalf("the router's kernel routes %s, %s: want next hops %v; %v (last seen %v)", vips[0], vips[1], want, err, last)
	}
	return [2]time.Duration{seen[0].Sub(start), seen[1].Sub(start)}
}
