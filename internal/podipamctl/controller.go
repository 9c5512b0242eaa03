package podipamctl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/podipam"
)

// The controller's permissions for pod IPAM: the ClusterRole and Role
// mooring-controller-pod-ipam (config/rbac/controller-pod-ipam), bound to
// the controller only when pod IPAM is on.
//
// +kubebuilder:rbac:roleName=mooring-controller-pod-ipam,groups="",resources=nodes,verbs=list;watch;patch
// +kubebuilder:rbac:roleName=mooring-controller-pod-ipam,groups="",resources=nodes/status,verbs=patch
// +kubebuilder:rbac:roleName=mooring-controller-pod-ipam,groups=mooring.dev,resources=podipamnodes,verbs=list;watch;delete;patch
// +kubebuilder:rbac:roleName=mooring-controller-pod-ipam,groups=mooring.dev,resources=podipamnodes/status,verbs=update
// +kubebuilder:rbac:roleName=mooring-controller-pod-ipam,groups=mooring.dev,resources=podippools,verbs=list;watch
// +kubebuilder:rbac:roleName=mooring-controller-pod-ipam,groups=mooring.dev,resources=podippools/status,verbs=patch
// +kubebuilder:rbac:roleName=mooring-controller-pod-ipam,groups=events.k8s.io,resources=events,verbs=create;patch

// EventReporter is the reportingController of pod IPAM's Events.
const EventReporter = "mooring-pod-ipam"

// Setup adds the controller side of pod IPAM to mgr; everything it adds
// runs only while this replica leads. Modes off and kubernetes add nothing
// (in kubernetes mode the agents read node.spec.podCIDRs).
func Setup(mgr manager.Manager, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Mode == ModeOff || cfg.Mode == ModeKubernetes {
		return nil
	}
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = DefaultStatusInterval
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	st := &state{cfg: cfg, alloc: podipam.NewAllocator(), exhausted: map[string]string{}, written: map[string]string{}, seen: map[types.UID]int64{}}
	if cfg.Mode == ModeClusterPool {
		st.alloc.SetPools([]podipam.Pool{cfg.clusterPool()})
	}
	r := &nodeReconciler{c: mgr.GetClient(), api: mgr.GetAPIReader(), st: st, rec: mgr.GetEventRecorder(EventReporter), log: cfg.Log.With("component", "podipam")}
	b := ctrl.NewControllerManagedBy(mgr).Named("podipam-node").
		For(&corev1.Node{}).
		Watches(&mooringv1.PodIPAMNode{}, &handler.EnqueueRequestForObject{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: cfg.Workers})
	if cfg.Mode == ModeMultiPool {
		b = b.Watches(&mooringv1.PodIPPool{}, handler.EnqueueRequestsFromMapFunc(r.allNodes))
		if err := mgr.Add(&poolStatusWriter{c: mgr.GetClient(), st: st, interval: cfg.StatusInterval, log: r.log}); err != nil {
			return err
		}
	}
	return b.Complete(r)
}

// state is the allocator and what the reconcilers share, under mu.
type state struct {
	cfg       Config
	mu        sync.Mutex
	alloc     *podipam.Allocator
	poolsSig  string
	exhausted map[string]string // pool -> last exhaustion message
	imported  bool
	// written remembers the last status (and podCIDRs) written per node, so
	// a reconcile on a cache that has not caught up yet does not write the
	// same again (each would be a write, or a 409).
	written map[string]string
	// seen numbers pools in the order this controller first saw them.
	seen map[types.UID]int64
}

type nodeReconciler struct {
	c   client.Client
	api client.Reader
	st  *state
	rec events.EventRecorder
	log *slog.Logger
}

func (r *nodeReconciler) allNodes(ctx context.Context, _ client.Object) []reconcile.Request {
	var nodes corev1.NodeList
	if err := r.c.List(ctx, &nodes); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: n.Name}})
	}
	return out
}

// importAll reads every recorded block straight from the API server
// (never from a cache that may lag) before the first cut: restart safety.
// Records are imported oldest first; a block overlapping an older record is
// reported and left out (the newer record loses).
func (r *nodeReconciler) importAll(ctx context.Context) error {
	var list mooringv1.PodIPAMNodeList
	if err := r.api.List(ctx, &list); err != nil {
		return fmt.Errorf("list PodIPAMNodes: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b mooringv1.PodIPAMNode) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for i := range list.Items {
		if err := r.disown(ctx, &list.Items[i]); err != nil {
			return err
		}
		blocks, err := blocksOf(&list.Items[i])
		if err != nil {
			r.log.Warn("skipping unreadable pod IPAM record", "err", err)
			continue
		}
		for _, b := range blocks {
			if err := r.st.alloc.Import(b); err != nil {
				r.log.Warn("pod address block recorded twice; the newer record loses it", "err", err)
				r.rec.Eventf(&list.Items[i], nil, corev1.EventTypeWarning, "BlockOverlap", "Import", "%s", err.Error())
			}
		}
	}
	r.st.alloc.MarkReady()
	r.st.imported = true
	r.log.Info("pod IPAM: imported recorded blocks", "nodes", len(list.Items), "blocks", len(r.st.alloc.Blocks("")))
	return nil
}

// syncPools feeds the allocator the current PodIPPools (multi-pool) when
// they changed. Called with st.mu held.
func (r *nodeReconciler) syncPools(ctx context.Context) error {
	if r.st.cfg.Mode != ModeMultiPool {
		return nil
	}
	var list mooringv1.PodIPPoolList
	if err := r.c.List(ctx, &list); err != nil {
		return err
	}
	r.st.setPools(&list)
	return nil
}

// setPools feeds the allocator the pools when they changed. Called with
// s.mu held, by node reconciles and by the pool status writer, so a pool
// change reaches the allocator even when no node is reconciled.
func (s *state) setPools(list *mooringv1.PodIPPoolList) {
	var sig strings.Builder
	pools := make([]podipam.Pool, 0, len(list.Items))
	for i := range list.Items {
		p := &list.Items[i]
		fmt.Fprintf(&sig, "%s/%s/%d;", p.Name, p.UID, p.Generation)
		pl := poolOf(p)
		// creationTimestamp has one-second resolution: among pools created
		// in the same second, the one this controller saw first is older.
		seq, ok := s.seen[p.UID]
		if !ok {
			seq = int64(len(s.seen))
			s.seen[p.UID] = seq
		}
		pl.Order = p.CreationTimestamp.Unix()<<24 | seq&(1<<24-1)
		pools = append(pools, pl)
	}
	if sig.String() != s.poolsSig {
		s.alloc.SetPools(pools)
		s.poolsSig = sig.String()
	}
}

func (r *nodeReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.st.mu.Lock()
	if !r.st.imported {
		if err := r.importAll(ctx); err != nil {
			r.st.mu.Unlock()
			return reconcile.Result{}, err
		}
	}
	r.st.mu.Unlock()

	var node corev1.Node
	if err := r.c.Get(ctx, req.NamespacedName, &node); apierrors.IsNotFound(err) {
		// The Node cache may lag the record's: a record an agent created
		// right after its Node can be reconciled before the Node reaches
		// this cache. Only the API server says a Node is gone; its add
		// event reconciles the node again.
		if exists, err := r.nodeExists(ctx, req.Name); err != nil || exists {
			return reconcile.Result{}, err
		}
		return r.nodeGone(ctx, req.Name)
	} else if err != nil {
		return reconcile.Result{}, err
	}
	// The node's agent creates the record (with its first demand); until
	// it has, the node gets no block: no agent, no pods to address.
	var rec mooringv1.PodIPAMNode
	if err := r.c.Get(ctx, req.NamespacedName, &rec); apierrors.IsNotFound(err) {
		return reconcile.Result{}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}

	if err := r.disown(ctx, &rec); err != nil {
		return reconcile.Result{}, err
	}
	held, cutErrs, err := r.decide(ctx, &rec)
	if err != nil {
		return reconcile.Result{}, err
	}
	want := rec.DeepCopy()
	want.Status.Mode = string(r.st.cfg.Mode)
	want.Status.Blocks = statusBlocks(rec.Status.Blocks, held)
	setExhausted(want, cutErrs)
	nodeIsBack(want)
	sig := fmt.Sprint(want.Status.Mode, want.Status.Blocks, want.Status.Conditions)
	if !equality.Semantic.DeepEqual(rec.Status, want.Status) && !r.st.wrote("status/"+node.Name, sig) {
		if err := r.c.Status().Update(ctx, want); err != nil {
			if apierrors.IsConflict(err) {
				return reconcile.Result{Requeue: true}, nil
			}
			return reconcile.Result{}, fmt.Errorf("write blocks of node %s: %w", node.Name, err)
		}
		r.st.remember("status/"+node.Name, sig)
		for _, e := range cutErrs {
			r.rec.Eventf(want, nil, corev1.EventTypeWarning, "PoolExhausted", "AllocateBlock", "%s", e.Error())
		}
	}
	if r.st.cfg.Mode == ModeClusterPool {
		if err := r.syncPodCIDR(ctx, &node, want.Status.Blocks); err != nil {
			return reconcile.Result{}, err
		}
	}
	if len(cutErrs) > 0 {
		return reconcile.Result{RequeueAfter: 10 * time.Second}, nil
	}
	return reconcile.Result{}, nil
}

// decide applies the node's releases and demand to the allocator and
// returns the node's blocks and the cuts that failed.
func (r *nodeReconciler) decide(ctx context.Context, rec *mooringv1.PodIPAMNode) ([]podipam.Block, []error, error) {
	st := r.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := r.syncPools(ctx); err != nil {
		return nil, nil, err
	}
	// Releases: free the node's listed blocks, and keep every listed prefix
	// away from this node while the list still names it (a prefix re-cut
	// to the node would be released again, in use).
	var quarantine []netip.Prefix
	for _, s := range rec.Spec.Release {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			continue
		}
		if b, ok := st.alloc.Held(p); ok && b.Node == rec.Name {
			_, _ = st.alloc.Release(p)
		}
		if st.alloc.Import(podipam.Block{Prefix: p, Pool: "", Node: ""}) == nil {
			quarantine = append(quarantine, p)
		}
	}
	defer func() {
		for _, p := range quarantine {
			_, _ = st.alloc.Release(p)
		}
	}()
	var errs []error
	cut := func(pool string, f podipam.Family, needed int) {
		if needed <= 0 {
			return
		}
		_, err := st.alloc.Satisfy(rec.Name, pool, f, needed)
		switch {
		case err == nil:
			delete(st.exhausted, pool)
		case !errors.Is(err, podipam.ErrNoFamily):
			errs = append(errs, fmt.Errorf("node %s: %w", rec.Name, err))
			st.exhausted[pool] = err.Error()
		}
	}
	switch st.cfg.Mode {
	case ModeClusterPool:
		for _, f := range []podipam.Family{podipam.IPv4, podipam.IPv6} {
			if p := st.cfg.clusterPool(); len(p.Spec(f).CIDRs) > 0 {
				cut(DefaultPool, f, 1)
			}
		}
	case ModeMultiPool:
		reqs := map[string]mooringv1.PodIPAMRequest{}
		for _, q := range rec.Spec.Requests {
			reqs[q.Pool] = q
		}
		if _, ok := reqs[DefaultPool]; !ok && st.cfg.PreAllocate > 0 {
			reqs[DefaultPool] = mooringv1.PodIPAMRequest{Pool: DefaultPool, IPv4Addresses: int32(st.cfg.PreAllocate), IPv6Addresses: int32(st.cfg.PreAllocate)}
		}
		names := make([]string, 0, len(reqs))
		for n := range reqs {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			if n == DefaultPool && len(rec.Spec.Requests) == 0 && !st.hasPool(DefaultPool) {
				continue // no default pool: nothing to pre-allocate
			}
			cut(n, podipam.IPv4, int(reqs[n].IPv4Addresses))
			cut(n, podipam.IPv6, int(reqs[n].IPv6Addresses))
		}
	}
	return st.alloc.Blocks(rec.Name), errs, nil
}

// wrote reports whether sig is what was last written under key.
func (s *state) wrote(key, sig string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written[key] == sig
}

func (s *state) remember(key, sig string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written[key] = sig
}

func (s *state) forget(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.written, "status/"+node)
	delete(s.written, "podcidr/"+node)
}

func (s *state) hasPool(name string) bool { return s.alloc.Usable(name) }

func setExhausted(n *mooringv1.PodIPAMNode, errs []error) {
	c := metav1.Condition{Type: mooringv1.ConditionExhausted, Status: metav1.ConditionFalse, Reason: "BlocksAllocated",
		Message: "every requested block was cut", ObservedGeneration: n.Generation}
	if len(errs) > 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, "PoolExhausted", truncate(errors.Join(errs...).Error(), 1024)
	}
	if old := meta.FindStatusCondition(n.Status.Conditions, c.Type); old == nil && c.Status == metav1.ConditionFalse {
		return // no condition until something went wrong once
	}
	meta.SetStatusCondition(&n.Status.Conditions, c)
}
