package lab_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/cniinstall"
	"github.com/mooringlb/mooring/internal/ipamd"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/lab/realnode"
)

// TestRealNodesPodIPAM is issue 21's pod IPAM on real nodes, one
// bring-up per mode (cluster-pool, kubernetes, multi-pool): `lab up
// --runtime=containerd --install=chart --pod-ipam=MODE`. The chart's
// install-cni init container puts mooring-ipam into every node's
// /opt/cni/bin and the node's network (ptp with mooring-ipam,
// agent.cni.network) into /etc/cni/net.d, where the lab writes nothing;
// containerd runs it for every pod: each pod's addresses are those the
// node's agent stored for it, from the mode's source (the node's blocks of
// the pod's pool; in kubernetes mode node.spec.podCIDRs, which
// kube-controller-manager writes), never one twice, and pods reach each
// other across nodes. In multi-pool, pods annotated with the pool "blue"
// get blue addresses. Deleting a pod makes containerd call DEL (its own
// log says so), which empties the pod's entry in the store. A node
// rebooted by kill/restore runs its pods in new sandboxes: the old
// sandboxes' addresses are given back (containerd calls DEL for them once
// its agent serves again), the store again holds exactly the live pods,
// and each pod has its old addresses again (docs/lab.md says why that is
// the agent's doing). In the cluster-pool lab, a pod deleted while its
// node is dead leaks its addresses until the restarted kubelet's garbage
// collection removes its old sandbox, whose network containerd tears down
// with a DEL: containerd never calls CNI GC, and the agents' logs say no
// GC was served.
func TestRealNodesPodIPAM(t *testing.T) {
	for _, mode := range []string{lab.PodIPAMClusterPool, lab.PodIPAMKubernetes, lab.PodIPAMMultiPool} {
		t.Run(mode, func(t *testing.T) { testRealNodesPodIPAM(t, mode) })
	}
}

// bluePool is the multi-pool lab's second pool, named by its pods'
// annotation (docs/podipam.md), as in TestPodIPAMMultiPool.
const bluePool = "blue"

func testRealNodesPodIPAM(t *testing.T, mode string) {
	began := time.Now()
	cfg := requireRealNodes(t, lab.InstallChart)
	cfg.PodIPAM, cfg.PodNetwork = mode, lab.PodNetworkPTP
	if err := cfg.Validate(); err != nil {
		t.Fatalf("real nodes with pod IPAM cannot run: %v", err)
	}
	before := snapshotHost(t)
	r, stop := runRealLab(t, cfg)
	e := newIPAMEnv(t, r, cfg.StateDir, mode)
	waitChartPodsReady(t, e.cs, 2*time.Minute)
	t.Run("install-cni put mooring-ipam in", e.checkInstalled)
	// One pod per node. In one mode (what frees it does not depend on
	// the mode, and waiting for it costs up to two minutes) one more on
	// node-2, deleted while the node is dead: the reboot's leak check.
	specs := []ipamPod{{"ipam-node-1", "node-1", ""}, {"ipam-node-2", "node-2", ""}, {"ipam-node-3", "node-3", ""}}
	leak := ""
	if mode == lab.PodIPAMClusterPool {
		leak = leakPod
		specs = append(specs, ipamPod{leak, "node-2", ""})
	}
	if mode == lab.PodIPAMMultiPool {
		e.createPool(bluePool, "10.245.0.0/16", 26, "fd00:245::/112", 122)
		specs = append(specs, ipamPod{"ipam-blue-node-1", "node-1", bluePool}, ipamPod{"ipam-blue-node-2", "node-2", bluePool})
	}
	pods := e.startPods(specs)
	t.Run("addresses from the mode's source", e.checkSource)
	e.checkStores()
	e.checkReach(slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.Name == leakPod }))
	t.Run("DEL on pod deletion", func(t *testing.T) { e.checkDelete(t, "ipam-node-3", "node-3") })
	t.Run("reboot", func(t *testing.T) { e.checkReboot(t, "node-2", leak) })
	// The agents' journals hold one line per change: a put per ADD, a del
	// per DEL or GC that freed something. containerd logs every sandbox's
	// network teardown (host-network sandboxes too); the agents log every
	// GC they serve.
	journals := "nodes/*/disk/var-lib-mooring/ipam/allocations.journal"
	t.Logf("figures (%s): journal puts (ADD) %d, dels (DEL/GC) %d; containerd sandbox network teardowns %d; CNI GC requests in the agents' logs %d",
		mode, e.count(journals, `"put":`), e.count(journals, `"del":`),
		e.count("logs/containerd-node-*.log", "TearDown network for sandbox"), e.gcServed("node-*"))
	stop()
	checkNothingLeft(t, cfg.StateDir)
	compareHost(t, before, snapshotHost(t))
	t.Logf("%s: %v from the test's start to the lab's teardown", mode, time.Since(began).Round(100*time.Millisecond))
}

// leakPod is the pod deleted while its node is dead.
const leakPod = "ipam-leak"

// leakFreedWithin bounds the wait, from the restore, for the DEL that
// frees leakPod's addresses: the kubelet's container garbage collection
// runs every minute (kubelet.ContainerGCPeriod, not configurable); in
// idle-to-load-8 runs the sandbox went in its run about 60 or 120 s after
// the restore (docs/benchmarks.md).
const leakFreedWithin = 4 * time.Minute

// ipamPod is one test pod: its name, node and pool annotation ("": none,
// the pool default).
type ipamPod struct{ name, node, pool string }

// ipamEnv is one real-node lab with pod IPAM.
type ipamEnv struct {
	t     *testing.T
	r     *lab.Ready
	cs    kubernetes.Interface
	dyn   dynamic.Interface
	state string            // the lab's state dir
	mode  string            // the pod IPAM mode
	pools map[string]string // namespace/pod → pool, of the pods naming one
}

func newIPAMEnv(t *testing.T, r *lab.Ready, state, mode string) *ipamEnv {
	rc, err := kube.RESTConfig(r.Kubeconfig, 20, 40)
	if err != nil {
		t.Fatal(err)
	}
	return &ipamEnv{t: t, r: r, cs: kubernetes.NewForConfigOrDie(rc), dyn: dynamic.NewForConfigOrDie(rc), state: state,
		mode: mode, pools: map[string]string{}}
}

// in is e for subtest t (a subtest may not end its parent).
func (e *ipamEnv) in(t *testing.T) *ipamEnv {
	c := *e
	c.t = t
	return &c
}

// nodeDisk is the private folder behind host path target on node.
func (e *ipamEnv) nodeDisk(node, target string) string {
	return filepath.Join(e.state, "nodes", node, "disk", strings.ReplaceAll(strings.Trim(target, "/"), "/", "-"))
}

// checkInstalled: every node's plugin folder holds the chart's
// mooring-ipam (the lab copies only the reference plugins there), its
// config folder holds only the chart's network (the lab writes none), and
// every agent's install-cni container logged both.
func (e *ipamEnv) checkInstalled(t *testing.T) {
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		st, err := os.Stat(filepath.Join(e.nodeDisk(n, realnode.CNIBinDir), "mooring-ipam"))
		if err != nil || st.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s: mooring-ipam in /opt/cni/bin: %v %v", n, st, err)
		}
		confs, _ := os.ReadDir(e.nodeDisk(n, realnode.CNIConfDir))
		var names []string
		for _, c := range confs {
			names = append(names, c.Name())
		}
		conf, err := os.ReadFile(filepath.Join(e.nodeDisk(n, realnode.CNIConfDir), cniinstall.ConfListName))
		if err != nil || len(names) != 1 || !strings.Contains(string(conf), `"type": "mooring-ipam"`) {
			t.Errorf("%s: /etc/cni/net.d holds %v; %s: %v %s", n, names, cniinstall.ConfListName, err, conf)
		}
		p := agentPod(t, e.cs, n)
		b, err := e.cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "install-cni"}).DoRaw(context.Background())
		if err != nil || !strings.Contains(string(b), "installed /host/cni-bin/mooring-ipam") ||
			!strings.Contains(string(b), "wrote /host/cni-net/"+cniinstall.ConfListName) {
			t.Errorf("%s: install-cni's log: %v %q", n, err, b)
		}
	}
}

// startPods runs the echo pods (the demo's image and spec) on their
// nodes, with the pool annotation docs/podipam.md names when they name a
// pool, and returns them Ready.
func (e *ipamEnv) startPods(specs []ipamPod) []corev1.Pod {
	e.t.Helper()
	tmpl, err := e.cs.CoreV1().Pods(lab.DemoNamespace).Get(context.Background(), "echo-1", metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("the demo pod to copy: %v", err)
	}
	for _, s := range specs {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: "default", Labels: map[string]string{"test": "ipam"}},
			Spec: *tmpl.Spec.DeepCopy()}
		if s.pool != "" {
			p.Annotations = map[string]string{mooringv1.AnnotationPodIPPool: s.pool}
			e.pools["default/"+s.name] = s.pool
		}
		p.Spec.NodeName = s.node
		if _, err := e.cs.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			e.t.Fatalf("pod %s on %s: %v", s.name, s.node, err)
		}
	}
	// Those pods, not any n of the namespace (the demo's are there too):
	// a pod of a pool the node holds no block of yet waits for one.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		pods, err := e.cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "test=ipam"})
		if err == nil && len(pods.Items) == len(specs) && !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return !podReady(p) }) {
			return pods.Items
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the test's %d pods not all Ready after 2 min: %v %s", len(specs), err, podSummary(pods))
		}
	}
}

// poolOf is the pool pod (namespace/name) asked for.
func (e *ipamEnv) poolOf(pod string) string {
	if p, ok := e.pools[pod]; ok {
		return p
	}
	return mooringv1.DefaultPodIPPool
}

// createPool creates a PodIPPool of both families.
func (e *ipamEnv) createPool(name, v4 string, mask4 int32, v6 string, mask6 int32) {
	e.t.Helper()
	pool := &mooringv1.PodIPPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: mooringv1.GroupVersion.String(), Kind: "PodIPPool"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: mooringv1.PodIPPoolSpec{
			IPv4: &mooringv1.PodIPPoolFamily{CIDRs: []string{v4}, MaskSize: mask4},
			IPv6: &mooringv1.PodIPPoolFamily{CIDRs: []string{v6}, MaskSize: mask6},
		},
	}
	m, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(pool)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.dyn.Resource(mooringv1.GroupVersion.WithResource("podippools")).Create(context.Background(),
		&unstructured.Unstructured{Object: m}, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("PodIPPool %s: %v", name, err)
	}
}

// livePods are the pods with a pod-network address on node (the chart's
// pods share the node's network).
func (e *ipamEnv) livePods(node string) map[string][]string {
	e.t.Helper()
	pods, err := e.cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range pods.Items {
		if p.Spec.HostNetwork || p.DeletionTimestamp != nil {
			continue
		}
		var ips []string
		for _, ip := range p.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		slices.Sort(ips)
		out[p.Namespace+"/"+p.Name] = ips
	}
	return out
}

// storedPod is one pod's entry in an agent's store.
type storedPod struct {
	ips       []string // sorted
	pool      string
	container string // the sandbox's ID
}

// stored reads node's ipamd store: namespace/pod → its entry.
func (e *ipamEnv) stored(node string) map[string]storedPod {
	e.t.Helper()
	all, err := ipamd.ReadStore(filepath.Join(e.nodeDisk(node, "/var/lib/mooring"), "ipam"))
	if err != nil {
		e.t.Fatalf("%s's store: %v", node, err)
	}
	out := map[string]storedPod{}
	for _, a := range all {
		k := a.Namespace + "/" + a.Pod
		sp := out[k]
		for _, ip := range a.IPs {
			sp.ips = append(sp.ips, ip.Address.Addr().String())
		}
		slices.Sort(sp.ips)
		sp.pool, sp.container = a.Pool, a.ContainerID
		out[k] = sp
	}
	return out
}

// blocks are node's blocks of pool as the controller recorded them.
func (e *ipamEnv) blocks(node, pool string) []netip.Prefix {
	e.t.Helper()
	u, err := e.dyn.Resource(mooringv1.GroupVersion.WithResource("podipamnodes")).Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("PodIPAMNode %s: %v", node, err)
	}
	var rec mooringv1.PodIPAMNode
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rec); err != nil {
		e.t.Fatal(err)
	}
	var out []netip.Prefix
	for _, b := range rec.Status.Blocks {
		if b.Pool == pool {
			out = append(out, netip.MustParsePrefix(b.CIDR))
		}
	}
	return out
}

// nodePodCIDRs are node.spec.podCIDRs.
func (e *ipamEnv) nodePodCIDRs(node string) []netip.Prefix {
	e.t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []netip.Prefix
	for _, c := range n.Spec.PodCIDRs {
		out = append(out, netip.MustParsePrefix(c))
	}
	return out
}

// allowed are the prefixes the mode lets a pod of pool on node take its
// addresses from: node.spec.podCIDRs in kubernetes mode, else the node's
// blocks of the pool.
func (e *ipamEnv) allowed(node, pool string) []netip.Prefix {
	if e.mode == lab.PodIPAMKubernetes {
		return e.nodePodCIDRs(node)
	}
	return e.blocks(node, pool)
}

// storesMatch says what differs between each node's store and its live
// pods ("" when nothing): the same pods with the same two addresses, of
// the pool each asked for, each inside what the mode allows for that pool
// on the node, no address twice in the cluster.
func (e *ipamEnv) storesMatch() string {
	var bad []string
	seen := map[string]string{}
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		live, store := e.livePods(n), e.stored(n)
		allowed := map[string][]netip.Prefix{}
		for pod, ips := range live {
			if sp := store[pod]; !slices.Equal(sp.ips, ips) || len(ips) != 2 || sp.pool != e.poolOf(pod) {
				bad = append(bad, fmt.Sprintf("%s %s: status %v, store %v of pool %q (want %q)", n, pod, ips, sp.ips, sp.pool, e.poolOf(pod)))
			}
		}
		for pod, sp := range store {
			if _, ok := live[pod]; !ok {
				bad = append(bad, fmt.Sprintf("%s: store holds %s %v, no such live pod (leaked)", n, pod, sp.ips))
			}
			if _, ok := allowed[sp.pool]; !ok {
				allowed[sp.pool] = e.allowed(n, sp.pool)
			}
			for _, ip := range sp.ips {
				if !slices.ContainsFunc(allowed[sp.pool], func(b netip.Prefix) bool { return b.Contains(netip.MustParseAddr(ip)) }) {
					bad = append(bad, fmt.Sprintf("%s %s: %s outside what %s allows for pool %s there: %v", n, pod, ip, e.mode, sp.pool, allowed[sp.pool]))
				}
				if other, dup := seen[ip]; dup {
					bad = append(bad, fmt.Sprintf("%s held by %s and %s", ip, other, pod))
				}
				seen[ip] = pod
			}
		}
	}
	slices.Sort(bad)
	return strings.Join(bad, "; ")
}

// sources are the CIDRs and block sizes (prefix length by family: 4, 6)
// the mode cuts pool's node blocks from: the lab's flags
// (--cluster-pool-*, kube-controller-manager's --cluster-cidr), or in
// multi-pool the PodIPPool.
func (e *ipamEnv) sources(pool string) ([]netip.Prefix, map[int]int) {
	e.t.Helper()
	if e.mode != lab.PodIPAMMultiPool {
		return []netip.Prefix{lab.PodIPAMCIDR4, lab.PodIPAMCIDR6}, map[int]int{4: lab.PodIPAMMask4, 6: lab.PodIPAMMask6}
	}
	u, err := e.dyn.Resource(mooringv1.GroupVersion.WithResource("podippools")).Get(context.Background(), pool, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("PodIPPool %s: %v", pool, err)
	}
	var p mooringv1.PodIPPool
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		e.t.Fatal(err)
	}
	var cidrs []netip.Prefix
	masks := map[int]int{}
	for f, fam := range map[int]*mooringv1.PodIPPoolFamily{4: p.Spec.IPv4, 6: p.Spec.IPv6} {
		if fam == nil {
			continue
		}
		masks[f] = int(fam.MaskSize)
		for _, c := range fam.CIDRs {
			cidrs = append(cidrs, netip.MustParsePrefix(c))
		}
	}
	return cidrs, masks
}

// checkSource: every node holds one block of each family of each pool its
// pods use, of the pool's block size, inside the pool's CIDRs, and none
// of a pool it runs no pod of (multi-pool: node-3 runs no blue pod). The
// blocks are where the mode keeps them: node.spec.podCIDRs in kubernetes
// mode (kube-controller-manager's), the PodIPAMNode's status otherwise;
// cluster-pool writes its blocks into node.spec.podCIDRs too.
func (e *ipamEnv) checkSource(t *testing.T) {
	e = e.in(t)
	pools := []string{mooringv1.DefaultPodIPPool}
	if e.mode == lab.PodIPAMMultiPool {
		pools = append(pools, bluePool)
	}
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		uses := map[string]bool{} // the pools of the demo and test pods there
		for pod := range e.livePods(n) {
			uses[e.poolOf(pod)] = true
		}
		for _, pool := range pools {
			held := e.allowed(n, pool)
			cidrs, masks := e.sources(pool)
			if !uses[pool] {
				if len(held) != 0 {
					t.Errorf("%s runs no pod of pool %s but holds its blocks %v", n, pool, held)
				}
				continue
			}
			if len(held) != 2 || !held[0].Addr().Is4() || !held[1].Addr().Is6() {
				t.Errorf("%s: blocks of pool %s %v, want one IPv4 then one IPv6", n, pool, held)
			}
			for _, b := range held {
				f := 6
				if b.Addr().Is4() {
					f = 4
				}
				if b.Bits() != masks[f] || !slices.ContainsFunc(cidrs, func(c netip.Prefix) bool { return c.Bits() <= b.Bits() && c.Contains(b.Addr()) }) {
					t.Errorf("%s: block %v of pool %s is not a /%d of the pool's %v", n, b, pool, masks[f], cidrs)
				}
			}
			t.Logf("%s: pool %s blocks %v", n, pool, held)
		}
		if e.mode == lab.PodIPAMClusterPool {
			if got, want := e.nodePodCIDRs(n), e.blocks(n, mooringv1.DefaultPodIPPool); !slices.Equal(got, want) {
				t.Errorf("%s: node.spec.podCIDRs %v, Mooring's blocks %v", n, got, want)
			}
		}
	}
}

// checkStores waits up to 30 s for storesMatch (a pod's status lags its
// sandbox by a moment).
func (e *ipamEnv) checkStores() {
	e.t.Helper()
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if last = e.storesMatch(); last == "" {
			return
		}
	}
	e.t.Errorf("the agents' stores and the live pods differ: %s", last)
}

// podPID is the host PID of pod's echo process (in its node's cgroup, the
// pod's own cgroup named pod<uid> by the kubelet's cgroupfs driver).
func podPID(t *testing.T, p corev1.Pod) int {
	t.Helper()
	pids, err := realnode.CgroupPIDs(fmt.Sprintf("/mooring-lab-%d/%s", os.Getpid(), p.Spec.NodeName))
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cg), "pod"+string(p.UID)) && strings.HasPrefix(string(cmd), "/echo") {
			return pid
		}
	}
	t.Fatalf("no echo process of pod %s in %s's cgroup", p.Name, p.Spec.NodeName)
	return 0
}

// checkReach: from each pod, the pod on the next node answers on both of
// its addresses (routes the agents installed; no lab route).
func (e *ipamEnv) checkReach(pods []corev1.Pod) {
	e.t.Helper()
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Spec.NodeName, b.Spec.NodeName) })
	for i, from := range pods {
		to := pods[(i+1)%len(pods)]
		pid := podPID(e.t, from)
		for _, ip := range to.Status.PodIPs {
			at := netip.AddrPortFrom(netip.MustParseAddr(ip.IP), lab.EchoPort)
			var body string
			var err error
			for try := 0; try < 10; try++ { // a new route may lag the pod's readiness
				if body, err = labtest.GetFromPod(pid, at, 2*time.Second); err == nil && strings.Contains(body, "pod=default/"+to.Name) {
					break
				}
				time.Sleep(300 * time.Millisecond)
			}
			if err != nil || !strings.Contains(body, "pod=default/"+to.Name) {
				e.t.Errorf("%s (%s) → %s (%s) at %s: %q %v", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName, at, body, err)
			}
		}
	}
}

// checkDelete deletes pod and waits until it is gone: containerd logged
// the network teardown of one more sandbox, and the node's store no longer
// holds the pod (the rest still matches).
func (e *ipamEnv) checkDelete(t *testing.T, pod, node string) {
	e = e.in(t)
	if _, ok := e.stored(node)["default/"+pod]; !ok {
		t.Fatalf("%s is not in %s's store before the deletion: %v", pod, node, e.stored(node))
	}
	dels := e.count("logs/containerd-"+node+".log", "TearDown network for sandbox")
	if err := e.cs.CoreV1().Pods("default").Delete(context.Background(), pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone(pod, time.Minute)
	if after := e.count("logs/containerd-"+node+".log", "TearDown network for sandbox"); after <= dels {
		t.Errorf("containerd on %s logged %d network teardowns before the deletion and %d after", node, dels, after)
	}
	if sp, ok := e.stored(node)["default/"+pod]; ok {
		t.Errorf("%s's store still holds the deleted %s: %v", node, pod, sp.ips)
	}
	e.checkStores()
}

// waitGone waits up to limit for pod's object to be gone.
func (e *ipamEnv) waitGone(pod string, limit time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		_, err := e.cs.CoreV1().Pods("default").Get(context.Background(), pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s not gone %v after its deletion: %v", pod, limit, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// count is how often the lab's files matching glob (in its state dir)
// hold s.
func (e *ipamEnv) count(glob, s string) int {
	files, _ := filepath.Glob(filepath.Join(e.state, glob))
	n := 0
	for _, f := range files {
		b, _ := os.ReadFile(f)
		n += strings.Count(string(b), s)
	}
	return n
}

// linesOf are the lines of the lab's log of component (containerd-node-2,
// kubelet-node-2) that name container (a sandbox's ID), cut at 220
// characters.
func (e *ipamEnv) linesOf(component, container string) string {
	b, _ := os.ReadFile(filepath.Join(e.state, "logs", component+".log"))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, container) {
			out = append(out, "\t"+l[:min(len(l), 220)])
		}
	}
	return strings.Join(out, "\n")
}

// gcServed is how many CNI GCs the agents on the nodes matching glob
// logged serving (ipamd logs each, freeing or not), over all their
// containers' logs the kubelet keeps. Logs that never say the agent
// served pod IPAM would make 0 mean nothing: that fails the test.
func (e *ipamEnv) gcServed(glob string) int {
	e.t.Helper()
	logs := "nodes/" + glob + "/disk/var-log-pods/" + lab.ChartNamespace + "_*agent*/agent/*.log"
	if e.count(logs, "pod IPAM agent serving") == 0 {
		e.t.Fatalf("no agent log in %s says it served pod IPAM", logs)
	}
	return e.count(logs, "CNI GC")
}

// checkReboot kills node, force-deletes leak (if not "") from the API
// while the node is dead (nothing on the node can run its DEL then: its
// sandbox and addresses stay behind) and restores the node. The kubelet runs the
// node's other pods in new sandboxes: once they are Ready again, every pod
// has the addresses it had before and pods reach each other again. A new
// sandbox is a new CNI ADD, and Kubernetes ties a pod's address to one
// sandbox; the agent gives the pod what its old sandbox's DEL freed
// (ipamd's per-pod hint), which the kubelet's order (stop the old sandbox,
// then run the new one) makes possible. The leaked addresses are freed by
// a DEL too: the kubelet's garbage collection (every minute) removes the
// sandboxes of pods that are gone, stopping each first, and containerd
// tears its network down (its log names the very sandbox the store held)
// — not by a CNI GC, which containerd never calls (the agents logged
// none). Then the stores hold exactly the live pods.
func (e *ipamEnv) checkReboot(t *testing.T, node, leak string) {
	e = e.in(t)
	leakKey := "default/" + leak
	leaked, ok := e.stored(node)[leakKey]
	if leak != "" && !ok {
		t.Fatalf("%s is not in %s's store before the reboot: %v", leak, node, e.stored(node))
	}
	gcs := e.gcServed(node)
	killed := time.Now()
	if err := e.r.Cluster.Kill(node); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if leak != "" {
		// As `kubectl delete --force --grace-period=0` does: the object
		// goes at once, without its kubelet.
		if err := e.cs.CoreV1().Pods("default").Delete(context.Background(), leak, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatalf("deleting %s while %s is dead: %v", leak, node, err)
		}
		e.waitGone(leak, 30*time.Second)
	}
	old := e.livePods(node)
	restored := time.Now()
	if err := e.r.Cluster.Restore(node); err != nil {
		t.Fatalf("restore: %v", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := e.cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err == nil && len(pods.Items) > 0 && !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return !restartedSince(p, killed) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's pods not all Ready after the reboot within 2 min: %v %s", node, err, podSummary(pods))
		}
		time.Sleep(time.Second)
	}
	t.Logf("%s rebooted; pods Ready again %v after the kill", node, time.Since(killed).Round(100*time.Millisecond))
	if leak != "" {
		e.checkLeakFreed(node, leak, leaked, restored)
	}
	if n := e.gcServed(node) - gcs; n != 0 {
		t.Errorf("%s's agent logged %d CNI GCs during the reboot; containerd v2.4.2 has no GC call (docs/podipam.md)", node, n)
	}
	e.checkStores()
	now := e.livePods(node)
	for pod, ips := range old {
		t.Logf("%s: addresses %v before the reboot, %v after", pod, ips, now[pod])
		if !slices.Equal(ips, now[pod]) {
			t.Errorf("%s: addresses %v before the reboot, %v after: the agent gives a pod's new sandbox the addresses its old one freed", pod, ips, now[pod])
		}
	}
	pods, err := e.cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "test=ipam"})
	if err != nil {
		t.Fatal(err)
	}
	e.checkReach(pods.Items)
}

// checkLeakFreed waits until node's store no longer holds leak (leaked
// is its entry before the kill) and containerd logged the network
// teardown of its sandbox.
func (e *ipamEnv) checkLeakFreed(node, leak string, leaked storedPod, restored time.Time) {
	t := e.t
	leakKey := "default/" + leak
	teardown := fmt.Sprintf(`TearDown network for sandbox \"%s\"`, leaked.container)
	// The kubelet's container GC runs every minute; a stop whose DEL the
	// agent could not answer yet waits for the next run.
	for deadline := restored.Add(leakFreedWithin); ; time.Sleep(time.Second) {
		_, still := e.stored(node)[leakKey]
		if !still && e.count("logs/containerd-"+node+".log", teardown) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after the restore: %s's store still holds the deleted %s (%v): %v; containerd's teardown of its sandbox %s logged: %v",
				leakFreedWithin, node, leak, leaked.ips, still, leaked.container, e.count("logs/containerd-"+node+".log", teardown) > 0)
		}
	}
	// The kubelet's garbage collection removes a sandbox only once its
	// containers are gone: containerd's lines on both show when each went.
	ctrdLines := e.linesOf("containerd-"+node, leaked.container)
	if _, rest, ok := strings.Cut(ctrdLines, `returns container id \"`); ok {
		id := rest[:strings.IndexFunc(rest+`"`, func(r rune) bool { return !strings.ContainsRune("0123456789abcdef", r) })]
		ctrdLines += "\n" + e.linesOf("containerd-"+node, id)
	}
	t.Logf("the addresses %v of %s, deleted while %s was dead, freed by the DEL of its sandbox %.12s %v after the restore; containerd's and the kubelet's logs on that sandbox and its container:\n%s\n%s",
		leaked.ips, leak, node, leaked.container, time.Since(restored).Round(time.Second), ctrdLines, e.linesOf("kubelet-"+node, leaked.container))
}
