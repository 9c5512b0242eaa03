package evict

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/status"
)

// The eviction bound (issue 19): the ValidatingAdmissionPolicy
// mooring-agent-eviction (config/agent/admissionpolicy-eviction.yaml) lets
// an agent mark NotReady only pods of another node that its own
// L2Announcer lists in status.lost at that moment. So the deciding agent
// lists a node there before it marks the node's pods, and removes it when
// the node is back in gossip or its Node is gone: one write to list a
// node, one to clear it; nothing in steady state, and nothing on agents
// that do not mark. The status writer (internal/agent/status) keeps
// status.lost as it reads it, and both write with the resourceVersion
// they read, so neither overwrites the other's change.

// errLostWait: a write of status.lost failed a moment ago and is not
// tried again yet.
var errLostWait = errors.New("writing status.lost failed recently; retrying in a second")

// lostRetry is how soon a failed write of status.lost is tried again.
const lostRetry = time.Second

// listedWant is the sorted list of nodes status.lost must hold: those this
// agent marks or has marked, while they are still lost.
func (e *Evictor) listedWant() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(e.lost)) {
		if e.lost[name].listed {
			out = append(out, name)
		}
	}
	return out
}

// syncLost makes this node's L2Announcer status.lost equal listedWant:
// nothing when it already is (as last written or, after a start, as read
// once), else one read and one status update. It fails while the
// L2Announcer does not exist (the status writer creates it) if a node is
// to be listed.
func (e *Evictor) syncLost(ctx context.Context) error {
	want := e.listedWant()
	if e.published != nil && slices.Equal(*e.published, want) {
		return nil
	}
	if now := e.deps.Clock.Now(); !e.lostFailed.IsZero() && now.Sub(e.lostFailed) < lostRetry {
		return fmt.Errorf("%w: L2Announcer %s, last failure %v ago", errLostWait, e.cfg.Node, now.Sub(e.lostFailed))
	}
	err := e.writeLost(ctx, want)
	if err != nil {
		e.lostFailed = e.deps.Clock.Now()
		return err
	}
	e.lostFailed = time.Time{}
	e.published = &want
	return nil
}

// writeLost writes status.lost; a conflict (the status writer updated the
// L2Announcer in between, as it does when gossip loses a member) is
// retried at once, a few times.
func (e *Evictor) writeLost(ctx context.Context, want []string) error {
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	var err error
	for range 3 {
		if err = e.writeLostOnce(ctx, want); !apierrors.IsConflict(err) {
			break
		}
	}
	return err
}

func (e *Evictor) writeLostOnce(ctx context.Context, want []string) error {
	var obj mooringv1.L2Announcer
	err := e.deps.Client.Get(ctx, types.NamespacedName{Name: e.cfg.Node}, &obj)
	switch {
	case apierrors.IsNotFound(err) && len(want) == 0:
		return nil // nothing listed: nothing to clear
	case apierrors.IsNotFound(err):
		return fmt.Errorf("L2Announcer %s does not exist yet (the agent creates it once its Node exists): "+
			"cannot list %v in status.lost, so their pods stay Ready for now: %w", e.cfg.Node, want, err)
	case err != nil:
		return fmt.Errorf("reading L2Announcer %s to list the lost nodes: %w", e.cfg.Node, err)
	}
	if slices.Equal(obj.Status.Lost, want) {
		return nil
	}
	obj.Status.Lost = want
	err = e.deps.Client.Status().Update(ctx, &obj)
	e.deps.Recorder.Writes.Count("announcer_lost", err)
	if err != nil {
		return fmt.Errorf("listing the lost nodes %v in the status of L2Announcer %s (the admission policy "+
			"mooring-agent-eviction lets the agent mark only their pods): %w", want, e.cfg.Node, err)
	}
	e.deps.Log.Info("lost nodes listed in this node's L2Announcer", "lost", want)
	return nil
}
