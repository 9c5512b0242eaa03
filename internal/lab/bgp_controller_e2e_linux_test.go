package lab_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/frr"
	"github.com/mooringlb/mooring/internal/lab"
)

// envCtrlRounds sets how many controller restarts TestLabBGPControllerRestart
// runs (default 1: the CI budget); docs/benchmarks.md's series sets it.
const envCtrlRounds = "MOORING_BGP_CONTROLLER_ROUNDS"

// envCtrlCheckTheCheck=1 makes each restart of TestLabBGPControllerRestart
// also clear the demo Service's addresses at once, as a controller that
// forgot its assignments on restart would: the test must then fail.
const envCtrlCheckTheCheck = "MOORING_BGP_CONTROLLER_CHECK_THE_CHECK"

// TestLabBGPControllerRestart restarts Mooring's controller (SIGTERM, a new
// process; docs/bgp.md) in the BGP lab while the client behind the router
// sends 20 requests a second to the demo Service's addresses. The
// controller assigns addresses and the agents advertise them, so a restart
// must be invisible to the fabric: no request fails, zebra's routes keep
// all three next hops in every sample, the router receives no UPDATE (and
// no session drops), and the Service's addresses never change. The new
// controller is then shown to serve: it takes the leader-election Lease
// and gives a new Service an address that the router gets a route for.
func TestLabBGPControllerRestart(t *testing.T) {
	rounds := envInt(t, envCtrlRounds, 1)
	b := startBGPLab(t, 0)
	cs := labClientset(t, b.r)
	before, err := cs.CoreV1().Services(lab.DemoNamespace).Get(b.ctx, lab.DemoService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addrs := ingressText(before)
	updates := b.updatesReceived()
	watch, addrWatch := b.watchRoutes(), watchIngress(b.ctx, cs, addrs)
	stopLoad := b.load()
	time.Sleep(2 * time.Second)

	var leads, stops []time.Duration
	for range rounds {
		holder := leaseHolder(t, b.ctx, cs)
		t0 := time.Now()
		if err := b.r.Cluster.RestartController(false); err != nil {
			t.Fatal(err)
		}
		stops = append(stops, time.Since(t0))
		if os.Getenv(envCtrlCheckTheCheck) == "1" {
			b.forgetAddresses(cs)
		}
		eventuallyLab(t, 30*time.Second, "the new controller leads", func() (bool, string) {
			h := leaseHolder(t, b.ctx, cs)
			return h != "" && h != holder, "holder " + h
		})
		leads = append(leads, time.Since(t0))
		time.Sleep(3 * time.Second)
	}
	time.Sleep(2 * time.Second)
	load, samples, changed := stopLoad(), watch.stop(), addrWatch()
	after := b.updatesReceived()

	short := b.missing(samples, b.nodes)
	t.Logf("%d controller restarts: the old one gone and the new one started after %s s, the new one leading %s s after SIGTERM",
		rounds, seconds(stops), seconds(leads))
	t.Logf("client: %s; %d route samples, %d short of a next hop; UPDATEs received by the router: %s → %s",
		load, len(samples), len(short), updates, after)
	if failed := load.failed(); len(failed) > 0 || len(load) < 20 {
		t.Errorf("requests through the router during the restarts: %s:\n%s", load, lines(failed))
	}
	if broken := load.broken(); len(broken) > 0 {
		t.Logf("kept connections broken although no request failed:\n%s", lines(broken))
	}
	if len(short) > 0 {
		t.Errorf("zebra's routes lost a next hop during the controller restarts:\n%s", samplesText(short))
	}
	if after != updates {
		t.Errorf("the router received UPDATEs (or a session dropped) during the controller restarts: before %s; after %s", updates, after)
	}
	if len(changed) > 0 {
		t.Errorf("the Service's addresses (%s) changed during the controller restarts:\n%s", addrs, strings.Join(changed, "\n"))
	}
	if t.Failed() {
		return
	}
	b.newServiceServed(cs, before)
}

// updatesReceived is the router's count of UPDATEs received and sessions
// dropped, per node: a withdrawal, even one re-advertised between two
// route samples, moves it.
func (b *bgpLab) updatesReceived() string {
	return b.perNode(func(s frr.Session) string {
		return fmt.Sprintf("%d updates, %d drops", s.Messages.UpdatesRecv, s.ConnectionsDropped)
	})
}

// ingressText is a Service's LoadBalancer addresses, sorted.
func ingressText(svc *corev1.Service) string {
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// watchIngress reads the demo Service every 200 ms until the returned
// function is called, which returns every reading that differed from want.
func watchIngress(ctx context.Context, cs kubernetes.Interface, want string) func() []string {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var changed []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			svc, err := cs.CoreV1().Services(lab.DemoNamespace).Get(ctx, lab.DemoService, metav1.GetOptions{})
			if ctx.Err() != nil {
				return
			}
			got := ""
			if err == nil {
				got = ingressText(svc)
			}
			if err != nil || got != want {
				mu.Lock()
				changed = append(changed, fmt.Sprintf("%s %q %v", time.Now().Format("15:04:05.000"), got, err))
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() []string {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return changed
	}
}

// leaseHolder is the holder of the controller's leader-election Lease.
func leaseHolder(t *testing.T, ctx context.Context, cs kubernetes.Interface) string {
	t.Helper()
	l, err := cs.CoordinationV1().Leases("mooring-system").Get(ctx, "mooring-controller", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// forgetAddresses clears the demo Service's addresses
// (envCtrlCheckTheCheck).
func (b *bgpLab) forgetAddresses(cs kubernetes.Interface) {
	b.t.Logf("%s=1: clearing the Service's addresses as a forgetful controller would; this test must fail", envCtrlCheckTheCheck)
	if _, err := cs.CoreV1().Services(lab.DemoNamespace).Patch(b.ctx, lab.DemoService, types.MergePatchType,
		[]byte(`{"status":{"loadBalancer":{"ingress":null}}}`), metav1.PatchOptions{}, "status"); err != nil {
		b.t.Fatal(err)
	}
}

// newServiceServed creates a second Service like the demo one and waits
// until the restarted controller gives it an IPv4 address other than the
// demo's and the router routes it over the three nodes.
func (b *bgpLab) newServiceServed(cs kubernetes.Interface, demo *corev1.Service) {
	b.t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo-after-restart", Namespace: lab.DemoNamespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: demo.Spec.LoadBalancerClass,
			Selector: demo.Spec.Selector, Ports: demo.Spec.Ports},
	}
	if svc.Spec.LoadBalancerClass == nil || *svc.Spec.LoadBalancerClass != mooringv1.LoadBalancerClass {
		b.t.Fatalf("the demo Service's class is %v, want %s", svc.Spec.LoadBalancerClass, mooringv1.LoadBalancerClass)
	}
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].NodePort = 0
	}
	t0 := time.Now()
	if _, err := cs.CoreV1().Services(lab.DemoNamespace).Create(b.ctx, svc, metav1.CreateOptions{}); err != nil {
		b.t.Fatal(err)
	}
	var vip netip.Addr
	eventuallyLab(b.t, 30*time.Second, "an address for a new Service", func() (bool, string) {
		s, err := cs.CoreV1().Services(lab.DemoNamespace).Get(b.ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, in := range s.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil && a.Is4() {
				vip = a
			}
		}
		return vip.IsValid(), ingressText(s)
	})
	if netip.PrefixFrom(vip, 32) == b.vip4 {
		b.t.Fatalf("the new Service got the demo Service's address %s", vip)
	}
	waitNexthops(b.t, b.ctx, b.router, netip.PrefixFrom(vip, 32), b.nexthops(b.nodes, false), 30*time.Second)
	b.t.Logf("the restarted controller served a new Service: %s, routed over the three nodes %s after its creation",
		vip, time.Since(t0).Round(time.Millisecond))
}
