package bgpagent_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/bgpagent"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
	"github.com/mooringlb/mooring/internal/promtest"
	"github.com/mooringlb/mooring/internal/testenv"
)

// The backend against a real kube-apiserver and a plain GoBGP router, in a
// network namespace of the test's own (netns_linux_test.go).

func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type router struct {
	srv  *server.BgpServer
	port int
}

func startRouter(t *testing.T) *router {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(routerAddr.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := server.NewBgpServer(server.LoggerOption(quietLog(), &slog.LevelVar{}))
	go srv.Serve()
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: 64500, RouterId: routerAddr.String(), ListenPort: int32(port), ListenAddresses: []string{routerAddr.String()}}}); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:            &api.PeerConf{NeighborAddress: nodeAddr.String(), PeerAsn: 64512},
		Transport:       &api.Transport{PassiveMode: true, LocalAddress: routerAddr.String()},
		GracefulRestart: &api.GracefulRestart{Enabled: true, RestartTime: 120},
		AfiSafis: []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}, Enabled: true},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}}},
	}}); err != nil {
		t.Fatal(err)
	}
	return &router{srv: srv, port: port}
}

// createNode creates node-a with nodeAddr as its InternalIP.
func createNode(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	must(t, c.Create(ctx, node))
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeAddr.String()}}
	must(t, c.Status().Update(ctx, node))
}

// sends has the router originate n /32s (10.100.0.0 up), which it sends
// the node.
func (r *router) sends(t *testing.T, n int) {
	t.Helper()
	nh, err := bgp.NewPathAttributeNextHop(routerAddr)
	must(t, err)
	paths := make([]*apiutil.Path, 0, n)
	for i := range n {
		nlri, err := bgp.NewIPAddrPrefix(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 100, byte(i >> 8), byte(i)}), 32))
		must(t, err)
		paths = append(paths, &apiutil.Path{Nlri: nlri, Family: bgp.RF_IPv4_UC, Attrs: []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(0), nh}})
	}
	_, err = r.srv.AddPath(apiutil.AddPathRequest{Paths: paths})
	must(t, err)
}

// prefixes are the router's routes that are not stale.
func (r *router) prefixes() map[string]bool {
	fresh, _ := r.paths()
	return fresh
}

// paths are the router's routes: not stale, and kept as stale for a
// restarting node (graceful restart).
func (r *router) paths() (fresh, stale map[string]bool) {
	fresh, stale = map[string]bool{}, map[string]bool{}
	_ = r.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: bgp.RF_IPv4_UC}, func(p bgp.NLRI, ps []*apiutil.Path) {
		for _, path := range ps {
			if path.Stale {
				stale[p.String()] = true
			} else {
				fresh[p.String()] = true
			}
		}
	})
	return fresh, stale
}

// openingRouter is the node's GoBGP speaker, counting the sessions it was
// asked to open.
type openingRouter struct {
	*bgpspeaker.GoBGP
	opened atomic.Int32
}

func (r *openingRouter) AddPeer(ctx context.Context, p bgpspeaker.PeerConfig, restarting bool) error {
	r.opened.Add(1)
	return r.GoBGP.AddPeer(ctx, p, restarting)
}

// hungClient is an API server that hangs (SIGSTOP): every call waits
// until its context ends.
type hungClient struct{ client.Client }

func (hungClient) Get(ctx context.Context, _ client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	<-ctx.Done()
	return ctx.Err()
}

func (hungClient) Create(ctx context.Context, _ client.Object, _ ...client.CreateOption) error {
	<-ctx.Done()
	return ctx.Err()
}

func (h hungClient) Status() client.SubResourceWriter { return hungStatus{h.Client.Status()} }

type hungStatus struct{ client.SubResourceWriter }

func (hungStatus) Update(ctx context.Context, _ client.Object, _ ...client.SubResourceUpdateOption) error {
	<-ctx.Done()
	return ctx.Err()
}

func (hungStatus) Patch(ctx context.Context, _ client.Object, _ client.Patch, _ ...client.SubResourcePatchOption) error {
	<-ctx.Done()
	return ctx.Err()
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s (last: %s)", what, within, last)
}

func services(n int) []*announce.Service {
	var out []*announce.Service
	for i := range n {
		out = append(out, &announce.Service{Key: announce.ServiceKey{Namespace: "default", Name: fmt.Sprintf("s%d", i)},
			IngressIPs: []netip.Addr{netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)})}})
	}
	return out
}

// TestBackend: objects from the API server become routes at the router;
// 100 Services cost no status write; a backend restarted while the API
// server hangs re-advertises from its state file: it opens no session
// before the agent's loop has handed it the Services (its End-of-RIB
// would come with no routes, and the router would drop the ones it kept
// as stale), and a status write that hangs does not hold up a decision.
func TestBackend(t *testing.T) {
	if !inOwnNetns(t) {
		return
	}
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := startRouter(t)
	c := env.Client
	createNode(ctx, t, c)
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mooring-system"}}))
	must(t, c.Create(ctx, &mooringv1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: mooringv1.LoadBalancerIPPoolSpec{Blocks: []mooringv1.IPBlock{{CIDR: "192.0.2.0/24"}}}}))
	must(t, c.Create(ctx, &mooringv1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor"}, Spec: mooringv1.BGPPeerSpec{
		MyASN: 64512, PeerASN: ptr(int64(64500)), PeerAddress: routerAddr.String(), PeerPort: int32(r.port), SourceAddress: nodeAddr.String(),
		ConnectTime: &metav1.Duration{Duration: time.Second}}}))
	must(t, c.Create(ctx, &mooringv1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "all"}}))
	dir := t.TempDir()

	var speaker *openingRouter
	var reg *prometheus.Registry
	start := func(synced bool, c client.Client) (*bgpagent.Backend, context.CancelFunc, chan error) {
		speaker = &openingRouter{GoBGP: bgpspeaker.NewGoBGP(quietLog(), nil)}
		reg = prometheus.NewRegistry()
		b := bgpagent.New(bgpagent.Config{Node: "node-a", Namespace: "mooring-system", StateDir: dir},
			bgpagent.Deps{Reader: c, Client: c, Router: speaker, Log: quietLog(), Registerer: reg,
				Synced: func() bool { return synced }})
		bctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- b.Run(bctx) }()
		return b, stop, done
	}
	b, stop, done := start(true, c)
	b.SetServices(true, services(1), nil)
	waitFor(t, 20*time.Second, "first route", func() (bool, string) {
		p := r.prefixes()
		return p["192.0.2.10/32"], fmt.Sprint(p)
	})
	waitFor(t, 10*time.Second, "BGPSpeaker Established", func() (bool, string) {
		var s mooringv1.BGPSpeaker
		err := c.Get(ctx, client.ObjectKey{Name: "node-a"}, &s)
		return err == nil && s.Status.EstablishedCount == 1, fmt.Sprintf("%+v %v", s.Status, err)
	})
	var before mooringv1.BGPSpeaker
	must(t, c.Get(ctx, client.ObjectKey{Name: "node-a"}, &before))
	waitFor(t, 10*time.Second, "the metrics: session up, one prefix advertised", func() (bool, string) {
		up, sent := gauge(t, reg, "mooring_bgp_session_up", "tor"), gauge(t, reg, "mooring_bgp_prefixes_advertised", "tor")
		return up == 1 && sent == 1, fmt.Sprintf("up %v advertised %v", up, sent)
	})

	for i := range 100 {
		b.SetServices(false, services(i + 1)[i:], nil)
	}
	waitFor(t, 20*time.Second, "100 routes", func() (bool, string) { return len(r.prefixes()) == 100, fmt.Sprint(len(r.prefixes())) })
	time.Sleep(2 * time.Second) // a status write would have happened by now
	var after mooringv1.BGPSpeaker
	must(t, c.Get(ctx, client.ObjectKey{Name: "node-a"}, &after))
	if after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("100 Services wrote the BGPSpeaker: %+v", after.Status)
	}

	// Restart while the API server hangs: the state file carries it.
	stop()
	if err := <-done; err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	waitFor(t, 5*time.Second, "routes marked stale", func() (bool, string) { return len(r.prefixes()) == 0, fmt.Sprint(len(r.prefixes())) })
	b2, stop2, done2 := start(false, hungClient{c})
	defer func() { stop2(); <-done2 }()
	// The agent's loop hands the Services over from its snapshot only
	// after its snapshot wait (5 s by default): meanwhile no session, and
	// the router keeps every route as stale.
	time.Sleep(2 * time.Second)
	if fresh, stale := r.paths(); len(fresh) != 0 || len(stale) != 100 || speaker.opened.Load() != 0 {
		t.Fatalf("before the agent's first pass the router has %d routes, %d stale; %d sessions opened: want the 100 kept as stale, none opened",
			len(fresh), len(stale), speaker.opened.Load())
	}
	b2.SetServices(true, services(100), nil)
	waitFor(t, 10*time.Second, "routes refreshed from the state file", func() (bool, string) { return len(r.prefixes()) == 100, fmt.Sprint(len(r.prefixes())) })
}

// TestBackendStatusAndConditions: a peer whose Secret is missing stays
// closed with PasswordUnavailable in the BGPSpeaker; the status-writing
// agent puts what admission could not check into the objects' conditions,
// naming the field and the fix.
func TestBackendStatusAndConditions(t *testing.T) {
	if !inOwnNetns(t) {
		return
	}
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.Client
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	must(t, c.Create(ctx, node))
	must(t, c.Create(ctx, &mooringv1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor"}, Spec: mooringv1.BGPPeerSpec{
		MyASN: 64512, PeerASN: ptr(int64(64500)), PeerAddress: routerAddr.String(), PasswordSecret: &mooringv1.SecretName{Name: "tor-pw"},
		BFDProfile: "fast"}}))
	must(t, c.Create(ctx, &mooringv1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "tagged"},
		Spec: mooringv1.BGPAdvertisementSpec{Communities: []string{"65000:1", "no-such-alias"}}}))
	reg := prometheus.NewRegistry()
	b := bgpagent.New(bgpagent.Config{Node: "node-a", Namespace: "mooring-system"},
		bgpagent.Deps{Reader: c, Client: c, Router: bgpspeaker.NewGoBGP(quietLog(), nil), Log: quietLog(), Registerer: reg})
	b.SetStatusWriter(true)
	b.SetServices(true, nil, nil) // the agent's first pass: no Services
	bctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	defer func() { stop(); <-done }()
	waitFor(t, 10*time.Second, "PasswordUnavailable", func() (bool, string) {
		var s mooringv1.BGPSpeaker
		err := c.Get(ctx, client.ObjectKey{Name: "node-a"}, &s)
		return err == nil && len(s.Status.Peers) == 1 && s.Status.Peers[0].Reason == mooringv1.BGPReasonPasswordUnavailable,
			fmt.Sprintf("%+v %v", s.Status, err)
	})
	if up, why := gauge(t, reg, "mooring_bgp_session_up", "tor"), gauge(t, reg, "mooring_bgp_session_down_reason", "tor", "reason", mooringv1.BGPReasonPasswordUnavailable); up != 0 || why != 1 {
		t.Fatalf("metrics: session up %v, down for PasswordUnavailable %v; want 0 and 1", up, why)
	}
	waitFor(t, 10*time.Second, "conditions", func() (bool, string) {
		var p mooringv1.BGPPeer
		var a mooringv1.BGPAdvertisement
		must(t, c.Get(ctx, client.ObjectKey{Name: "tor"}, &p))
		must(t, c.Get(ctx, client.ObjectKey{Name: "tagged"}, &a))
		pr, ar := meta.FindStatusCondition(p.Status.Conditions, "Ready"), meta.FindStatusCondition(a.Status.Conditions, "Ready")
		ok := pr != nil && pr.Status == metav1.ConditionTrue && strings.Contains(pr.Message, `spec.bfdProfile: BFDProfile "fast" does not exist`) &&
			ar != nil && ar.Status == metav1.ConditionFalse && strings.Contains(ar.Message, `spec.communities[1]: community alias "no-such-alias" is not defined: add it to a BGPCommunity`)
		return ok, fmt.Sprintf("peer %+v adv %+v", p.Status.Conditions, a.Status.Conditions)
	})
}

// gauge reads one series of peer from reg (with extra label pairs), -1
// when it is absent.
func gauge(t *testing.T, reg *prometheus.Registry, name, peer string, labels ...string) float64 {
	t.Helper()
	v, ok := promtest.Value(reg, name, append([]string{"peer", peer}, labels...)...)
	if !ok {
		return -1
	}
	return v
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestBackendMaxReceivedPrefixes: a BGPPeer's maxReceivedPrefixes from
// the API server to the session: a router sending 300 routes past a limit
// of 200 gets the session closed, the node's BGPSpeaker and metrics say
// MaxPrefixesExceeded; raising the limit to 500 opens it at once, with the
// 300 counted received.
func TestBackendMaxReceivedPrefixes(t *testing.T) {
	if !inOwnNetns(t) {
		return
	}
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := startRouter(t)
	r.sends(t, 300)
	c := env.Client
	createNode(ctx, t, c)
	peer := &mooringv1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor"}, Spec: mooringv1.BGPPeerSpec{
		MyASN: 64512, PeerASN: ptr(int64(64500)), PeerAddress: routerAddr.String(), PeerPort: int32(r.port), SourceAddress: nodeAddr.String(),
		ConnectTime: &metav1.Duration{Duration: time.Second}, MaxReceivedPrefixes: ptr(int64(200))}}
	must(t, c.Create(ctx, peer))
	// The client discovers each kind at its first use (seconds here); the
	// backend waits nine times a decision's duration before the next, so
	// a first decision slowed by discovery would hold up the second.
	for _, l := range []client.ObjectList{&mooringv1.BGPPeerList{}, &mooringv1.BGPAdvertisementList{}, &mooringv1.BGPCommunityList{},
		&mooringv1.BFDProfileList{}, &mooringv1.LoadBalancerIPPoolList{}} {
		must(t, c.List(ctx, l))
	}
	reg := prometheus.NewRegistry()
	b := bgpagent.New(bgpagent.Config{Node: "node-a", Namespace: "mooring-system"},
		bgpagent.Deps{Reader: c, Client: c, Router: bgpspeaker.NewGoBGP(quietLog(), nil), Log: quietLog(), Registerer: reg})
	b.SetServices(true, nil, nil)
	bctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	defer func() { stop(); <-done }()
	waitFor(t, 20*time.Second, "BGPSpeaker: MaxPrefixesExceeded", func() (bool, string) {
		var s mooringv1.BGPSpeaker
		err := c.Get(ctx, client.ObjectKey{Name: "node-a"}, &s)
		return err == nil && len(s.Status.Peers) == 1 && s.Status.Peers[0].Reason == mooringv1.BGPReasonMaxPrefixesExceeded &&
			strings.Contains(s.Status.Peers[0].Message, "more than 200 IPv4 prefixes"), fmt.Sprintf("%+v %v", s.Status, err)
	})
	if up, why := gauge(t, reg, "mooring_bgp_session_up", "tor"), gauge(t, reg, "mooring_bgp_session_down_reason", "tor", "reason", mooringv1.BGPReasonMaxPrefixesExceeded); up != 0 || why != 1 {
		t.Fatalf("metrics: session up %v, down for MaxPrefixesExceeded %v; want 0 and 1", up, why)
	}

	must(t, c.Get(ctx, client.ObjectKey{Name: "tor"}, peer))
	peer.Spec.MaxReceivedPrefixes = ptr(int64(500))
	must(t, c.Update(ctx, peer))
	b.Trigger() // the agent's informer does this
	waitFor(t, 15*time.Second, "open again at once with 300 received", func() (bool, string) {
		up, got := gauge(t, reg, "mooring_bgp_session_up", "tor"), gauge(t, reg, "mooring_bgp_prefixes_received", "tor")
		return up == 1 && got == 300, fmt.Sprintf("up %v received %v", up, got)
	})
}
