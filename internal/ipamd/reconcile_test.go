package ipamd

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 2, 20, 0, 0, 0, time.UTC)

func held(ns, pod, uid, cid string, since time.Time) Held {
	return Held{Allocation: Allocation{Key: Key{Network: "mooring", ContainerID: cid, IfName: "eth0"}, Namespace: ns, Pod: pod, PodUID: uid}, Since: since}
}

func view(at time.Time, pods ...string) *PodView {
	v := &PodView{At: at, Pods: map[PodRef][]string{}}
	for i := 0; i+3 <= len(pods); i += 3 {
		ref := PodRef{pods[i], pods[i+1]}
		v.Pods[ref] = append(v.Pods[ref], pods[i+2])
	}
	return v
}

var policy = ReconcilePolicy{Node: "node-1", MinAge: 5 * time.Minute, Gap: 5 * time.Minute}

// Each case runs its views in order against the same allocations and
// names what must be freed at the last one (nothing before it).
func TestReconcile(t *testing.T) {
	old := t0.Add(-time.Hour)
	m := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, tc := range []struct {
		name  string
		held  []Held
		views []*PodView
		want  []string // container IDs freed at the last view
	}{
		{"a deleted pod's address goes after two views a gap apart",
			[]Held{held("d", "web-1", "u1", "c1", old)},
			[]*PodView{view(m(0)), view(m(5 * time.Minute))}, []string{"c1"}},
		{"one view is not enough",
			[]Held{held("d", "web-1", "u1", "c1", old)},
			[]*PodView{view(m(0))}, nil},
		{"two views closer than the gap are not enough",
			[]Held{held("d", "web-1", "u1", "c1", old)},
			[]*PodView{view(m(0)), view(m(4 * time.Minute))}, nil},
		{"closer views keep the first miss: the third view frees",
			[]Held{held("d", "web-1", "u1", "c1", old)},
			[]*PodView{view(m(0)), view(m(4 * time.Minute)), view(m(5 * time.Minute))}, []string{"c1"}},
		{"a live pod keeps its address",
			[]Held{held("d", "web-1", "u1", "c1", old)},
			[]*PodView{view(m(0), "d", "web-1", "u1"), view(m(5*time.Minute), "d", "web-1", "u1")}, nil},
		{"a pod seen again between the misses starts over",
			[]Held{held("d", "web-1", "u1", "c1", old)},
			[]*PodView{view(m(0)), view(m(3*time.Minute), "d", "web-1", "u1"), view(m(6 * time.Minute))}, nil},
		{"a failed list (nil view) neither frees nor forgets",
			[]Held{held("d", "web-1", "u1", "c1", old)},
			[]*PodView{view(m(0)), nil, view(m(5 * time.Minute))}, []string{"c1"}},
		{"nothing is freed on a failed list",
			[]Held{held("d", "web-1", "u1", "c1", old)},
			[]*PodView{view(m(0)), view(m(2 * time.Minute)), nil}, nil},
		{"a StatefulSet pod recreated under its name: the predecessor's goes, its own stays",
			[]Held{held("d", "db-0", "u-old", "c-old", old), held("d", "db-0", "u-new", "c-new", old)},
			[]*PodView{view(m(0), "d", "db-0", "u-new"), view(m(5*time.Minute), "d", "db-0", "u-new")}, []string{"c-old"}},
		{"the recreated pod's own allocation, its pod not yet listed, is too young",
			[]Held{held("d", "db-0", "u-new", "c-new", m(-time.Minute))},
			[]*PodView{view(m(0), "d", "db-0", "u-old"), view(m(5*time.Minute), "d", "db-0", "u-old")}, nil},
		{"young at the first miss: the count starts only once it is old enough",
			[]Held{held("d", "web-1", "u1", "c1", m(-4*time.Minute))},
			[]*PodView{view(m(0)), view(m(5 * time.Minute))}, nil},
		{"old enough at the first miss counted from then",
			[]Held{held("d", "web-1", "u1", "c1", m(-4*time.Minute))},
			[]*PodView{view(m(0)), view(m(5 * time.Minute)), view(m(10 * time.Minute))}, []string{"c1"}},
		{"no pod name (an older plugin, a bare CNI call): never",
			[]Held{held("", "", "", "c1", old)},
			[]*PodView{view(m(0)), view(m(5 * time.Minute)), view(m(10 * time.Minute))}, nil},
		{"no UID (a runtime without K8S_POD_UID) matches by name",
			[]Held{held("d", "web-1", "", "c1", old)},
			[]*PodView{view(m(0), "d", "web-1", "u9"), view(m(5*time.Minute), "d", "web-1", "u9")}, nil},
		{"no UID, pod gone: freed",
			[]Held{held("d", "web-1", "", "c1", old)},
			[]*PodView{view(m(0)), view(m(5 * time.Minute))}, []string{"c1"}},
		{"a static pod whose mirror pod is missing (the API down, the mirror deleted): never",
			[]Held{held("kube-system", "probe-node-1", "hash", "c1", old)},
			[]*PodView{view(m(0)), view(m(5 * time.Minute)), view(m(10 * time.Minute))}, nil},
		{"a static pod's mirror lists the static UID: kept",
			[]Held{held("kube-system", "probe-node-1", "hash", "c1", old)},
			[]*PodView{view(m(0), "kube-system", "probe-node-1", "mirror-uid", "kube-system", "probe-node-1", "hash"),
				view(m(5*time.Minute), "kube-system", "probe-node-1", "hash")}, nil},
		{"another namespace's pod of the same name does not keep it",
			[]Held{held("d", "web-1", "u1", "c1", old)},
			[]*PodView{view(m(0), "e", "web-1", "u1"), view(m(5*time.Minute), "e", "web-1", "u1")}, []string{"c1"}},
		{"a clock that went back frees nothing",
			[]Held{held("d", "web-1", "u1", "c1", old)},
			[]*PodView{view(m(0)), view(m(-10 * time.Minute))}, nil},
		{"each of several allocations on its own evidence",
			[]Held{held("d", "a", "ua", "ca", old), held("d", "b", "ub", "cb", old), held("d", "c", "uc", "cc", old)},
			[]*PodView{view(m(0), "d", "b", "ub"), view(m(5*time.Minute), "d", "c", "uc")}, []string{"ca"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st Missing
			for i, v := range tc.views {
				free, next := Reconcile(policy, tc.held, v, st)
				var got []string
				for _, h := range free {
					got = append(got, h.ContainerID)
				}
				if i < len(tc.views)-1 && len(got) > 0 {
					t.Fatalf("view %d freed %v early", i, got)
				}
				if i == len(tc.views)-1 && !slices.Equal(got, tc.want) {
					t.Fatalf("freed %v, want %v", got, tc.want)
				}
				st = next
			}
		})
	}
}

// An allocation replaced under the same key between two views (DEL, then
// ADD with the same container and interface: its since changed) is not
// freed on the old one's first miss.
func TestReconcileReplacedAllocationStartsOver(t *testing.T) {
	a := held("d", "web-1", "u1", "c1", t0.Add(-time.Hour))
	_, st := Reconcile(policy, []Held{a}, view(t0), nil)
	b := a
	b.Since = t0.Add(-10 * time.Minute)
	if free, _ := Reconcile(policy, []Held{b}, view(t0.Add(5*time.Minute)), st); len(free) != 0 {
		t.Fatalf("freed %v on the first miss of a new allocation", free)
	}
}

// FuzzReconcile runs random sequences of allocations and views and checks
// the rules against their definition: a freed allocation has a pod name
// and no static pod's name, is not in the current view, was held MinAge
// at some earlier successful view that missed it at least Gap ago, and
// every successful view since then missed it too.
func FuzzReconcile(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(7), uint64(7))
	f.Fuzz(func(t *testing.T, s1, s2 uint64) {
		r := rand.New(rand.NewPCG(s1, s2))
		names := []string{"", "web-1", "db-0", "probe-node-1", "x"}
		uids := []string{"", "u1", "u2"}
		var all []Held
		for i := range 1 + r.IntN(6) {
			all = append(all, held([]string{"d", "e"}[r.IntN(2)], names[r.IntN(len(names))], uids[r.IntN(len(uids))],
				fmt.Sprint("c", i), t0.Add(time.Duration(r.IntN(20))*time.Minute)))
		}
		var history []observed
		var st Missing
		now := t0
		for range 2 + r.IntN(8) {
			now = now.Add(time.Duration(r.IntN(8)-1) * time.Minute)
			var v *PodView
			if r.IntN(5) > 0 {
				v = &PodView{At: now, Pods: map[PodRef][]string{}}
				for range r.IntN(4) {
					ref := PodRef{[]string{"d", "e"}[r.IntN(2)], names[1+r.IntN(len(names)-1)]}
					v.Pods[ref] = append(v.Pods[ref], uids[1+r.IntN(len(uids)-1)])
				}
			}
			free, next := Reconcile(policy, all, v, st)
			st = next
			h := observed{at: now}
			if v != nil {
				h.miss = map[Key]bool{}
				for _, a := range all {
					h.miss[a.Key] = !present(a.Allocation, v)
				}
			}
			history = append(history, h)
			if v == nil && len(free) > 0 {
				t.Fatalf("a failed list freed %v", free)
			}
			for _, a := range free {
				if a.Pod == "" || a.Pod == "probe-node-1" || present(a.Allocation, v) {
					t.Fatalf("freed %+v: no pod name, a static pod, or listed in %v", a, v.Pods)
				}
				if !evidence(history, a, policy) {
					t.Fatalf("freed %+v without two misses %v apart, the first at age %v or more", a, policy.Gap, policy.MinAge)
				}
			}
			all = slices.DeleteFunc(all, func(h Held) bool {
				return slices.ContainsFunc(free, func(f Held) bool { return f.Key == h.Key })
			})
		}
	})
}

// observed is one view as the fuzz test saw it.
type observed struct {
	at   time.Time
	miss map[Key]bool // nil: a failed list
}

// evidence reports whether some earlier successful view missed a's pod
// while a was MinAge old, at least Gap before the last view, and every
// successful view from then on missed it too.
func evidence(history []observed, a Held, p ReconcilePolicy) bool {
	last := history[len(history)-1]
	for i := len(history) - 2; i >= 0; i-- {
		h := history[i]
		if h.miss == nil {
			continue
		}
		if !h.miss[a.Key] {
			return false
		}
		if h.at.Sub(a.Since) >= p.MinAge && last.at.Sub(h.at) >= p.Gap {
			return true
		}
	}
	return false
}
