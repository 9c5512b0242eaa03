package lab_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lab"
)

// The BGP lab's externalTrafficPolicy: Local test: a Service "local" whose
// routes carry only the nodes with a ready endpoint of it.

const (
	// envLocalRuns sets how many times TestLabBGPLocalTraffic takes a
	// node's only endpoint away and back (default 10, issue 20's n).
	envLocalRuns = "MOORING_BGP_LOCAL_RUNS"
	// envLocalRollouts sets how many rolling updates it runs (default 1).
	envLocalRollouts = "MOORING_BGP_LOCAL_ROLLOUTS"

	// envLocalDrain overrides the backend's preStop sleep (a Go
	// duration; "0s" shows what a rollout without it costs).
	envLocalDrain = "MOORING_BGP_LOCAL_DRAIN"

	localName = "local"
	// localDrain is the backend's preStop sleep: a deleted pod keeps
	// serving this long (terminating, not ready), time for its node's
	// route to leave the router before the pod goes.
	localDrain = 5 * time.Second

	// tcpEstablished is conntrack's ESTABLISHED TCP state.
	tcpEstablished = 3
)

// TestLabBGPLocalTraffic runs a Service with externalTrafficPolicy: Local
// in the BGP lab, backed by a two-replica Deployment (one pod a node, by
// required anti-affinity) whose pods drain for localDrain on deletion.
//
// First the third node, the one without a backend, gets a pod of the
// Service of its own and loses it again, envLocalRuns times: its next
// hop must appear in the router's routes (both families) within 1 s of
// the EndpointSlice showing the pod ready, and leave within 1 s of the
// EndpointSlice showing it gone (checkLocalTimes: the median; 3 s once).
// The times run from the test's own watch of the EndpointSlice to the
// router's kernel route, which zebra installs from its RIB (polled every
// 10 ms through netlink).
//
// Then a rolling update of the Deployment (maxSurge 1, maxUnavailable 0:
// each new pod lands on the node the previous old pod left, so nodes lose
// their last endpoint and gain one while the other node's stays ready)
// while the client behind the router sends 20 requests a second to the
// Service's two addresses: no request fails, and the routes never go
// empty.
func TestLabBGPLocalTraffic(t *testing.T) {
	runs := envInt(t, envLocalRuns, 10)
	rollouts := envInt(t, envLocalRollouts, 1)
	b := startBGPLab(t, 0)
	cs := labClientset(t, b.r)
	l := startLocal(t, b, cs)

	var back, gone [2][]time.Duration // per family: IPv4, IPv6
	for i := range runs {
		bk, gn := l.probeOnce(fmt.Sprintf("local-probe-%d", i))
		for f := range 2 {
			back[f], gone[f] = append(back[f], bk[f]), append(gone[f], gn[f])
		}
	}
	for f, name := range []string{"IPv4", "IPv6"} {
		t.Logf("%s next hop of %s, n = %d: appears after its endpoint is ready, sorted: %s s; leaves after its last endpoint went, sorted: %s s",
			name, l.free, runs, seconds(back[f]), seconds(gone[f]))
		checkLocalTimes(t, name+": the next hop appeared after the endpoint was ready", back[f])
		checkLocalTimes(t, name+": the next hop left after the last endpoint went", gone[f])
	}
	for range rollouts {
		l.rollout()
	}
}

// checkLocalTimes checks a series against issue 20's 1 s: the median
// must meet it; a single time may reach 3 s (a starved agent, bgpd or
// zebra on a loaded machine: CI runs two test packages at once on two
// cores), which still catches what would break it for real (an
// advertisement interval, a periodic resync, a missed event: seconds to
// minutes every time).
func checkLocalTimes(t *testing.T, what string, ds []time.Duration) {
	t.Helper()
	s := slices.Sorted(slices.Values(ds))
	if med := s[len(s)/2]; med > time.Second {
		t.Errorf("%s: median %s, want ≤ 1 s", what, med)
	}
	if s[len(s)-1] > 3*time.Second {
		t.Errorf("%s: %s once, want ≤ 3 s even on a loaded machine", what, s[len(s)-1])
	}
}

// localLab is TestLabBGPLocalTraffic's state: the BGP lab seen through the
// "local" Service's addresses, and the watch of its EndpointSlices.
type localLab struct {
	*bgpLab
	cs    kubernetes.Interface
	free  string // the node without a backend
	mu    sync.Mutex
	ready []sliceEvent // every EndpointSlice event: when, the nodes with a ready endpoint
}

type sliceEvent struct {
	at    time.Time
	nodes []string
}

// labClientset is a clientset of the lab's apiserver.
func labClientset(t *testing.T, r *lab.Ready) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", r.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(rc)
}

// startLocal creates the Service and the Deployment, waits until the
// routes carry the two backends' nodes, and starts watching the
// Service's EndpointSlices.
func startLocal(t *testing.T, b *bgpLab, cs kubernetes.Interface) *localLab {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: localName, Namespace: lab.DemoNamespace},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass:     ptr.To(mooringv1.LoadBalancerClass),
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			IPFamilyPolicy:        ptr.To(corev1.IPFamilyPolicyPreferDualStack),
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Selector:              map[string]string{"app": localName},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: lab.DemoPort,
				TargetPort: intstr.FromInt32(lab.EchoPort)}},
		},
	}
	if _, err := cs.CoreV1().Services(lab.DemoNamespace).Create(b.ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	drain := localDrain
	if v := os.Getenv(envLocalDrain); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			t.Fatalf("%s=%q: want a duration", envLocalDrain, v)
		}
		t.Logf("%s=%s: the backend drains %s", envLocalDrain, v, d)
		drain = d
	}
	if _, err := cs.AppsV1().Deployments(lab.DemoNamespace).Create(b.ctx, localDeployment(drain), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The "local" view of the lab: its routes are the Service's.
	// Not the demo Service's addresses, which b carries: the wait below
	// would end at once with them (seen on CI: the local Service had no
	// address yet at the first poll, and the test then waited for the
	// demo Service's route to lose a node).
	lb := *b
	lb.vip4, lb.vip6 = netip.Prefix{}, netip.Prefix{}
	l := &localLab{bgpLab: &lb, cs: cs}
	eventuallyLab(t, 60*time.Second, "the local Service's addresses", func() (bool, string) {
		s, err := cs.CoreV1().Services(lab.DemoNamespace).Get(b.ctx, localName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, in := range s.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil && a.Is4() {
				lb.vip4 = netip.PrefixFrom(a, 32)
			} else if err == nil {
				lb.vip6 = netip.PrefixFrom(a, 128)
			}
		}
		return lb.vip4.IsValid() && lb.vip6.IsValid(), fmt.Sprint(s.Status.LoadBalancer.Ingress)
	})
	l.watchSlices()
	var backends []string
	eventuallyLab(t, 90*time.Second, "two ready backends on two nodes", func() (bool, string) {
		backends = l.readyNodes()
		return len(backends) == 2, fmt.Sprint(backends)
	})
	for _, n := range b.nodes {
		if !slices.Contains(backends, n) {
			l.free = n
		}
	}
	l.waitWhole(backends, 60*time.Second)
	return l
}

// localDeployment is the Service's backend: two echo pods, never two on
// one node, rolled one at a time, each draining drain on deletion.
func localDeployment(drain time.Duration) *appsv1.Deployment {
	labels := map[string]string{"app": localName, "tier": "deployment"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: localName, Namespace: lab.DemoNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0)),
				}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": localName}},
							TopologyKey:   corev1.LabelHostname,
						}},
					}},
					Containers: []corev1.Container{localContainer(drain)},
				},
			},
		},
	}
}

func localContainer(drain time.Duration) corev1.Container {
	c := corev1.Container{
		Name: "echo", Image: lab.EchoImage,
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: lab.EchoPort, Protocol: corev1.ProtocolTCP}},
	}
	if drain > 0 {
		c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Sleep: &corev1.SleepAction{Seconds: int64(drain / time.Second)}}}
	}
	return c
}

// watchSlices records, for every event of the Service's EndpointSlices,
// the nodes with a ready endpoint, until the lab ends.
func (l *localLab) watchSlices() {
	l.t.Helper()
	sel := metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + localName}
	w, err := l.cs.DiscoveryV1().EndpointSlices(lab.DemoNamespace).Watch(l.ctx, sel)
	if err != nil {
		l.t.Fatal(err)
	}
	byName := map[string]*discoveryv1.EndpointSlice{}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			at := time.Now()
			es, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			if ev.Type == "DELETED" {
				delete(byName, es.Name)
			} else {
				byName[es.Name] = es
			}
			var nodes []string
			for _, s := range byName {
				for _, ep := range s.Endpoints {
					if ep.NodeName != nil && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) && !slices.Contains(nodes, *ep.NodeName) {
						nodes = append(nodes, *ep.NodeName)
					}
				}
			}
			l.mu.Lock()
			l.ready = append(l.ready, sliceEvent{at: at, nodes: nodes})
			l.mu.Unlock()
		}
	}()
}

// readyNodes are the nodes with a ready endpoint as last seen, sorted.
func (l *localLab) readyNodes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ready) == 0 {
		return nil
	}
	out := slices.Clone(l.ready[len(l.ready)-1].nodes)
	slices.Sort(out)
	return out
}

// snapshotEvents returns the EndpointSlice events so far.
func (l *localLab) snapshotEvents() []sliceEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ready)
}

// kernelWatch is what watchKernel saw: every stretch without a route
// ("prefix from–to (why)"), and every poll whose next hops differed from
// the family's poll before (what the router forwards by, 10 ms apart: a
// change is seen at most a poll after it happened, never before).
type kernelWatch struct {
	gaps    []string
	changes []time.Time
}

// watchKernel polls the router's kernel routes of both addresses every 10
// ms until the returned func is called, which returns what it saw.
func (l *localLab) watchKernel() func() kernelWatch {
	done := make(chan struct{})
	var seen kernelWatch
	var wg sync.WaitGroup
	wg.Go(func() {
		nl, err := l.r.Cluster.Host(lab.RouterHost).NetlinkHandle()
		if err != nil {
			seen.gaps = append(seen.gaps, err.Error())
			return
		}
		defer nl.Close()
		var since [2]time.Time
		var why [2]string
		var last [2][]netip.Addr
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			for f, p := range []netip.Prefix{l.vip4, l.vip6} {
				hops, err := consistentNexthops(nl, p)
				now := time.Now()
				if err == nil && last[f] != nil && !slices.Equal(hops, last[f]) {
					seen.changes = append(seen.changes, now)
				}
				if err == nil {
					last[f] = hops
				}
				switch {
				case (err != nil || len(hops) == 0) && since[f].IsZero():
					since[f], why[f] = now, "no route"
					if err != nil {
						why[f] = err.Error()
					}
				case err == nil && len(hops) > 0 && !since[f].IsZero():
					seen.gaps = append(seen.gaps, fmt.Sprintf("%s %s–%s (%s)", p, since[f].Format("15:04:05.000"), now.Format("15:04:05.000"), why[f]))
					since[f] = time.Time{}
				}
			}
		}
	})
	return func() kernelWatch {
		close(done)
		wg.Wait()
		slices.SortFunc(seen.changes, time.Time.Compare)
		return seen
	}
}

// changedAt is when the EndpointSlices first showed node with (ready) or
// without a ready endpoint after since (zero while they have not).
func (l *localLab) changedAt(node string, ready bool, since time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.ready {
		if !ev.at.Before(since) && slices.Contains(ev.nodes, node) == ready {
			return ev.at
		}
	}
	return time.Time{}
}

// probeOnce runs a pod of the Service on the free node until its next hop
// is in both routes, then deletes it until the next hop has left both;
// it returns, per family, how long after the EndpointSlice change the
// router's zebra showed each.
func (l *localLab) probeOnce(name string) (back, gone [2]time.Duration) {
	t := l.t
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.DemoNamespace, Labels: map[string]string{"app": localName}},
		Spec:       corev1.PodSpec{NodeName: l.free, Containers: []corev1.Container{localContainer(0)}},
	}
	since := time.Now()
	if _, err := l.cs.CoreV1().Pods(lab.DemoNamespace).Create(l.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := l.pollNexthop(true)
	ready := l.eventAt(true, since)
	since = time.Now()
	if err := l.cs.CoreV1().Pods(lab.DemoNamespace).Delete(l.ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	left := l.pollNexthop(false)
	went := l.eventAt(false, since)
	for f := range 2 {
		back[f], gone[f] = seen[f].Sub(ready), left[f].Sub(went)
	}
	eventuallyLab(t, 30*time.Second, name+" deleted", func() (bool, string) {
		_, err := l.cs.CoreV1().Pods(lab.DemoNamespace).Get(l.ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	return back, gone
}

// eventAt waits for the EndpointSlice event after since that shows the
// free node with (ready) or without a ready endpoint, and returns its time.
func (l *localLab) eventAt(ready bool, since time.Time) time.Time {
	var at time.Time
	eventuallyLab(l.t, 10*time.Second, fmt.Sprintf("the EndpointSlice showing %s ready=%v", l.free, ready), func() (bool, string) {
		at = l.changedAt(l.free, ready, since)
		return !at.IsZero(), fmt.Sprint(l.readyNodes())
	})
	return at
}

// pollNexthop polls the router's kernel routes of the Service (what zebra
// installed from `show ip route`'s RIB: the forwarding table), every 10
// ms, each family on its own, until the free node's next hop is in both
// (want) or in neither, and returns per family when a poll first showed
// it. (Polling zebra through vtysh costs 0.2-0.7 s a poll on a loaded
// machine, longer than what is measured.)
func (l *localLab) pollNexthop(want bool) [2]time.Time {
	hops := [2]netip.Addr{l.addr4[l.free], l.addr6[l.free]}
	seen, last, err := pollKernelRoutes(l.r, [2]netip.Prefix{l.vip4, l.vip6}, time.Now().Add(20*time.Second), 10*time.Millisecond,
		func(f int, got []netip.Addr) bool { return slices.Contains(got, hops[f]) == want })
	if err != nil {
		l.t.Fatalf("%s's next hop in the router's kernel routes %s, %s: want %v; %v (last seen %v)", l.free, l.vip4, l.vip6, want, err, last)
	}
	return seen
}

// pollKernelRoutes polls the router's kernel routes to vips (IPv4, IPv6)
// through netlink every period, each family on its own, until done holds
// for the family's next hops or deadline passes, and returns per family
// when a poll first saw done hold, and the next hops last seen.
func pollKernelRoutes(r *lab.Ready, vips [2]netip.Prefix, deadline time.Time, period time.Duration, done func(f int, hops []netip.Addr) bool) ([2]time.Time, [2][]netip.Addr, error) {
	var seen [2]time.Time
	var last [2][]netip.Addr
	var errs [2]error
	var wg sync.WaitGroup
	for f := range 2 {
		wg.Go(func() {
			nl, err := r.Cluster.Host(lab.RouterHost).NetlinkHandle()
			if err != nil {
				errs[f] = err
				return
			}
			defer nl.Close()
			for ; ; time.Sleep(period) {
				last[f], err = consistentNexthops(nl, vips[f])
				now := time.Now()
				switch {
				case err != nil:
					errs[f] = err
					return
				case done(f, last[f]):
					seen[f] = now
					return
				case now.After(deadline):
					errs[f] = fmt.Errorf("route %s: not as wanted by the deadline", vips[f])
					return
				}
			}
		})
	}
	wg.Wait()
	return seen, last, errors.Join(errs[0], errs[1])
}

// consistentNexthops is kernelNexthops from a dump no route change
// interrupted: zebra replacing the route while the kernel dumps it (a
// rolling update changes the next hops) makes the dump incomplete
// (netlink.ErrDumpInterrupted), which says nothing about the route. CI
// once counted such a dump as a 10 ms gap. It tries up to 5 dumps.
func consistentNexthops(nl *netlink.Handle, p netip.Prefix) ([]netip.Addr, error) {
	var err error
	for range 5 {
		var hops []netip.Addr
		if hops, err = kernelNexthops(nl, p); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return hops, err
		}
	}
	return nil, err
}

// kernelNexthops are the gateways of the kernel's routes to p (one
// multipath route, or one route per path).
func kernelNexthops(nl *netlink.Handle, p netip.Prefix) ([]netip.Addr, error) {
	fam, bits := netlink.FAMILY_V4, 32
	if p.Addr().Is6() {
		fam, bits = netlink.FAMILY_V6, 128
	}
	routes, err := nl.RouteListFiltered(fam, &netlink.Route{Dst: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}}, netlink.RT_FILTER_DST)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	add := func(gw net.IP) {
		if a, ok := netip.AddrFromSlice(gw); ok {
			out = append(out, a.Unmap())
		}
	}
	for _, r := range routes {
		add(r.Gw)
		for _, nh := range r.MultiPath {
			add(nh.Gw)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// rollout runs a rolling update of the Deployment under the client's load
// and checks no request failed and no route went empty.
func (l *localLab) rollout() {
	t := l.t
	t.Helper()
	before := l.readyNodes()
	events := len(l.snapshotEvents())
	kernel := l.watchKernel()
	watch := l.watchRoutes()
	stopLoad := l.load()
	time.Sleep(2 * time.Second)
	started := time.Now()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"lab.mooring.dev/rollout":%q}}}}}`, started.Format(time.RFC3339Nano))
	if _, err := l.cs.AppsV1().Deployments(lab.DemoNamespace).Patch(l.ctx, localName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyLab(t, 2*time.Minute, "the rolling update done", func() (bool, string) {
		d, err := l.cs.AppsV1().Deployments(lab.DemoNamespace).Get(l.ctx, localName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods, err := l.cs.CoreV1().Pods(lab.DemoNamespace).List(l.ctx, metav1.ListOptions{LabelSelector: "app=" + localName})
		if err != nil {
			return false, err.Error()
		}
		st := d.Status
		return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == 2 && st.Replicas == 2 && st.AvailableReplicas == 2 && len(pods.Items) == 2,
			fmt.Sprintf("%+v, %d pods", st, len(pods.Items))
	})
	took := time.Since(started)
	var after []string
	eventuallyLab(t, 30*time.Second, "two ready backends", func() (bool, string) {
		after = l.readyNodes()
		return len(after) == 2, fmt.Sprint(after)
	})
	l.waitWhole(after, 30*time.Second)
	time.Sleep(2 * time.Second)
	load, samples, fib := stopLoad(), watch.stop(), kernel()
	var noneReady []string
	for _, ev := range l.snapshotEvents()[events:] {
		if len(ev.nodes) == 0 {
			noneReady = append(noneReady, ev.at.Format("15:04:05.000"))
		}
	}
	if len(noneReady) > 0 {
		t.Errorf("the EndpointSlices showed no ready endpoint during the rolling update at %v", noneReady)
	}
	if len(fib.gaps) > 0 {
		t.Errorf("the router's kernel had no route (10 ms polls) during the rolling update: %s", strings.Join(fib.gaps, "; "))
	}

	var empty, withdrawn []routeSample
	for _, s := range samples {
		if s.err != nil || len(s.hops) == 0 {
			empty = append(empty, s)
		}
		if len(l.missing([]routeSample{s}, before)) > 0 {
			withdrawn = append(withdrawn, s)
		}
	}
	t.Logf("rolling update (%s → %s) took %s; client: %s; %d route samples, %d without a backend of before",
		before, after, took.Round(time.Millisecond), load, len(samples), len(withdrawn))
	failed, rehashed := splitRehashed(load.failed(), fib.changes)
	if len(failed) > 0 || len(load) < 20 {
		t.Errorf("requests through the router during the rolling update: %s:\n%s", load, lines(failed))
	}
	if len(rehashed) > 0 {
		// The router's ECMP (hash-threshold, not resilient) moves some
		// flows when a next hop comes or goes: a connection whose packets
		// land on another node mid-request is reset there (no conntrack
		// entry), as the kept connections below are (docs/bgp.md).
		t.Logf("requests reset while a next hop came or went (ECMP rehash, in flight across the change):\n%s", lines(rehashed))
	}
	if broken := load.broken(); len(broken) > 0 {
		t.Logf("kept connections broken although no request failed (a next hop left):\n%s", lines(broken))
	}
	if len(empty) > 0 {
		t.Errorf("the routes went empty (or could not be read) during the rolling update:\n%s", samplesText(empty))
	}
	if len(withdrawn) == 0 {
		t.Errorf("no route sample lacked a node of before (%v): the rolling update moved no next hop, the test saw nothing", before)
	}
	if stale := l.staleConntrack(after); len(stale) > 0 {
		t.Errorf("nodes that advertise the Service again still translate connections to pods that are gone (conntrack):\n%s", strings.Join(stale, "\n"))
	}
}

// staleConntrack lists the ESTABLISHED conntrack entries of the Service's
// addresses on nodes that translate to an address no pod of the Service
// has now: what the router's ECMP rehash leaves on a node whose pod was
// replaced, and what the agent forgets when the node advertises the
// address again (internal/conntrack). A flow that came back to such an
// entry would go to the deleted pod.
func (l *localLab) staleConntrack(nodes []string) []string {
	t := l.t
	t.Helper()
	pods, err := l.cs.CoreV1().Pods(lab.DemoNamespace).List(l.ctx, metav1.ListOptions{LabelSelector: "app=" + localName})
	if err != nil {
		t.Fatal(err)
	}
	live := map[netip.Addr]bool{}
	for _, p := range pods.Items {
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				live[a] = true
			}
		}
	}
	var out []string
	for _, node := range nodes {
		nl, err := l.r.Cluster.Host(node).NetlinkHandle()
		if err != nil {
			t.Fatal(err)
		}
		for _, fam := range []netlink.InetFamily{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			flows, err := nl.ConntrackTableList(netlink.ConntrackTable, fam)
			if err != nil {
				nl.Close()
				t.Fatalf("%s: listing conntrack: %v", node, err)
			}
			for _, f := range flows {
				dst, _ := netip.AddrFromSlice(f.Forward.DstIP)
				to, _ := netip.AddrFromSlice(f.Reverse.SrcIP)
				tcp, ok := f.ProtoInfo.(*netlink.ProtoInfoTCP)
				dst, to = dst.Unmap(), to.Unmap()
				if (dst != l.vip4.Addr() && dst != l.vip6.Addr()) || !ok || tcp.State != tcpEstablished || live[to] {
					continue
				}
				out = append(out, fmt.Sprintf("%s: %s", node, f))
			}
		}
		nl.Close()
	}
	return out
}

// splitRehashed separates from failed the requests reset by the peer
// while in flight across a change of the route's next hops (one of
// changes, the kernel's, within the client's 3 s timeout after the
// request started); the rest are failures. The changes must be the
// kernel's: zebra's samples are stamped when vtysh was asked, up to
// 0.7 s before what it answered (CI once failed a dial reset at the very
// time of a change that the zebra sample before the request showed).
func splitRehashed(failed []request, changes []time.Time) (rest, rehashed []request) {
	for _, r := range failed {
		across := slices.ContainsFunc(changes, func(c time.Time) bool {
			return !c.Before(r.start) && c.Sub(r.start) <= 3*time.Second
		})
		if across && r.err != nil && strings.Contains(r.err.Error(), "connection reset by peer") {
			rehashed = append(rehashed, r)
		} else {
			rest = append(rest, r)
		}
	}
	return rest, rehashed
}
