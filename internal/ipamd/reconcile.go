package ipamd

import (
	"strings"
	"time"
)

// Reconciliation frees what no DEL and no GC will: an allocation whose
// sandbox the runtime forgot (its metadata wiped, a runtime without GC)
// while its pod left the API. It must never free a live pod's address, so
// Reconcile frees only on evidence, and errs towards keeping:
//
//   - only from views of a successful, consistent list of the node's pods
//     (nil view: the API could not be read; nothing is freed, and what was
//     seen before is kept, not counted);
//   - only allocations that carry a pod name (a plugin from before pod
//     names, a bare CNI call: never);
//   - only allocations held for MinAge when first seen missing (an ADD may
//     run right after the pod was bound, before a cache sees it);
//   - only when missing from two views at least Gap apart, the allocation
//     unchanged between them (a pod the API lists again meanwhile starts
//     over);
//   - never a pod named like a static pod of this node (<name>-<node>):
//     a static pod runs from the kubelet's manifest whether or not the API
//     holds its mirror pod (the API down, the mirror deleted or not yet
//     created), so the API cannot say it is gone.
//
// A pod is present when the view lists its namespace and name with the
// allocation's pod UID (a mirror pod lists its static pod's UID too); an
// allocation without a UID (a runtime that does not pass K8S_POD_UID)
// matches by name alone. So a StatefulSet pod recreated under the same
// name keeps its own allocation and does not keep its predecessor's.

// PodRef names a pod.
type PodRef struct{ Namespace, Name string }

// PodView is what one successful list of the node's pods said.
type PodView struct {
	// At is when the list was started: every allocation held before then
	// whose pod is not in it had its pod leave the API (a pod is bound
	// before its sandbox is set up).
	At time.Time
	// Pods maps each listed pod to its UIDs (one, plus the static pod's
	// for a mirror pod).
	Pods map[PodRef][]string
}

// ReconcilePolicy are the rules' parameters.
type ReconcilePolicy struct {
	// Node is this node's name: static pods are named <name>-<node>.
	Node string
	// MinAge is how long an allocation must have been held when first
	// seen missing; Gap is the least time between the two views that
	// must both miss it.
	MinAge, Gap time.Duration
}

// Held is an allocation and since when this agent knows it (its ADD, or
// the agent's start for one loaded from disk).
type Held struct {
	Allocation
	Since time.Time
}

// Missing records, per allocation, the first view that missed its pod.
type Missing map[Key]missing

type missing struct {
	at, since time.Time
}

// Reconcile returns the allocations to free now and what to remember for
// the next view. Pure: the caller lists, frees and keeps the state. Cost:
// O(len(held)) map lookups.
func Reconcile(p ReconcilePolicy, held []Held, view *PodView, prev Missing) (free []Held, next Missing) {
	if view == nil {
		return nil, prev
	}
	next = Missing{}
	static := "-" + strings.ToLower(p.Node)
	for _, h := range held {
		if h.Pod == "" || (p.Node != "" && strings.HasSuffix(h.Pod, static)) || present(h.Allocation, view) {
			continue
		}
		if view.At.Sub(h.Since) < p.MinAge {
			continue // too young to count as missing
		}
		m, seen := prev[h.Key]
		switch {
		case !seen || !m.since.Equal(h.Since):
			next[h.Key] = missing{at: view.At, since: h.Since}
		case view.At.Sub(m.at) >= p.Gap:
			free = append(free, h)
		default:
			next[h.Key] = m
		}
	}
	return free, next
}

// present reports whether the view lists al's pod.
func present(al Allocation, view *PodView) bool {
	uids, ok := view.Pods[PodRef{al.Namespace, al.Pod}]
	if !ok {
		return false
	}
	if al.PodUID == "" {
		return true
	}
	for _, u := range uids {
		if u == al.PodUID {
			return true
		}
	}
	return false
}
