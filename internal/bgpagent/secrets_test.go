package bgpagent

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
)

// hungReader is an API server that never answers a GET (stopped, or a
// connection that black-holes): Get returns only when ctx ends.
type hungReader struct{ client.Reader }

func (hungReader) Get(ctx context.Context, _ client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	<-ctx.Done()
	return ctx.Err()
}

// gateReader is an API server the test answers by hand: each GET sends
// its Secret's name on calls, then waits for an answer on answers (or its
// context's end).
type gateReader struct {
	client.Reader
	calls   chan string
	answers chan answer
	n       atomic.Int32 // GETs made
}

// answer is one GET's outcome: the password, or err.
type answer struct {
	pw  string
	err error
}

func newGate() *gateReader {
	return &gateReader{calls: make(chan string, 16), answers: make(chan answer)}
}

func (g *gateReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	g.n.Add(1)
	g.calls <- key.Name
	select {
	case a := <-g.answers:
		if a.err == nil {
			obj.(*corev1.Secret).Data = map[string][]byte{"password": []byte(a.pw)}
		}
		return a.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// testSecrets is a secrets on a clock the test moves, whose wakes go to
// the returned channel.
func testSecrets(c client.Reader, clock *time.Time) (*secrets, chan struct{}) {
	woke := make(chan struct{}, 1)
	s := newSecrets(c, "mooring-system", time.Minute, func() time.Time { return *clock }, func() {
		select {
		case woke <- struct{}{}:
		default:
		}
	})
	return s, woke
}

// woken reports whether the wake channel holds a wake, and takes it.
func woken(woke chan struct{}) bool {
	select {
	case <-woke:
		return true
	default:
		return false
	}
}

// testCtx is a context the test's cleanup cancels, after which the
// secrets' reads must have ended.
func testCtx(t *testing.T, s *secrets) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(func() { cancel(); s.wait() })
	return ctx
}

// The issue-20 gap: a password read before is used at once while its
// re-read hangs, with one read in flight however many decisions come; a
// re-read that fails keeps it (no wake: nothing changed) and is tried
// again secretRetry later; a changed password and a deleted Secret wake
// the backend, with the deleted Secret's reason.
func TestSecretKeptWhileReadHangs(t *testing.T) {
	clock := time.Unix(1000, 0)
	g := newGate()
	s, woke := testSecrets(g, &clock)
	s.timeout = time.Hour // only the test's answers end a GET
	ctx := testCtx(t, s)

	// First read: the decision does not wait for it.
	if pw, ok := s.passwords(ctx, []string{"tor"}, false)["tor"]; ok {
		t.Fatalf("never read: got %+v, want the name left out", pw)
	}
	<-g.calls
	g.answers <- answer{pw: "s3cret"}
	<-woke
	if pw := s.passwords(ctx, []string{"tor"}, false)["tor"]; pw.Value != "s3cret" || pw.Unavailable != "" {
		t.Fatalf("read: %+v", pw)
	}

	// Stale: the re-read starts and hangs; three decisions get the kept
	// password while its GET is still waiting for its answer (sent only
	// after they returned).
	clock = clock.Add(2 * time.Minute)
	for range 3 {
		if pw := s.passwords(ctx, []string{"tor"}, false)["tor"]; pw.Value != "s3cret" || pw.Unavailable != "" {
			t.Fatalf("stale, re-read hanging: %+v, want the kept password", pw)
		}
	}
	<-g.calls
	g.answers <- answer{err: errors.New("connection refused")}
	s.wait()
	if n := g.n.Load(); n != 2 {
		t.Fatalf("%d GETs, want 2 (one in flight per name)", n)
	}
	if woken(woke) {
		t.Fatal("a failed re-read that kept the password woke the backend")
	}
	if pw := s.passwords(ctx, []string{"tor"}, false)["tor"]; pw.Value != "s3cret" {
		t.Fatalf("after a failed re-read: %+v, want the password kept", pw)
	}
	if e := s.read["tor"]; clock.Sub(e.at) != time.Minute-secretRetry {
		t.Fatalf("retry after %s, want %s", time.Minute-clock.Sub(e.at), secretRetry)
	}
	if n := g.n.Load(); n != 2 {
		t.Fatalf("%d GETs, want no new one before secretRetry", n)
	}

	// Retry due: a new password wakes the backend.
	clock = clock.Add(secretRetry)
	if pw := s.passwords(ctx, []string{"tor"}, false)["tor"]; pw.Value != "s3cret" {
		t.Fatalf("retry due: %+v", pw)
	}
	<-g.calls
	g.answers <- answer{pw: "n3w"}
	<-woke
	if pw := s.passwords(ctx, []string{"tor"}, false)["tor"]; pw.Value != "n3w" {
		t.Fatalf("changed: %+v", pw)
	}

	// Deleted: the password goes, with the reason; the backend wakes.
	clock = clock.Add(2 * time.Minute)
	s.passwords(ctx, []string{"tor"}, false)
	<-g.calls
	g.answers <- answer{err: apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "tor")}
	<-woke
	if pw := s.passwords(ctx, []string{"tor"}, false)["tor"]; pw.Value != "" || !strings.Contains(pw.Unavailable, "Secret mooring-system/tor does not exist") {
		t.Fatalf("deleted: %+v, want no password and why", pw)
	}

	// Readable again.
	clock = clock.Add(2 * time.Minute)
	s.passwords(ctx, []string{"tor"}, false)
	<-g.calls
	g.answers <- answer{pw: "n3w"}
	<-woke
	if pw := s.passwords(ctx, []string{"tor"}, false)["tor"]; pw.Value != "n3w" || pw.Unavailable != "" {
		t.Fatalf("readable again: %+v", pw)
	}
}

// A Secret never read leaves only its own name out, at once, while its
// GET waits; the others are returned.
func TestSecretNeverReadLeavesOnlyItsPeer(t *testing.T) {
	clock := time.Unix(1000, 0)
	g := newGate()
	s, woke := testSecrets(g, &clock)
	s.timeout = time.Hour
	ctx := testCtx(t, s)
	s.restore(map[string]string{"a": "pw-a"}) // stale at once: re-read too

	got := s.passwords(ctx, []string{"a", "b"}, false)
	if len(got) != 1 || got["a"].Value != "pw-a" {
		t.Fatalf("a kept, b never read: %+v, want only a", got)
	}
	// Both GETs are waiting now, unanswered.
	for range 2 {
		<-g.calls
	}
	// The same answer for both: a's is unchanged, so only b's wakes.
	g.answers <- answer{pw: "pw-a"}
	g.answers <- answer{pw: "pw-a"}
	s.wait()
	if !woken(woke) {
		t.Fatal("a Secret read for the first time did not wake the backend")
	}
	got = s.passwords(ctx, []string{"a", "b"}, false)
	if got["a"].Value != "pw-a" || got["b"].Value != "pw-a" {
		t.Fatalf("after the reads: %+v", got)
	}
}

// The first decision (waitNew) waits for the Secrets never read — not for
// the kept ones — so their peers open with graceful restart's bits.
func TestSecretFirstDecisionWaitsForNew(t *testing.T) {
	clock := time.Unix(1000, 0)
	g := newGate()
	s, _ := testSecrets(g, &clock)
	s.timeout = time.Hour
	ctx := testCtx(t, s)
	got := make(chan map[string]string, 1)
	go func() {
		out := map[string]string{}
		for n, pw := range s.passwords(ctx, []string{"tor"}, true) {
			out[n] = pw.Value
		}
		got <- out
	}()
	<-g.calls
	g.answers <- answer{pw: "s3cret"}
	if out := <-got; out["tor"] != "s3cret" {
		t.Fatalf("first decision: %v, want the password read", out)
	}
}

// A hung API server: a read never answered ends after the timeout with a
// reason that says so (and wakes the backend); one read before is kept.
func TestSecretReadTimesOut(t *testing.T) {
	clock := time.Unix(1000, 0)
	s, woke := testSecrets(hungReader{}, &clock)
	s.timeout = 50 * time.Millisecond
	ctx := testCtx(t, s)
	if _, ok := s.passwords(ctx, []string{"tor"}, false)["tor"]; ok {
		t.Fatal("never read: want the name left out while it is read")
	}
	<-woke
	pw := s.passwords(ctx, []string{"tor"}, false)["tor"]
	if pw.Value != "" || !strings.Contains(pw.Unavailable, "did not answer within 50ms") || !strings.Contains(pw.Unavailable, "mooring-system/tor") {
		t.Fatalf("never read, API server hung: %+v", pw)
	}
	// The first decision waits at most the timeout too.
	s2, _ := testSecrets(hungReader{}, &clock)
	s2.timeout = 50 * time.Millisecond
	if pw := s2.passwords(testCtx(t, s2), []string{"tor"}, true)["tor"]; !strings.Contains(pw.Unavailable, "did not answer within 50ms") {
		t.Fatalf("first decision, API server hung: %+v", pw)
	}

	s.restore(map[string]string{"kept": "s3cret"})
	if pw := s.passwords(ctx, []string{"kept"}, true)["kept"]; pw.Value != "s3cret" {
		t.Fatalf("kept from the state file, API server hung: %+v", pw)
	}
	s.wait()
	if pw := s.passwords(ctx, []string{"kept"}, false)["kept"]; pw.Value != "s3cret" || pw.Unavailable != "" {
		t.Fatalf("after the timed-out re-read: %+v, want the password kept", pw)
	}
	if e := s.read["kept"]; clock.Sub(e.at) != time.Minute-secretRetry {
		t.Fatalf("retry after %s, want %s", time.Minute-clock.Sub(e.at), secretRetry)
	}
}

// Reads end when the agent stops (no goroutine left behind) and change
// nothing then.
func TestSecretReadsEndWithContext(t *testing.T) {
	clock := time.Unix(1000, 0)
	g := newGate()
	s, woke := testSecrets(g, &clock)
	s.timeout = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	s.passwords(ctx, []string{"a", "b"}, false)
	<-g.calls
	<-g.calls
	cancel()
	done := make(chan struct{})
	go func() { s.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("reads still running 30s after their context ended")
	}
	if len(s.read) != 0 || len(s.reading) != 0 || woken(woke) {
		t.Fatalf("a read cut short by the stop left %v (in flight %v) or woke the backend", s.read, s.reading)
	}
	if got := s.passwords(ctx, []string{"a"}, true); len(got) != 0 || g.n.Load() != 2 {
		t.Fatalf("after the stop: %v, %d GETs: want no new read", got, g.n.Load())
	}
}

// hungWriter is an API server that never answers a status patch.
type hungWriter struct{ client.Client }

func (hungWriter) Status() client.SubResourceWriter { return hungStatus{} }

type hungStatus struct{ client.SubResourceWriter }

func (hungStatus) Patch(ctx context.Context, _ client.Object, _ client.Patch, _ ...client.SubResourcePatchOption) error {
	<-ctx.Done()
	return ctx.Err()
}

// The status writer's condition patches, made inside the decision, give up
// after conditionsTimeout when the API server hangs.
func TestConditionsWriteTimesOut(t *testing.T) {
	defer func(d time.Duration) { conditionsTimeout = d }(conditionsTimeout)
	conditionsTimeout = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	objs := Objects{Peers: []mooringv1.BGPPeer{{ObjectMeta: metav1.ObjectMeta{Name: "tor", Generation: 1}}}}
	start := time.Now()
	err := writeConditions(ctx, hungWriter{}, objs, nil)
	if took := time.Since(start); took > 2*time.Second || err == nil {
		t.Fatalf("a hung API server held the condition write %s (timeout 50ms): %v", took, err)
	}
}
