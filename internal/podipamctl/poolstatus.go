package podipamctl

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/podipam"
)

// poolStatusWriter writes PodIPPool status at most once per interval, and
// only what changed: a burst of block cuts costs one write per pool.
type poolStatusWriter struct {
	c        client.Client
	st       *state
	interval time.Duration
	log      *slog.Logger
}

func (w *poolStatusWriter) Start(ctx context.Context) error {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := w.writeAll(ctx); err != nil && ctx.Err() == nil {
				w.log.Warn("pod IP pool status", "err", err)
			}
		}
	}
}

func (w *poolStatusWriter) writeAll(ctx context.Context) error {
	var list mooringv1.PodIPPoolList
	if err := w.c.List(ctx, &list); err != nil {
		return err
	}
	w.st.mu.Lock()
	if !w.st.imported {
		w.st.mu.Unlock()
		return nil
	}
	w.st.setPools(&list)
	byName := map[string]podipam.PoolStatus{}
	for _, s := range w.st.alloc.Status() {
		byName[s.Name] = s
	}
	exhausted := map[string]string{}
	for k, v := range w.st.exhausted {
		exhausted[k] = v
	}
	w.st.mu.Unlock()
	for i := range list.Items {
		p := &list.Items[i]
		if _, ok := byName[p.Name]; !ok {
			continue // not seen by the allocator yet
		}
		want := p.DeepCopy()
		fillPoolStatus(&want.Status, p.Generation, byName[p.Name], exhausted[p.Name])
		if equality.Semantic.DeepEqual(p.Status, want.Status) {
			continue
		}
		if err := w.c.Status().Patch(ctx, want, client.MergeFrom(p)); err != nil {
			return fmt.Errorf("pool %s status: %w", p.Name, err)
		}
	}
	return nil
}

func fillPoolStatus(s *mooringv1.PodIPPoolStatus, gen int64, ps podipam.PoolStatus, exhausted string) {
	fam := func(f podipam.FamilyStatus) *mooringv1.PodIPPoolFamilyStatus {
		if f.Capacity == 0 && f.Blocks == 0 {
			return nil
		}
		return &mooringv1.PodIPPoolFamilyStatus{Blocks: int64(f.Blocks), Capacity: int64(f.Capacity), Addresses: int64(f.Addresses)}
	}
	s.IPv4, s.IPv6, s.Nodes, s.ObservedGeneration = fam(ps.V4), fam(ps.V6), int32(ps.Nodes), gen
	set := func(t string, on bool, reason, msg string) {
		st := metav1.ConditionFalse
		if on {
			st = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: t, Status: st, Reason: reason, Message: truncate(msg, 1024), ObservedGeneration: gen})
	}
	switch {
	case ps.ConflictsWith != "":
		set(mooringv1.ConditionConflicting, true, "OverlapsOlderPool", fmt.Sprintf("CIDRs overlap the older pool %q: this pool cuts no block; remove the overlapping CIDRs", ps.ConflictsWith))
	default:
		set(mooringv1.ConditionConflicting, false, "NoOverlap", "no CIDR overlaps an older pool")
	}
	ready := ps.Invalid == nil && ps.ConflictsWith == ""
	readyMsg := "blocks are cut from this pool on demand"
	if ps.Invalid != nil {
		readyMsg = ps.Invalid.Error()
	} else if !ready {
		readyMsg = "the pool conflicts with an older pool"
	}
	set(mooringv1.ConditionReady, ready, map[bool]string{true: "Usable", false: "Unusable"}[ready], readyMsg)
	if len(ps.Draining) > 0 {
		var parts []string
		for _, b := range ps.Draining {
			parts = append(parts, fmt.Sprintf("%s on node %s", b.Prefix, b.Node))
		}
		set(mooringv1.ConditionCIDRsInUse, true, "BlocksStillHeld", "CIDRs removed from the pool are still held; they stay reserved until these nodes release them: "+strings.Join(parts, ", "))
	} else if meta.FindStatusCondition(s.Conditions, mooringv1.ConditionCIDRsInUse) != nil {
		set(mooringv1.ConditionCIDRsInUse, false, "NoneHeld", "no node holds a block outside the pool's CIDRs")
	}
	if exhausted != "" {
		set(mooringv1.ConditionExhausted, true, "PoolExhausted", exhausted)
	} else if meta.FindStatusCondition(s.Conditions, mooringv1.ConditionExhausted) != nil {
		set(mooringv1.ConditionExhausted, false, "BlocksAvailable", "the last requested blocks were cut")
	}
}
