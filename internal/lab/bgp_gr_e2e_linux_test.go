package lab_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/frr"
	"github.com/mooringlb/mooring/internal/lab"
)

// envGRRounds sets how many rolling restarts TestLabBGPGracefulRestart
// runs (default 1: the CI budget); docs/benchmarks.md's series sets it.
const envGRRounds = "MOORING_BGP_GR_ROUNDS"

// envGRCheckTheCheck=1 runs TestLabBGPGracefulRestart with graceful
// restart off on the BGPPeer: the test must then fail (paths not kept,
// failed requests, routes short of a next hop).
const envGRCheckTheCheck = "MOORING_BGP_GR_CHECK_THE_CHECK"

// grEoRBound bounds End-of-RIB after the new agent process started in the
// CI test. Issue 20 asks for 5 s; the figures (docs/benchmarks.md) are
// ~2 s. The bound leaves a loaded CI machine room: an agent's start
// (informers synced, its first decision) is what it mostly waits for.
const grEoRBound = 15 * time.Second

// restartResult is one agent restart as the router saw it.
type restartResult struct {
	node, how string
	stopped   time.Duration // the signal → the old process gone
	eor       time.Duration // the new process started → End-of-RIB from it
}

// restart stops node's agent (kill: SIGKILL, else SIGTERM), checks the
// router keeps its paths as stale and did not reset anything else, starts
// a new agent and waits for its End-of-RIB in families (the refreshed
// paths no longer stale).
func (b *bgpLab) restart(node string, kill bool, v6 bool) restartResult {
	b.t.Helper()
	res := restartResult{node: node, how: "SIGTERM"}
	stop := b.r.Cluster.StopAgent
	if kill {
		res.how, stop = "SIGKILL", b.r.Cluster.KillAgent
	}
	before := b.session(node)
	if before.State != "Established" {
		b.t.Fatalf("%s: the router's session is %s before the restart", node, before.State)
	}
	t0 := time.Now()
	if err := stop(node); err != nil {
		b.t.Fatal(err)
	}
	res.stopped = time.Since(t0)
	// The old process is gone: its paths are stale, not withdrawn.
	if ok, last := within(5*time.Second, func() (bool, string) {
		p4, p6, err := b.nodePaths(node)
		return err == nil && p4.Stale && (!v6 || p6.Stale), fmt.Sprintf("IPv4 %+v, IPv6 %+v, %v", p4, p6, err)
	}); !ok {
		b.t.Errorf("%s (%s): the router did not keep its paths as stale: %s", node, res.how, last)
		if !b.checkTheCheck {
			b.t.FailNow()
		}
	}
	if b.beforeStart != nil {
		b.beforeStart(node)
	}
	t1 := time.Now()
	if err := b.r.Cluster.StartAgent(node); err != nil {
		b.t.Fatal(err)
	}
	var s frr.Session
	// Without graceful restart (checkTheCheck) the router records no
	// End-of-RIB: the refreshed paths below are all there is to wait for.
	for deadline := t1.Add(grEoRBound); !b.checkTheCheck; time.Sleep(100 * time.Millisecond) {
		s = b.session(node)
		if s.State == "Established" && s.ConnectionsEstablished > before.ConnectionsEstablished &&
			s.EndOfRIBReceived[frr.IPv4] && (!v6 || s.EndOfRIBReceived[frr.IPv6]) {
			break
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s (%s): no End-of-RIB %s after the new agent started (want <= %s): %+v", node, res.how, time.Since(t1), grEoRBound, s)
		}
	}
	res.eor = time.Since(t1)
	b.t.Logf("%s %s: old agent gone after %s, End-of-RIB %s after the new one started",
		res.how, node, res.stopped.Round(time.Millisecond), res.eor.Round(time.Millisecond))
	// End-of-RIB ends the stale paths: refreshed ones stay, others go.
	eventuallyLab(b.t, 5*time.Second, node+"'s paths refreshed", func() (bool, string) {
		p4, p6, err := b.nodePaths(node)
		return err == nil && p4.Valid && !p4.Stale && (!v6 || p6.Valid && !p6.Stale), fmt.Sprintf("IPv4 %+v, IPv6 %+v, %v", p4, p6, err)
	})
	return res
}

// eventuallyLab polls cond every 50 ms until it holds or d has passed.
func eventuallyLab(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if ok, last := within(d, cond); !ok {
		t.Fatalf("%s: not after %s: %s", what, d, last)
	}
}

// within polls cond every 50 ms until it holds (true) or d has passed
// (false and cond's last word).
func within(d time.Duration, cond func() (bool, string)) (bool, string) {
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		ok, s := cond()
		if ok || time.Now().After(deadline) {
			return ok, s
		}
	}
}

// TestLabBGPGracefulRestart restarts Mooring's agents in the BGP lab while
// the client behind the router sends 20 requests a second to the demo
// Service's two addresses: a rolling restart of all three agents (SIGTERM,
// then a new process, the next node once the router has the restarted
// node's End-of-RIB and BFD is up again), then a SIGKILL of one agent. No
// request fails (kept connections that break are reported); the router
// keeps each stopped agent's paths as stale
// (zebra's routes keep all three next hops throughout), gets End-of-RIB in
// both families from the new process, and receives no NOTIFICATION.
//
// Then one address family: the router stops IPv6 with node-1 (the node
// still asks for both, as in cilium #30367) and node-1's agent restarts;
// then the BGPPeer asks for IPv4 only (the restarting speaker's
// graceful-restart capability lists one AFI, the router has both) and
// node-2's agent restarts. Each time End-of-RIB comes as fast as with both
// families: no selection deferral waits for a family that is not there.
func TestLabBGPGracefulRestart(t *testing.T) {
	rounds := envInt(t, envGRRounds, 1)
	b := startBGPLab(t, 0)
	if os.Getenv(envGRCheckTheCheck) != "" {
		b.withoutGracefulRestart()
	}
	notes := b.notifications()
	watch := b.watchRoutes()
	stopLoad := b.load()
	var results []restartResult
	for round := range rounds {
		for _, n := range b.nodes {
			results = append(results, b.restart(n, false, true))
			b.waitBFDUp(b.nodes, 30*time.Second)
		}
		results = append(results, b.restart(b.nodes[round%len(b.nodes)], true, true))
		b.waitBFDUp(b.nodes, 30*time.Second)
	}
	load := stopLoad()
	samples := watch.stop()
	short := b.missing(samples, b.nodes)
	t.Logf("client: %s; %d route samples, %d short of a next hop", load, len(samples), len(short))
	if failed := load.failed(); len(failed) > 0 || len(load) < 20 {
		t.Errorf("requests through the router during the restarts: %s:\n%s", load, lines(failed))
	}
	if broken := load.broken(); len(broken) > 0 {
		// Reported, not failed on: with the routes checked below, what
		// breaks them is not BGP (bgp_load_e2e_linux_test.go).
		t.Logf("kept connections broken although no request failed:\n%s", lines(broken))
	}
	if len(short) > 0 {
		t.Errorf("zebra's routes lost a next hop during the restarts:\n%s", samplesText(short))
	}
	if after := b.notifications(); after != notes {
		t.Errorf("the router received NOTIFICATIONs during the restarts: before %s; after %s", notes, after)
	}
	logRestarts(t, results)
	if t.Failed() {
		return
	}
	b.oneFamily()
}

// withoutGracefulRestart turns graceful restart off on the lab's BGPPeer
// (envGRCheckTheCheck) and waits for the sessions to come back with it.
func (b *bgpLab) withoutGracefulRestart() {
	b.t.Logf("%s set: graceful restart off, this test must fail", envGRCheckTheCheck)
	b.checkTheCheck = true
	patch := `{"spec":{"gracefulRestart":{"enabled":false}}}`
	if _, err := labDynamic(b.t, b.r).Resource(mooringv1.GroupVersion.WithResource("bgppeers")).Patch(b.ctx, lab.RouterHost,
		types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		b.t.Fatal(err)
	}
	eventuallyLab(b.t, 60*time.Second, "sessions without graceful restart", func() (bool, string) {
		ss, err := b.router.Sessions(b.ctx)
		var modes []string
		for _, n := range b.nodes {
			s := ss[b.addr4[n]]
			modes = append(modes, s.State+"/"+s.RemoteGRMode)
		}
		return err == nil && !slices.ContainsFunc(modes, func(m string) bool { return m != "Established/Disable" }), fmt.Sprint(modes, err)
	})
	b.waitWhole(b.nodes, 60*time.Second)
}

// oneFamily is TestLabBGPGracefulRestart's second part (one address
// family per session).
func (b *bgpLab) oneFamily() {
	t := b.t
	n1 := b.nodes[0]
	if err := b.router.Configure(b.ctx, fmt.Sprintf("router bgp %d", lab.RouterASN), "address-family ipv6 unicast",
		"no neighbor "+b.addr4[n1].String()+" activate"); err != nil {
		t.Fatal(err)
	}
	waitNexthops(t, b.ctx, b.router, b.vip6, b.nexthops(b.nodes[1:], true), 30*time.Second)
	waitNexthops(t, b.ctx, b.router, b.vip4, b.nexthops(b.nodes, false), 30*time.Second)
	b.waitBFDUp(b.nodes, 30*time.Second)
	if s := b.session(n1); s.EndOfRIBReceived[frr.IPv6] || s.AcceptedPrefixes[frr.IPv6] != 0 {
		t.Fatalf("the router still has IPv6 with %s: %+v", n1, s)
	}
	var results []restartResult
	results = append(results, b.restart(n1, false, false))

	patch := fmt.Sprintf(`{"spec":{"addressFamilies":[%q]}}`, mooringv1.BGPFamilyIPv4)
	if _, err := labDynamic(t, b.r).Resource(mooringv1.GroupVersion.WithResource("bgppeers")).Patch(b.ctx, lab.RouterHost,
		types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every node's session comes back with IPv4 only: the IPv6 route goes.
	waitNexthops(t, b.ctx, b.router, b.vip6, nil, 60*time.Second)
	waitNexthops(t, b.ctx, b.router, b.vip4, b.nexthops(b.nodes, false), 60*time.Second)
	b.waitBFDUp(b.nodes, 60*time.Second)
	n2 := b.nodes[1]
	eventuallyLab(t, 30*time.Second, n2+"'s session with IPv4 only", func() (bool, string) {
		s := b.session(n2)
		return s.State == "Established" && s.EndOfRIBReceived[frr.IPv4] && !s.EndOfRIBReceived[frr.IPv6], fmt.Sprintf("%+v", s)
	})
	results = append(results, b.restart(n2, false, false))
	logRestarts(t, results)
}

// logRestarts logs the End-of-RIB figures of a series, sorted, and how
// long the old agents took to go.
func logRestarts(t *testing.T, rs []restartResult) {
	t.Helper()
	var eor, stopped []time.Duration
	for _, r := range rs {
		eor, stopped = append(eor, r.eor), append(stopped, r.stopped)
	}
	t.Logf("End-of-RIB after the new agent started, n = %d, sorted: %s s; the old agent gone after the signal: %s s",
		len(rs), seconds(eor), seconds(stopped))
}

// seconds renders durations sorted, in seconds.
func seconds(ds []time.Duration) string {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%.3f", d.Seconds()))
	}
	return strings.Join(out, ", ")
}
