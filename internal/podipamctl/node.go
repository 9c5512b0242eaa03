package podipamctl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/ipamd"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/podipam"
)

// The agent's permissions for pod IPAM: the ClusterRole and Role
// mooring-agent-pod-ipam (config/rbac/agent-pod-ipam), bound to the agent
// only when pod IPAM is on. It writes nothing but its own node's
// PodIPAMNode (create, and update of its demand and releases); the
// ValidatingAdmissionPolicy mooring-agent-own-node refuses a write to
// another node's. It reads the recorded mode, never writes it, and writes
// no Node: what pod IPAM writes on Nodes and the mode record is the
// controller's (mooring-controller-pod-ipam).
//
// +kubebuilder:rbac:roleName=mooring-agent-pod-ipam,groups="",resources=nodes;namespaces;pods,verbs=get;list;watch
// +kubebuilder:rbac:roleName=mooring-agent-pod-ipam,groups=mooring.dev,resources=podipamnodes;podippools,verbs=get;list;watch
// +kubebuilder:rbac:roleName=mooring-agent-pod-ipam,groups=mooring.dev,resources=podipamnodes,verbs=create;update
// +kubebuilder:rbac:roleName=mooring-agent-pod-ipam,groups="",namespace=mooring-system,resources=configmaps,resourceNames=mooring-pod-ipam-mode,verbs=get;list;watch

// NodeConfig is the agent side of pod IPAM.
type NodeConfig struct {
	REST     *rest.Config
	NodeName string
	// Namespace holds the mode ConfigMap; the agent follows the recorded
	// mode, never a flag of its own.
	Namespace string
	// StateDir keeps allocations across restarts; Socket is where the
	// mooring-ipam plugin reaches the agent.
	StateDir, Socket string
	// PreAllocate is how many free addresses the node keeps ready per pool
	// in use (and for the default pool always); Grace is how long a block
	// stays empty before it is given back; Interval paces the demand loop.
	PreAllocate int
	Grace       time.Duration
	Interval    time.Duration
	// PodRoutes is "direct" (route every other node's blocks via that
	// node's address; nodes share one L2 segment) or "none".
	PodRoutes string
	// SetRoutes installs the routes; nil means ApplyRoutes in the agent's
	// namespace. Tests pass one that records or works in a test namespace.
	SetRoutes func([]podipam.Route) error
	// ReconcileInterval is how often the node's pods are listed to free
	// the addresses of pods that left the API without a DEL (0: never);
	// ReconcileMinAge is how long an allocation is held before it may be
	// found leaked (reconcile.go, ipamd.Reconcile).
	ReconcileInterval, ReconcileMinAge time.Duration
	// Metrics may be nil (tests).
	Metrics *NodeMetrics
	Log     *slog.Logger
}

// Validate names what is missing.
func (c *NodeConfig) Validate() error {
	switch {
	case c.REST == nil || c.NodeName == "" || c.Namespace == "":
		return errors.New("pod IPAM agent: client config, node name and namespace are required")
	case c.StateDir == "" || c.Socket == "":
		return errors.New("pod IPAM agent: --pod-ipam-state-dir and --pod-ipam-socket must not be empty")
	case c.Interval <= 0 || c.Grace < 0 || c.PreAllocate < 0:
		return errors.New("pod IPAM agent: interval must be positive, grace and pre-allocation not negative")
	case c.ReconcileInterval < 0 || c.ReconcileMinAge < 0:
		return errors.New("--pod-ipam-reconcile-interval and --pod-ipam-reconcile-min-age must not be negative (an interval of 0 turns reconciliation off)")
	case c.PodRoutes != "" && c.PodRoutes != "direct" && c.PodRoutes != "none":
		return fmt.Errorf("--pod-routes %q: use direct or none", c.PodRoutes)
	}
	return nil
}

// RunNode serves pod addresses on this node until ctx ends. In mode off it
// returns nil at once. When the recorded mode changes while it runs it
// returns an error, so the agent restarts into the new mode instead of
// silently allocating from the old blocks (seed 002).
func RunNode(ctx context.Context, cfg NodeConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	// One HTTP client and one REST mapper for the direct client and the
	// cache (each would otherwise build its own: memory on every node).
	hc, err := rest.HTTPClientFor(cfg.REST)
	if err != nil {
		return err
	}
	mapper, err := kube.StaticFirstMapper(kube.Scheme(), cfg.REST, hc)
	if err != nil {
		return err
	}
	direct, err := client.New(cfg.REST, client.Options{Scheme: kube.Scheme(), HTTPClient: hc, Mapper: mapper})
	if err != nil {
		return err
	}
	mode, err := awaitMode(ctx, cfg, direct, hc)
	if err != nil || mode == ModeOff {
		return err
	}
	c, err := nodeCache(cfg, hc, mapper)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg.REST, hc)
	if err != nil {
		return err
	}
	store, err := ipamd.OpenFileStore(cfg.StateDir)
	if err != nil {
		return err
	}
	defer store.Close()
	n := &nodeSide{cfg: cfg, mode: mode, cache: c, c: direct, demand: map[demandKey]*podipam.Demand{}, releasing: map[netip.Prefix]bool{}}
	if n.alloc, err = ipamd.NewAllocator(store, n.poolOf); err != nil {
		return err
	}
	return n.run(ctx, newPodEvents(cs, c, cfg.Log))
}

// nodeCache caches what the node side reads: this node's objects only,
// unless direct routes need every node's blocks and addresses.
func nodeCache(cfg NodeConfig, hc *http.Client, mapper meta.RESTMapper) (cache.Cache, error) {
	// ByObject is keyed by pointer: one key per type.
	own := cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", cfg.NodeName)}
	if cfg.PodRoutes == "direct" {
		own = cache.ByObject{}
	}
	nodes := own
	nodes.Transform = slimNode
	byObject := map[client.Object]cache.ByObject{
		&corev1.Pod{}:            {Field: fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName), Transform: slimAnnotated},
		&corev1.Node{}:           nodes,
		&mooringv1.PodIPAMNode{}: own,
		&corev1.Namespace{}:      {Transform: slimAnnotated},
		&mooringv1.PodIPPool{}:   {},
	}
	return cache.New(cfg.REST, cache.Options{Scheme: kube.Scheme(), HTTPClient: hc, Mapper: mapper, ByObject: byObject})
}

// run starts the cache, the pod Events and the CNI socket, and syncs every
// Interval until ctx ends, the mode changes, or a component stops. It
// returns once every goroutine it started has ended.
func (n *nodeSide) run(ctx context.Context, ev *podEvents) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errc := make(chan error, 2)
	go func() { errc <- n.cache.Start(ctx) }()
	if !n.cache.WaitForCacheSync(ctx) {
		cancel(nil)
		return <-errc
	}
	stopEvents := ev.start(ctx)
	defer stopEvents()
	srv := &ipamd.Server{Alloc: n.alloc, Socket: n.cfg.Socket, Log: n.cfg.Log, AddFailed: ev.addFailed}
	go func() { errc <- srv.Run(ctx) }()
	n.cfg.Log.Info("pod IPAM agent serving", "mode", n.mode, "socket", n.cfg.Socket)
	loopErr, running := n.loop(ctx, errc)
	cancel(nil)
	for ; running > 0; running-- {
		<-errc // one was taken in the loop when it ended it: wait only for the rest
	}
	if errors.Is(loopErr, context.Canceled) {
		return nil
	}
	return loopErr
}

// loop syncs until something ends it and returns why, with how many of the
// two components (cache, socket) have not reported on errc yet.
func (n *nodeSide) loop(ctx context.Context, errc <-chan error) (error, int) {
	t := time.NewTicker(n.cfg.Interval)
	defer t.Stop()
	running := 2 // the cache and the server each send once on errc
	for {
		if err := n.sync(ctx); err != nil && ctx.Err() == nil {
			n.cfg.Log.Warn("pod IPAM sync", "err", err)
			var changed *modeChanged
			if errors.As(err, &changed) {
				return err, running
			}
		}
		n.reconcile(ctx, time.Now())
		select {
		case <-ctx.Done():
			return context.Cause(ctx), running
		case err := <-errc:
			running--
			if err == nil {
				err = ctx.Err()
			}
			if err == nil {
				err = errors.New("pod IPAM: the cache or the CNI socket stopped")
			}
			return err, running
		case <-t.C:
		}
	}
}

type demandKey struct {
	pool string
	f    podipam.Family
}

type nodeSide struct {
	routes string // signature of the routes applied last
	cfg    NodeConfig
	mode   Mode
	cache  cache.Cache
	c      client.Client
	alloc  *ipamd.Allocator
	demand map[demandKey]*podipam.Demand
	// releasing holds the blocks this node decided to give back until the
	// controller took them back (its status no longer lists them). The
	// decision is kept, not taken again: a write that does not land (a
	// 409 from a cache behind the controller's last status write, a
	// timeout) is retried on the next tick, where deciding again would
	// wait a whole grace period more for each lost write.
	releasing map[netip.Prefix]bool
	// missing and lastReconcile are the reconciliation's memory: what
	// earlier lists of the node's pods missed, and when it last listed.
	missing       ipamd.Missing
	lastReconcile time.Time
}

type modeChanged struct{ from, to Mode }

func (e *modeChanged) Error() string {
	return fmt.Sprintf("pod IPAM mode changed from %s to %s: restarting the agent to follow it", e.from, e.to)
}

// poolOf: the pod's annotation, else its namespace's, else "default". It
// fails closed: a pod or namespace it cannot read (an API error, a pod the
// API server does not know) or a named pool it cannot read is an error
// wrapping ipamd.ErrUnavailable, which the plugin returns as "try again
// later" — never an address from another pool. A named pool that does not
// exist is ipamd.ErrNoPool, saying where the name came from. A bare CNI
// call without a pod name skips the pod; without a namespace, the
// namespace.
func (n *nodeSide) poolOf(ctx context.Context, namespace, pod string) (string, error) {
	if n.mode != ModeMultiPool {
		return DefaultPool, nil
	}
	name, from, err := n.namedPool(ctx, namespace, pod)
	if err != nil || from == "" {
		return DefaultPool, err
	}
	var pl mooringv1.PodIPPool
	switch err := n.get(ctx, client.ObjectKey{Name: name}, &pl); {
	case apierrors.IsNotFound(err):
		return "", fmt.Errorf("%w: PodIPPool %q named by the %s annotation of %s does not exist: create it or fix the annotation", ipamd.ErrNoPool, name, mooringv1.AnnotationPodIPPool, from)
	case err != nil:
		return "", fmt.Errorf("%w: reading PodIPPool %q named by %s: %v", ipamd.ErrUnavailable, name, from, err)
	}
	return name, nil
}

// namedPool returns the pool the pod's or its namespace's annotation names
// and which object named it ("" when neither does).
func (n *nodeSide) namedPool(ctx context.Context, namespace, pod string) (name, from string, err error) {
	if pod != "" {
		var p corev1.Pod
		if err := n.get(ctx, client.ObjectKey{Namespace: namespace, Name: pod}, &p); err != nil {
			return "", "", fmt.Errorf("%w: reading pod %s/%s to choose its pool: %v (check the agent's API access; the runtime retries)", ipamd.ErrUnavailable, namespace, pod, err)
		}
		if v := p.Annotations[mooringv1.AnnotationPodIPPool]; v != "" {
			return v, "pod " + namespace + "/" + pod, nil
		}
	}
	if namespace == "" {
		return "", "", nil
	}
	var ns corev1.Namespace
	if err := n.get(ctx, client.ObjectKey{Name: namespace}, &ns); err != nil {
		return "", "", fmt.Errorf("%w: reading namespace %s to choose the pool of pod %s: %v (check the agent's API access; the runtime retries)", ipamd.ErrUnavailable, namespace, pod, err)
	}
	if v := ns.Annotations[mooringv1.AnnotationPodIPPool]; v != "" {
		return v, "namespace " + namespace, nil
	}
	return "", "", nil
}

// get reads from the cache, and from the API server when the cache does
// not have the object yet: the runtime calls ADD right after the pod is
// bound, and a pod must not land in the wrong pool because this agent's
// watch was a few milliseconds late.
func (n *nodeSide) get(ctx context.Context, key client.ObjectKey, obj client.Object) error {
	err := n.cache.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		err = n.c.Get(ctx, key, obj)
	}
	return err
}

// sync feeds the node's blocks to ipamd and, in the cutting modes, writes
// the node's demand and releases to its PodIPAMNode.
func (n *nodeSide) sync(ctx context.Context) error {
	mode, err := RecordedMode(ctx, n.c, n.cfg.Namespace)
	if err != nil {
		return err
	}
	if mode != n.mode {
		return &modeChanged{n.mode, mode}
	}
	if n.cfg.PodRoutes == "direct" {
		if err := n.syncRoutes(ctx); err != nil {
			n.cfg.Log.Warn("pod routes", "err", err)
		}
	}
	if n.mode == ModeKubernetes {
		var node corev1.Node
		if err := n.cache.Get(ctx, client.ObjectKey{Name: n.cfg.NodeName}, &node); err != nil {
			return err
		}
		n.alloc.SetPools(map[string]ipamd.Pool{DefaultPool: poolFromPrefixes(node.Spec.PodCIDRs)})
		return nil
	}
	rec, missing, err := n.record(ctx)
	if err != nil {
		return err
	}
	pools, err := n.pools(ctx, rec)
	if err != nil {
		return err
	}
	n.alloc.SetPools(pools)
	want := rec.DeepCopy()
	if n.mode == ModeMultiPool {
		want.Spec.Requests, want.Spec.Release = n.plan(rec)
	}
	if missing {
		return n.register(ctx, want)
	}
	if equality.Semantic.DeepEqual(rec.Spec, want.Spec) {
		return nil
	}
	if err := n.c.Update(ctx, want); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("write pod IPAM demand of %s: %w", n.cfg.NodeName, err)
	}
	return nil
}

// record returns this node's PodIPAMNode, or an empty one and missing when
// it does not exist yet. A cache miss is checked with one read from the API
// server, so a record this agent just created is not created again.
func (n *nodeSide) record(ctx context.Context) (*mooringv1.PodIPAMNode, bool, error) {
	key := client.ObjectKey{Name: n.cfg.NodeName}
	var rec mooringv1.PodIPAMNode
	err := n.cache.Get(ctx, key, &rec)
	if apierrors.IsNotFound(err) {
		err = n.c.Get(ctx, key, &rec)
	}
	if apierrors.IsNotFound(err) {
		return &mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: n.cfg.NodeName}}, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return &rec, false, nil
}

// register creates this node's PodIPAMNode with its first demand. It is
// not owned by the Node: the controller deletes it when the Node is gone
// and no pod has an address from its blocks any more (an owner reference
// would let the garbage collector delete it, and free the blocks, with the
// Node). The agent creates it, not the controller:
// status is a subresource, so a controller creating the record would need a
// create and a status write for the first blocks; this way the controller's
// status write is its only write per block change.
func (n *nodeSide) register(ctx context.Context, rec *mooringv1.PodIPAMNode) error {
	var node corev1.Node
	if err := n.cache.Get(ctx, client.ObjectKey{Name: n.cfg.NodeName}, &node); apierrors.IsNotFound(err) {
		return nil // no Node (yet, or any more): nothing to cut blocks for
	} else if err != nil {
		return err
	}
	if err := n.c.Create(ctx, rec); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register node %s for pod IPAM (create its PodIPAMNode): %w", n.cfg.NodeName, err)
	}
	n.cfg.Log.Info("registered the node for pod IPAM", "node", n.cfg.NodeName, "mode", n.mode)
	return nil
}

// pools groups the recorded blocks by pool, minus the ones this node gave
// back; in multi-pool every PodIPPool is listed with its families, so a
// pod of a pool without a block here is counted as pending demand.
func (n *nodeSide) pools(ctx context.Context, rec *mooringv1.PodIPAMNode) (map[string]ipamd.Pool, error) {
	out := map[string]ipamd.Pool{}
	if n.mode == ModeMultiPool {
		var list mooringv1.PodIPPoolList
		if err := n.cache.List(ctx, &list); err != nil {
			return nil, err
		}
		for _, p := range list.Items {
			var fams []podipam.Family
			if p.Spec.IPv4 != nil {
				fams = append(fams, podipam.IPv4)
			}
			if p.Spec.IPv6 != nil {
				fams = append(fams, podipam.IPv6)
			}
			out[p.Name] = ipamd.Pool{Families: fams}
		}
	}
	blocks, err := blocksOf(rec)
	if err != nil {
		return nil, err
	}
	if c := meta.FindStatusCondition(rec.Status.Conditions, mooringv1.ConditionExhausted); c != nil && c.Status == metav1.ConditionTrue {
		for name, pl := range out {
			if strings.Contains(c.Message, fmt.Sprintf("pool %q", name)) {
				pl.Exhausted = c.Message
				out[name] = pl
			}
		}
	}
	for _, b := range blocks {
		if slices.Contains(rec.Spec.Release, b.Prefix.String()) {
			continue
		}
		pl := out[b.Pool]
		pl.Blocks = append(pl.Blocks, b.Prefix)
		if n.mode != ModeMultiPool && !slices.Contains(pl.Families, podipam.FamilyOf(b.Prefix)) {
			pl.Families = append(pl.Families, podipam.FamilyOf(b.Prefix))
		}
		out[b.Pool] = pl
	}
	return out, nil
}

// plan runs podipam.Demand per pool and family: what to ask for, and
// which empty blocks to give back (marked in ipamd first, so no address
// is handed out of a block on its way back).
func (n *nodeSide) plan(rec *mooringv1.PodIPAMNode) ([]mooringv1.PodIPAMRequest, []string) {
	now := time.Now()
	held := map[string]bool{}
	for _, b := range rec.Status.Blocks {
		held[b.CIDR] = true
	}
	var release []string
	for _, r := range rec.Spec.Release {
		if held[r] { // keep listing it until the controller took it back
			release = append(release, r)
		}
	}
	for p := range n.releasing {
		switch {
		case !held[p.String()]:
			delete(n.releasing, p) // taken back
		case !slices.Contains(release, p.String()):
			release = append(release, p.String()) // its write did not land
		}
	}
	reqs := map[string]*mooringv1.PodIPAMRequest{}
	for pool, fams := range n.alloc.Usage() {
		for f, u := range fams {
			k := demandKey{pool, f}
			d := n.demand[k]
			if d == nil {
				d = &podipam.Demand{PreAllocate: n.cfg.PreAllocate, Grace: n.cfg.Grace}
				n.demand[k] = d
			}
			// A block on its way back is neither capacity nor a candidate.
			blocks := slices.DeleteFunc(slices.Clone(u.Blocks), func(b podipam.BlockUse) bool { return n.releasing[b.Prefix] })
			plan := d.Decide(now, blocks, u.Pending, pool == DefaultPool)
			for _, p := range plan.Release {
				if n.alloc.MarkReleasing(p) && !slices.Contains(release, p.String()) {
					n.releasing[p] = true
					release = append(release, p.String())
				}
			}
			if plan.Needed == 0 {
				continue
			}
			r := reqs[pool]
			if r == nil {
				r = &mooringv1.PodIPAMRequest{Pool: pool}
				reqs[pool] = r
			}
			if f == podipam.IPv4 {
				r.IPv4Addresses = int32(plan.Needed)
			} else {
				r.IPv6Addresses = int32(plan.Needed)
			}
		}
	}
	out := make([]mooringv1.PodIPAMRequest, 0, len(reqs))
	for _, r := range reqs {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b mooringv1.PodIPAMRequest) int {
		if a.Pool < b.Pool {
			return -1
		}
		if a.Pool > b.Pool {
			return 1
		}
		return 0
	})
	slices.Sort(release)
	if len(out) == 0 {
		out = nil
	}
	return out, release
}

func poolFromPrefixes(cidrs []string) ipamd.Pool {
	var pl ipamd.Pool
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			continue
		}
		pl.Blocks = append(pl.Blocks, p.Masked())
		if f := podipam.FamilyOf(p); !slices.Contains(pl.Families, f) {
			pl.Families = append(pl.Families, f)
		}
	}
	return pl
}

// syncRoutes installs a route to every other node's blocks via that
// node's address (podipam.DirectRoutes), and removes routes to blocks that
// are gone. Routes stay when the agent stops, so pods keep talking
// through an agent restart.
func (n *nodeSide) syncRoutes(ctx context.Context) error {
	var nodes corev1.NodeList
	if err := n.cache.List(ctx, &nodes); err != nil {
		return err
	}
	blocks := map[string][]netip.Prefix{}
	if n.mode == ModeKubernetes {
		for _, nd := range nodes.Items {
			blocks[nd.Name] = poolFromPrefixes(nd.Spec.PodCIDRs).Blocks
		}
	} else {
		var recs mooringv1.PodIPAMNodeList
		if err := n.cache.List(ctx, &recs); err != nil {
			return err
		}
		for i := range recs.Items {
			bs, err := blocksOf(&recs.Items[i])
			if err != nil {
				continue
			}
			for _, b := range bs {
				blocks[b.Node] = append(blocks[b.Node], b.Prefix)
			}
		}
	}
	in := make([]podipam.NodeBlocks, 0, len(nodes.Items))
	for _, nd := range nodes.Items {
		nb := podipam.NodeBlocks{Name: nd.Name, Blocks: blocks[nd.Name]}
		for _, a := range nd.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
				nb.Addrs = append(nb.Addrs, ip)
			}
		}
		in = append(in, nb)
	}
	want := podipam.DirectRoutes(n.cfg.NodeName, in)
	sig := fmt.Sprint(want)
	if sig == n.routes {
		return nil
	}
	set := n.cfg.SetRoutes
	if set == nil {
		set = func(r []podipam.Route) error { return ApplyRoutes(nil, r) }
	}
	if err := set(want); err != nil {
		return err
	}
	n.routes = sig
	return nil
}

// awaitMode returns the recorded pod IPAM mode once it is not off. An agent
// may start before the controller recorded the mode (a fresh install, or
// pod IPAM switched on later): it then watches the one ConfigMap and starts
// serving when a mode appears, instead of staying off until a restart. It
// returns ModeOff when ctx ends, or when the agent may not read the record
// (an install without the role: pod IPAM stays off, said once).
func awaitMode(ctx context.Context, cfg NodeConfig, direct client.Reader, hc *http.Client) (Mode, error) {
	cs, err := kubernetes.NewForConfigAndClient(cfg.REST, hc)
	if err != nil {
		return "", err
	}
	said := false
	for wait := time.Second; ; {
		mode, err := RecordedMode(ctx, direct, cfg.Namespace)
		switch {
		case apierrors.IsForbidden(errors.Unwrap(err)):
			cfg.Log.Info("pod IPAM off: this agent may not read the recorded mode; bind the mooring-agent-pod-ipam role to enable it (docs/podipam.md, RBAC)", "err", err)
			return ModeOff, nil
		case err != nil:
			return "", err
		case mode != ModeOff:
			return mode, nil
		case !said:
			cfg.Log.Info("pod IPAM off: no mode recorded (the controller records it at its first start with --pod-ipam-mode); waiting for one", "configmap", cfg.Namespace+"/"+ModeConfigMap)
			said = true
		}
		w, err := cs.CoreV1().ConfigMaps(cfg.Namespace).Watch(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", ModeConfigMap).String()})
		if err == nil {
			// Any event (or the watch ending) means: read the record again;
			// a watch that ends at once is paced like a failed one.
			start := time.Now()
			select {
			case <-ctx.Done():
			case <-w.ResultChan():
			}
			w.Stop()
			if time.Since(start) < time.Second {
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		} else {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			wait = min(2*wait, 30*time.Second)
		}
		if ctx.Err() != nil {
			return ModeOff, nil
		}
	}
}
