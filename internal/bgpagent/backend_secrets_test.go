package bgpagent

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
	"github.com/mooringlb/mooring/internal/kube"
)

// The backend with its password reads in the background, on a fake API
// server and a fake router: no kube-apiserver, no GoBGP, no privileges.

// routerEvent is one call the backend made on fakeRouter.
type routerEvent struct {
	op, peer, password string
	restarting         bool
	prefixes           []netip.Prefix
}

// fakeRouter records AddPeer and Announce on events.
type fakeRouter struct{ events chan routerEvent }

func (r *fakeRouter) Start(context.Context, bgpspeaker.Global) error { return nil }
func (r *fakeRouter) Stop(context.Context, bool) error               { return nil }
func (r *fakeRouter) AddPeer(_ context.Context, p bgpspeaker.PeerConfig, restarting bool) error {
	r.events <- routerEvent{op: "add", peer: p.Peer, password: p.Password, restarting: restarting}
	return nil
}
func (r *fakeRouter) UpdatePeer(_ context.Context, p bgpspeaker.PeerConfig) error {
	r.events <- routerEvent{op: "update", peer: p.Peer, password: p.Password}
	return nil
}
func (r *fakeRouter) DeletePeer(_ context.Context, name string) error {
	r.events <- routerEvent{op: "delete", peer: name}
	return nil
}
func (r *fakeRouter) Announce(_ context.Context, peer string, routes []bgpspeaker.Path) error {
	if len(routes) > 0 {
		e := routerEvent{op: "announce", peer: peer}
		for _, p := range routes {
			e.prefixes = append(e.prefixes, p.Prefix)
		}
		r.events <- e
	}
	return nil
}
func (r *fakeRouter) Withdraw(context.Context, string, []bgpspeaker.Path) error { return nil }
func (r *fakeRouter) Sessions(context.Context) ([]bgpspeaker.SessionState, error) {
	return nil, nil
}

// gatedSecrets is the fake API server with its Secret GETs held until the
// test answers: each sends its name on calls and waits for release (or
// its context); pending counts those not returned yet.
type gatedSecrets struct {
	client.Client
	calls   chan string
	release chan struct{}
	pending atomic.Int32
}

func (g *gatedSecrets) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		g.pending.Add(1)
		defer g.pending.Add(-1)
		g.calls <- key.Name
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Client.Get(ctx, key, obj, opts...)
}

// next returns the next router event that matches, failing after a bound
// far beyond any wait the backend makes (a hang, not a timing check).
func next(t *testing.T, events chan routerEvent, what string, match func(routerEvent) bool) routerEvent {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case e := <-events:
			if match(e) {
				return e
			}
		case <-deadline:
			t.Fatalf("%s: not within a minute", what)
		}
	}
}

func peerObj(name, addr, secret string) *mooringv1.BGPPeer {
	asn := int64(64500)
	p := &mooringv1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: mooringv1.BGPPeerSpec{MyASN: 64512, PeerASN: &asn, PeerAddress: addr}}
	if secret != "" {
		p.Spec.PasswordSecret = &mooringv1.SecretName{Name: secret}
	}
	return p
}

// The issue-20 gap at the backend: a peer whose Secret was never read is
// left closed ("not known yet") while the decision applies everything
// else — a new Service's route reaches the other peer while the Secret's
// GET is still unanswered — and the read's end decides again, opening the
// peer with its password. The first decision after start waits for a
// Secret never read, so its peer opens with the Restart State bit.
func TestBackendSecretReadInBackground(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.2"}}}}
	objs := []client.Object{node,
		&mooringv1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec: mooringv1.LoadBalancerIPPoolSpec{Blocks: []mooringv1.IPBlock{{CIDR: "192.0.2.0/24"}}}},
		&mooringv1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "all"}},
		peerObj("first", "198.18.0.3", "first-pw"),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "mooring-system", Name: "first-pw"}, Data: map[string][]byte{"password": []byte("pw-1")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "mooring-system", Name: "tor-pw"}, Data: map[string][]byte{"password": []byte("s3cret")}},
	}
	fc := fake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(objs...).Build()
	g := &gatedSecrets{Client: fc, calls: make(chan string, 16), release: make(chan struct{})}
	r := &fakeRouter{events: make(chan routerEvent, 64)}
	b := New(Config{Node: "node-a", Namespace: "mooring-system", Settle: time.Millisecond},
		Deps{Reader: fc, Client: g, Router: r})
	b.SetServices(true, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()

	// Start: the first decision waits for "first-pw", never read.
	if n := <-g.calls; n != "first-pw" {
		t.Fatalf("first GET: %s", n)
	}
	g.release <- struct{}{}
	if e := next(t, r.events, "first peer added", func(e routerEvent) bool { return e.op == "add" }); e.peer != "first" || e.password != "pw-1" || !e.restarting {
		t.Fatalf("first decision added %+v, want peer first with its password and the Restart State bit", e)
	}

	// A new peer whose Secret is never read, and a new Service, while the
	// Secret's GET hangs.
	must(t, fc.Create(ctx, peerObj("tor", "198.18.0.4", "tor-pw")))
	b.SetServices(false, []*announce.Service{{Key: announce.ServiceKey{Namespace: "default", Name: "web"},
		IngressIPs: []netip.Addr{netip.MustParseAddr("192.0.2.10")}}}, nil)
	if n := <-g.calls; n != "tor-pw" {
		t.Fatalf("GET %s, want tor-pw", n)
	}
	e := next(t, r.events, "the Service's route at the first peer", func(e routerEvent) bool {
		if e.op == "add" && e.peer == "tor" {
			t.Fatalf("tor added before its Secret was read: %+v", e)
		}
		return e.op == "announce" && e.peer == "first"
	})
	if fmt.Sprint(e.prefixes) != "[192.0.2.10/32]" || g.pending.Load() != 1 {
		t.Fatalf("announced %v with %d Secret GETs unanswered: want 192.0.2.10/32 while tor-pw's GET waits", e.prefixes, g.pending.Load())
	}
	st, err := b.speaker.Status(ctx)
	must(t, err)
	var tor *bgpspeaker.SessionState
	for i := range st {
		if st[i].Peer == "tor" {
			tor = &st[i]
		}
	}
	if tor == nil || tor.Reason != bgpspeaker.ReasonPasswordUnavailable || !strings.Contains(tor.Message, "not known yet") {
		t.Fatalf("tor while its Secret is read: %+v, want closed, PasswordUnavailable, not known yet", tor)
	}

	// The read ends: the backend decides again and opens tor.
	g.release <- struct{}{}
	e = next(t, r.events, "tor added", func(e routerEvent) bool { return e.op == "add" })
	if e.peer != "tor" || e.password != "s3cret" || e.restarting {
		t.Fatalf("after the read: %+v, want tor with its password", e)
	}

	// The agent stops while a read hangs: Run returns after it ended.
	must(t, fc.Create(ctx, peerObj("late", "198.18.0.5", "late-pw")))
	b.Trigger()
	if n := <-g.calls; n != "late-pw" {
		t.Fatalf("GET %s, want late-pw", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := g.pending.Load(); n != 0 {
		t.Fatalf("Run returned with %d Secret reads running", n)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
