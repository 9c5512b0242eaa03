package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/agent/snapshot"
	"github.com/mooringlb/mooring/internal/agent/store"
	"github.com/mooringlb/mooring/internal/kube"
)

// snapshotOf decides once with the fixture and returns the snapshot a live
// agent would write, plus the fixture's reader.
func snapshotOf(t *testing.T) (*snapshot.File, client.Client, string) {
	t.Helper()
	a, c, _, _, owner := fixture(t)
	if err := a.decide(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.Read(context.Background(), c, owner, a.loop.state.Result())
	if err != nil {
		t.Fatal(err)
	}
	s.Written = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return s, c, owner
}

func TestSnapshotRoundTripAndReader(t *testing.T) {
	s, _, owner := snapshotOf(t)
	if len(s.Owned) != 1 || s.Owned[0] != (snapshot.Entry{Addr: "10.213.0.100", Interface: "eth0"}) {
		t.Fatalf("owned %+v, want 10.213.0.100 on eth0", s.Owned)
	}
	s.Slices = append(s.Slices,
		discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			Endpoints: []discoveryv1.Endpoint{{NodeName: ptr.To("node-2")}}},
		discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "web-2", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}},
		discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db-1", Labels: map[string]string{discoveryv1.LabelServiceName: "db"}}})
	dir := t.TempDir()
	if err := snapshot.Write(dir, s); err != nil {
		t.Fatal(err)
	}
	got, err := snapshot.Load(dir, owner)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Owned, s.Owned) || len(got.Services) != 1 || len(got.Nodes) != 3 || len(got.Policies) != 1 || !got.Written.Equal(s.Written) {
		t.Fatalf("read back %+v", got)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}

	r := snapshot.NewReader(got)
	ctx := context.Background()
	var svc = got.Services[0].DeepCopy()
	if err := r.Get(ctx, types.NamespacedName{Namespace: "default", Name: "web"}, svc); err != nil || svc.Status.LoadBalancer.Ingress[0].IP != "10.213.0.100" {
		t.Fatalf("Get web: %v %+v", err, svc.Status)
	}
	svc.Name = "changed" // a copy: the snapshot is untouched
	if got.Services[0].Name != "web" {
		t.Fatal("Get returned the snapshot's own object")
	}
	if err := r.Get(ctx, types.NamespacedName{Namespace: "default", Name: "nope"}, svc); !apierrors.IsNotFound(err) {
		t.Fatalf("Get of a missing Service: %v, want NotFound", err)
	}
	var es discoveryv1.EndpointSliceList
	if err := r.List(ctx, &es, client.InNamespace("default"), client.MatchingFields{store.IndexSliceService: "web"}); err != nil {
		t.Fatal(err)
	}
	if len(es.Items) != 1 || es.Items[0].Name != "web-1" {
		t.Fatalf("slices of default/web: %+v", es.Items)
	}
}

func TestSnapshotMissingOrCorruptSaysWhy(t *testing.T) {
	s, _, owner := snapshotOf(t)
	good := t.TempDir()
	if err := snapshot.Write(good, s); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(snapshot.Path(good))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		content []byte // nil: no file
		node    string
		want    string
	}{
		"missing":    {nil, owner, "no snapshot to serve from"},
		"garbage":    {[]byte("{not gzip"), owner, "is corrupt (not gzip)"},
		"truncated":  {b[:len(b)/2], owner, "is corrupt"},
		"other node": {b, "node-9", `was written by node "` + owner + `"`},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.content != nil {
				if err := os.WriteFile(snapshot.Path(dir), tc.content, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := snapshot.Load(dir, tc.node)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("load: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// The snapshot is rewritten only when what it holds changed.
func TestSnapshotWrittenOnlyWhenChanged(t *testing.T) {
	a, c, _, _, _ := fixture(t)
	a.cfg.StateDir = t.TempDir()
	ctx := context.Background()
	if err := a.decide(ctx); err != nil {
		t.Fatal(err)
	}
	var last snapshot.Mark
	for i, want := range []bool{true, false, false} {
		if wrote, err := keeper(a).Save(ctx, a.loop.state.Result(), &last); err != nil || wrote != want {
			t.Fatalf("save %d: wrote %v (err %v), want %v", i, wrote, err, want)
		}
	}
	svc := agenttest.LBService("default", "db", "10.213.0.101")
	if err := c.Create(ctx, &svc); err != nil {
		t.Fatal(err)
	}
	if wrote, err := keeper(a).Save(ctx, a.loop.state.Result(), &last); err != nil || !wrote {
		t.Fatalf("save after a new Service: wrote %v (err %v)", wrote, err)
	}
}

// gate is an informer cache that syncs when open is closed.
type gate struct{ open chan struct{} }

func (g gate) WaitForCacheSync(ctx context.Context) bool {
	select {
	case <-g.open:
		return true
	case <-ctx.Done():
		return false
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// snapshotAgent is an agent whose API server has not answered (its live
// reader is empty until the gate opens), with dir as --state-dir.
func snapshotAgent(t *testing.T, node, dir string, live client.Reader) (*Agent, *snapshot.SwitchReader, *agenttest.Responder, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cfg := DefaultConfig()
	cfg.NodeName, cfg.StateDir, cfg.SnapshotWait = node, dir, 50*time.Millisecond
	cfg.Log = slog.New(slog.NewTextHandler(logs, nil))
	src := snapshot.NewSwitchReader(live)
	resp := &agenttest.Responder{}
	mem := agenttest.NewMembers([]string{"node-1", "node-2", "node-3"}...)
	a := New(cfg, Deps{Reader: src, Client: fake.NewClientBuilder().WithScheme(kube.Scheme()).Build(), Members: mem, Responder: resp,
		Links: agenttest.Links{}, Sysctls: agenttest.Sysctls{}, Registerer: prometheus.NewRegistry()})
	return a, src, resp, logs
}

// An agent that starts while the API server does not answer serves what
// the snapshot says (with live gossip: here every member is alive, so the
// same owner), /readyz says so, and it switches to the caches once they
// sync.
func TestStartFromSnapshotUntilCachesSync(t *testing.T) {
	s, live, owner := snapshotOf(t)
	dir := t.TempDir()
	if err := snapshot.Write(dir, s); err != nil {
		t.Fatal(err)
	}
	a, _, resp, logs := snapshotAgent(t, owner, dir, live)
	g := gate{open: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.startFrom(ctx, g, srcOf(a)) }()
	defer func() { cancel(); <-done }()

	want := map[int][]netip.Addr{2: {ip("10.213.0.100")}}
	waitUntil(t, func() bool { return reflect.DeepEqual(resp.Table(), want) }, "the snapshot's address is answered")
	if what, err := a.readyz(); err != nil || !strings.Contains(what, "local snapshot written 2026-11-30T12:00:00Z") {
		t.Fatalf("/readyz from the snapshot: %q, %v", what, err)
	}
	if !strings.Contains(logs.String(), "serving from the local snapshot") {
		t.Fatalf("no log line says the agent serves from the snapshot:\n%s", logs)
	}
	close(g.open)
	waitUntil(t, func() bool { what, _ := a.readyz(); return strings.Contains(what, "live API state") }, "/readyz says live")
	if !reflect.DeepEqual(resp.Table(), want) {
		t.Fatalf("table after the caches synced: %v", resp.Table())
	}
}

// srcOf returns the switch reader the agent was built with.
func srcOf(a *Agent) *snapshot.SwitchReader { return a.deps.Reader.(*snapshot.SwitchReader) }

// A corrupt snapshot: a clear log line, /readyz says why, nothing answered,
// no crash; the agent starts normally once the API server answers.
func TestStartWithCorruptSnapshot(t *testing.T) {
	_, live, owner := snapshotOf(t)
	dir := t.TempDir()
	if err := os.WriteFile(snapshot.Path(dir), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, _, resp, logs := snapshotAgent(t, owner, dir, live)
	g := gate{open: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.startFrom(ctx, g, srcOf(a)) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, func() bool { return strings.Contains(logs.String(), "local snapshot cannot be used") }, "a log line about the snapshot")
	if !strings.Contains(logs.String(), "is corrupt") {
		t.Fatalf("the log line does not say the snapshot is corrupt:\n%s", logs)
	}
	if _, err := a.readyz(); err == nil || !strings.Contains(err.Error(), "cannot be used") {
		t.Fatalf("/readyz: %v", err)
	}
	if resp.Table() != nil {
		t.Fatalf("answered %v without API state or snapshot", resp.Table())
	}
	close(g.open)
	waitUntil(t, func() bool { return len(resp.Table()[2]) == 1 }, "serving once the caches sync")
}

func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
