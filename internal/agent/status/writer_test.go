package status

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/mailbox"
	"github.com/mooringlb/mooring/internal/testenv"
)

// status.lost is fast eviction's (internal/agent/evict): the status writer
// updates the rest of the L2Announcer and keeps it as it reads it, so a
// member change right after a node was listed as lost does not unlist it
// (the admission policy would then refuse the eviction).
func TestWriterKeepsLost(t *testing.T) {
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.Client
	if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	an := &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	if err := c.Create(ctx, an); err != nil {
		t.Fatal(err)
	}
	an.Status.Lost = []string{"n2"}
	an.Status.Members = []string{"n1", "n2"}
	if err := c.Status().Update(ctx, an); err != nil {
		t.Fatal(err)
	}
	rec := &Recorder{C: c, Clock: clock.RealClock{}, Node: "n1", Log: slog.New(slog.DiscardHandler), Writes: NewWrites(nil)}
	w := NewWriter(c, rec, clock.RealClock{}, mailbox.New[Decision](), &EventQueue{})
	if err := w.Sync(ctx, Decision{Members: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, an); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(an.Status.Members, []string{"n1"}) || !slices.Equal(an.Status.Lost, []string{"n2"}) {
		t.Fatalf("after the writer's update: members %v, lost %v; want [n1] and [n2] (kept)", an.Status.Members, an.Status.Lost)
	}
	// The same decision again writes nothing (status.lost is no change).
	var m dto.Metric
	if err := w.writes.Counter("announcer", "ok").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Fatalf("announcer writes after one change: %v (%v), want 1", m.GetCounter().GetValue(), err)
	}
	if err := w.Sync(ctx, Decision{Members: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	if err := w.writes.Counter("announcer", "ok").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Fatalf("announcer writes after the same decision again: %v (%v), want 1", m.GetCounter().GetValue(), err)
	}
}
