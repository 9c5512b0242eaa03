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
// bring-up: `lab up --runtime=containerd --install=chart --pod-ipam=
// cluster-pool`. The chart's install-cni init container puts mooring-ipam
// into every node's /opt/cni/bin and the node's network (ptp with
// mooring-ipam, agent.cni.network) into /etc/cni/net.d, where the lab
// writes nothing; containerd runs it for every pod: each
// pod's addresses are those the node's agent stored for it, inside the
// node's blocks, never one twice, and pods reach each other across nodes.
// Deleting a pod makes containerd call DEL (its own log says so), which
// empties the pod's entry in the store. A node rebooted by kill/restore
// runs its pods in new sandboxes: the old sandboxes' addresses are given
// back (containerd calls DEL for them once its agent serves again), the
// store again holds exactly the live pods, and each pod has its old
// addresses again (docs/lab.md says why that is the agent's doing).
func TestRealNodesPodIPAM(t *testing.T) {
	cfg := requireRealNodes(t, lab.InstallChart)
	cfg.PodIPAM, cfg.PodNetwork = lab.PodIPAMClusterPool, lab.PodNetworkPTP
	if err := cfg.Validate(); err != nil {
		t.Fatalf("real nodes with pod IPAM cannot run: %v", err)
	}
	before := snapshotHost(t)
	r, stop := runRealLab(t, cfg)
	e := newIPAMEnv(t, r, cfg.StateDir)
	waitChartPodsReady(t, e.cs, 2*time.Minute)
	t.Run("install-cni put mooring-ipam in", e.checkInstalled)
	pods := e.startPods([]string{"node-1", "node-2", "node-3"})
	e.checkStores()
	e.checkReach(pods)
	t.Run("DEL on pod deletion", func(t *testing.T) { e.checkDelete(t, "ipam-node-3") })
	t.Run("reboot", func(t *testing.T) { e.checkReboot(t, "node-2") })
	// The agents' journals hold one line per change: a put per ADD, a del
	// per DEL or GC that freed something. containerd logs every sandbox's
	// network teardown (host-network sandboxes too); the agents log every
	// GC they serve.
	journals := "nodes/*/disk/var-lib-mooring/ipam/allocations.journal"
	t.Logf("figures: journal puts (ADD) %d, dels (DEL/GC) %d; containerd sandbox network teardowns %d; CNI GC requests in the agents' logs %d",
		e.count(journals, `"put":`), e.count(journals, `"del":`),
		e.count("logs/containerd-node-*.log", "TearDown network for sandbox"),
		e.count("nodes/*/disk/var-log-pods/"+lab.ChartNamespace+"_*agent*/agent/*.log", "CNI GC"))
	stop()
	checkNothingLeft(t, cfg.StateDir)
	compareHost(t, before, snapshotHost(t))
}

// ipamEnv is one real-node lab with pod IPAM.
type ipamEnv struct {
	t     *testing.T
	r     *lab.Ready
	cs    kubernetes.Interface
	dyn   dynamic.Interface
	state string // the lab's state dir
}

func newIPAMEnv(t *testing.T, r *lab.Ready, state string) *ipamEnv {
	rc, err := kube.RESTConfig(r.Kubeconfig, 20, 40)
	if err != nil {
		t.Fatal(err)
	}
	return &ipamEnv{t: t, r: r, cs: kubernetes.NewForConfigOrDie(rc), dyn: dynamic.NewForConfigOrDie(rc), state: state}
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

// startPods runs one echo pod (the demo's image and spec) on each node
// and returns them Ready.
func (e *ipamEnv) startPods(nodes []string) []corev1.Pod {
	e.t.Helper()
	tmpl, err := e.cs.CoreV1().Pods(lab.DemoNamespace).Get(context.Background(), "echo-1", metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("the demo pod to copy: %v", err)
	}
	for _, n := range nodes {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ipam-" + n, Namespace: "default", Labels: map[string]string{"test": "ipam"}},
			Spec: *tmpl.Spec.DeepCopy()}
		p.Spec.NodeName = n
		if _, err := e.cs.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			e.t.Fatalf("pod on %s: %v", n, err)
		}
	}
	waitPodsReady(e.t, e.cs, "default", len(nodes), 2*time.Minute)
	pods, err := e.cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "test=ipam"})
	if err != nil {
		e.t.Fatal(err)
	}
	return pods.Items
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

// stored reads node's ipamd store: pod → addresses.
func (e *ipamEnv) stored(node string) map[string][]string {
	e.t.Helper()
	all, err := ipamd.ReadStore(filepath.Join(e.nodeDisk(node, "/var/lib/mooring"), "ipam"))
	if err != nil {
		e.t.Fatalf("%s's store: %v", node, err)
	}
	out := map[string][]string{}
	for _, a := range all {
		k := a.Namespace + "/" + a.Pod
		for _, ip := range a.IPs {
			out[k] = append(out[k], ip.Address.Addr().String())
		}
		slices.Sort(out[k])
	}
	return out
}

// blocks are node's blocks as the controller recorded them.
func (e *ipamEnv) blocks(node string) []netip.Prefix {
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
		out = append(out, netip.MustParsePrefix(b.CIDR))
	}
	return out
}

// storesMatch says what differs between each node's store and its live
// pods ("" when nothing): the same pods with the same two addresses, each
// inside one of the node's blocks, no address twice in the cluster.
func (e *ipamEnv) storesMatch() string {
	var bad []string
	seen := map[string]string{}
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		live, store, blocks := e.livePods(n), e.stored(n), e.blocks(n)
		for pod, ips := range live {
			if !slices.Equal(store[pod], ips) || len(ips) != 2 {
				bad = append(bad, fmt.Sprintf("%s %s: status %v, store %v", n, pod, ips, store[pod]))
			}
		}
		for pod, ips := range store {
			if _, ok := live[pod]; !ok {
				bad = append(bad, fmt.Sprintf("%s: store holds %s %v, no such live pod (leaked)", n, pod, ips))
			}
			for _, ip := range ips {
				if !slices.ContainsFunc(blocks, func(b netip.Prefix) bool { return b.Contains(netip.MustParseAddr(ip)) }) {
					bad = append(bad, fmt.Sprintf("%s %s: %s outside the node's blocks %v", n, pod, ip, blocks))
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
func (e *ipamEnv) checkDelete(t *testing.T, pod string) {
	e = e.in(t)
	node := strings.TrimPrefix(pod, "ipam-")
	if _, ok := e.stored(node)["default/"+pod]; !ok {
		t.Fatalf("%s is not in %s's store before the deletion: %v", pod, node, e.stored(node))
	}
	dels := e.count("logs/containerd-"+node+".log", "TearDown network for sandbox")
	if err := e.cs.CoreV1().Pods("default").Delete(context.Background(), pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := e.cs.CoreV1().Pods("default").Get(context.Background(), pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not gone a minute after its deletion: %v", pod, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if after := e.count("logs/containerd-"+node+".log", "TearDown network for sandbox"); after <= dels {
		t.Errorf("containerd on %s logged %d network teardowns before the deletion and %d after", node, dels, after)
	}
	if ips, ok := e.stored(node)["default/"+pod]; ok {
		t.Errorf("%s's store still holds the deleted %s: %v", node, pod, ips)
	}
	e.checkStores()
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

// checkReboot kills node and restores it: the kubelet runs the node's
// pods in new sandboxes; once they are Ready again the stores hold exactly
// the live pods (the old sandboxes' addresses were given back, none is
// held twice), every pod has the addresses it had before, and pods reach
// each other again. A new sandbox is a new CNI ADD, and Kubernetes ties a
// pod's address to one sandbox; the agent gives the pod what its old
// sandbox's DEL freed (ipamd's per-pod hint), which the kubelet's order
// (stop the old sandbox, then run the new one) makes possible.
func (e *ipamEnv) checkReboot(t *testing.T, node string) {
	e = e.in(t)
	old := e.livePods(node)
	killed := time.Now()
	if err := e.r.Cluster.Kill(node); err != nil {
		t.Fatalf("kill: %v", err)
	}
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
