package bgpagent

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// answerReader answers every GET with a Secret holding pw.
type answerReader struct {
	client.Reader
	pw string
}

func (a answerReader) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	obj.(*corev1.Secret).Data = map[string][]byte{"password": []byte(a.pw)}
	return nil
}

// A hung API server holds a Secret read (and the decision that makes it)
// for the timeout only: a password never read is unavailable with a
// reason that says so, one read before is kept.
func TestSecretReadTimesOut(t *testing.T) {
	clock := time.Unix(1000, 0)
	now := func() time.Time { return clock }
	s := newSecrets(hungReader{}, "mooring-system", time.Minute, now)
	s.timeout = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	start := time.Now()
	pw := s.passwords(ctx, []string{"tor"})["tor"]
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("a hung API server held the read %s (timeout 50ms)", took)
	}
	if pw.Value != "" || !strings.Contains(pw.Unavailable, "did not answer within 50ms") || !strings.Contains(pw.Unavailable, "mooring-system/tor") {
		t.Fatalf("never read, API server hung: %+v", pw)
	}

	s = newSecrets(answerReader{pw: "s3cret"}, "mooring-system", time.Minute, now)
	if pw := s.passwords(ctx, []string{"tor"})["tor"]; pw.Value != "s3cret" {
		t.Fatalf("read: %+v", pw)
	}
	s.c, s.timeout = hungReader{}, 50*time.Millisecond
	clock = clock.Add(2 * time.Minute) // stale: read again
	if pw := s.passwords(ctx, []string{"tor"})["tor"]; pw.Value != "s3cret" || pw.Unavailable != "" {
		t.Fatalf("read before, API server hung now: %+v, want the password kept", pw)
	}
	// Tried again within secretRetry, not at once on the next decision.
	if e := s.read["tor"]; now().Sub(e.at) != time.Minute-secretRetry {
		t.Fatalf("retry after %s, want %s", time.Minute-now().Sub(e.at), secretRetry)
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
