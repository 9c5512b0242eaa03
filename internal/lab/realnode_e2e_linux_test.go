package lab_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/realnode"
)

// requireRealNodes skips unless real nodes can run here (root, kubelet,
// containerd, images, CNI plugins, helm); under CI=true a missing piece
// fails, because `make test` builds all of them.
func requireRealNodes(t *testing.T, install string) lab.Config {
	t.Helper()
	kubebin, crds := requireLab(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := lab.Config{
		Nodes: 3, KubeBin: kubebin, CRDDir: crds, Self: self, SelfEnv: []string{envSelf + "=1"}, Mooring: true,
		Runtime: lab.RuntimeContainerd, Containerd: lab.FindContainerd(), Images: lab.FindImages(""),
		Runc: lab.FindRunc(), CNIPlugins: lab.FindCNIPlugins(),
		Install: install, NodeMonitorGracePeriod: lab.DefaultNodeMonitorGracePeriod, Timeout: 3 * time.Minute,
		Log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if install == lab.InstallChart {
		cfg.Helm, cfg.ChartDir = lab.FindHelm(), lab.FindChartDir("")
	}
	cfg.StateDir = filepath.Join(t.TempDir(), "lab")
	if err := cfg.Validate(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("real nodes cannot run: %v", err)
		}
		t.Skipf("real nodes cannot run: %v", err)
	}
	return cfg
}

// TestRealNodes is issue 21's lean proof on CI, one bring-up for every
// check: `lab up --runtime=containerd` boots three nodes with a real
// containerd, runc and kubelet each, which run the echo pods from the
// imported images (Mooring's controller and agents stay lab processes);
// the demo Service answers from the client; `kubectl logs` and `kubectl
// exec` work on a real pod; a killed node leaves no process, container or
// cgroup member behind and comes back with its pod after restore; and
// `lab down` leaves the host as it found it (sysctls, mounts, cgroups,
// folders).
func TestRealNodes(t *testing.T) {
	cfg := requireRealNodes(t, "")
	before := snapshotHost(t)
	r, stop := runRealLab(t, cfg)
	cs := realClient(t, r)
	t.Run("echo pods", func(t *testing.T) { waitPodsReady(t, cs, lab.DemoNamespace, 2, 2*time.Minute) })
	t.Run("kubectl logs and exec", func(t *testing.T) { checkRealLogsExec(t, cs, r, lab.DemoNamespace, "echo-1") })
	t.Run("LoadBalancer", func(t *testing.T) { checkLoadBalancer(t, r) })
	t.Run("kill and restore", func(t *testing.T) { checkRealKillRestore(t, cs, r, lab.DemoNamespace, "node-2") })
	stop()
	checkNothingLeft(t, cfg.StateDir)
	compareHost(t, before, snapshotHost(t))
}

// TestRealNodesChart is the same with `--install=chart`: the chart's
// DaemonSet and Deployment run from `make image`'s archive under their
// real securityContext (checked on the processes: user, capabilities),
// their logs hold no "forbidden"; an agent stopped with SIGSTOP is
// restarted by the kubelet on its liveness probe with never two ARP
// responders; a killed node's agent and controller come back. On CI: `make test` builds the image archive (`make image`
// for this machine's platform) with the lab's images.
func TestRealNodesChart(t *testing.T) {
	cfg := requireRealNodes(t, lab.InstallChart)
	before := snapshotHost(t)
	r, stop := runRealLab(t, cfg)
	cs := realClient(t, r)
	t.Run("chart pods Running and Ready", func(t *testing.T) { waitChartPodsReady(t, cs, 2*time.Minute) })
	t.Run("securityContext", func(t *testing.T) { checkRealSecurityContext(t) })
	t.Run("kubectl logs, no forbidden", func(t *testing.T) { checkRealLogs(t, cs) })
	t.Run("kubectl exec", func(t *testing.T) { checkRealExec(t, cs, r) })
	t.Run("LoadBalancer", func(t *testing.T) { checkLoadBalancer(t, r) })
	t.Run("wedged agent restarted by its liveness probe", func(t *testing.T) { checkWedgedAgent(t, cs, r) })
	t.Run("kill and restore", func(t *testing.T) { checkRealKillRestore(t, cs, r, lab.ChartNamespace, "node-3") })
	stop()
	checkNothingLeft(t, cfg.StateDir)
	compareHost(t, before, snapshotHost(t))
}

func realClient(t *testing.T, r *lab.Ready) kubernetes.Interface {
	t.Helper()
	rc, err := kube.RESTConfig(r.Kubeconfig, 20, 40)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(rc)
}

// runRealLab starts the lab and returns once it is ready, with a stop
// function that takes it down (also run by the test's cleanup).
func runRealLab(t *testing.T, cfg lab.Config) (*lab.Ready, func()) {
	t.Helper()
	logs := filepath.Join(t.TempDir(), "logs")
	cfg.KeepLogs = logs
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogProblems(t, logs)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	readyc := make(chan *lab.Ready, 1)
	errc := make(chan error, 1)
	go func() { errc <- lab.Run(ctx, cfg, func(r *lab.Ready) { readyc <- r }) }()
	var r *lab.Ready
	select {
	case r = <-readyc:
	case err := <-errc:
		cancel()
		t.Fatalf("lab.Run returned before ready: %v", err)
	case <-time.After(4 * time.Minute):
		cancel()
		<-errc
		t.Fatal("lab not ready after 4 minutes")
	}
	t.Logf("real-node lab (containerd, install %q) ready in %v; Service %+v", cfg.Install, r.Elapsed.Round(time.Millisecond), r.Service)
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("lab.Run: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("lab did not stop within a minute")
		}
	}
	t.Cleanup(stop)
	return r, stop
}

// waitPodsReady: at least n pods of namespace Running and Ready.
func waitPodsReady(t *testing.T, cs kubernetes.Interface, ns string, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		ready := 0
		if err == nil {
			for _, p := range pods.Items {
				if podReady(p) {
					ready++
				}
			}
		}
		if ready >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pods Ready in %s after %v, want %d: %v %s", ready, ns, limit, n, err, podSummary(pods))
		}
		time.Sleep(time.Second)
	}
}

// checkRealLogsExec reads a real container's log through the apiserver
// (the kubelet serves the file containerd writes) and runs a program in
// it with `kubectl exec` (the kubectl built with the control plane): the
// echo image holds only /echo, and a second echo server inside the pod
// fails on the port the first one holds, which only happens inside the
// pod's network namespace.
func checkRealLogsExec(t *testing.T, cs kubernetes.Interface, r *lab.Ready, ns, pod string) {
	b, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil || !strings.Contains(string(b), "echo server listening") {
		t.Errorf("logs of %s: %v: %q", pod, err, b)
	}
	if r.KubectlDir == "" {
		t.Fatal("no kubectl in the kubebin folder")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(r.KubectlDir, "kubectl"), "--kubeconfig", r.Kubeconfig,
		"-n", ns, "exec", pod, "--", "/echo").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "address already in use") {
		t.Errorf("kubectl exec %s -- /echo: %v: %s (want the port taken by the pod's own server)", pod, err, out)
	}
}

// hostSnapshot is the host-wide state a kubelet and containerd could
// change.
type hostSnapshot struct {
	sysctls map[string]string
	mounts  []string // host mount namespace: mount point + fstype
	cgroups []string // first-level cgroups named mooring-lab-*
	dirs    map[string]bool
	record  bool // realnode.HostFile exists
	// holders are the PIDs of the labs the record names.
	holders []int
}

func snapshotHost(t *testing.T) hostSnapshot {
	t.Helper()
	s := hostSnapshot{dirs: map[string]bool{}}
	var err error
	if s.sysctls, err = realnode.ReadSysctls(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/1/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if i := slices.Index(fl, "-"); i > 0 && i+1 < len(fl) {
			s.mounts = append(s.mounts, fl[4]+" "+fl[i+1])
		}
	}
	f.Close()
	slices.Sort(s.mounts)
	m, _ := filepath.Glob(filepath.Join(realnode.CgroupMountRoot, "*", "mooring-lab-*"))
	s.cgroups = m
	for _, d := range append(realnode.MountPoints(), "/run/nri", "/var/run/nri", "/run/netns", "/var/lib/containerd", "/etc/containerd") {
		_, err := os.Stat(d)
		s.dirs[d] = err == nil
	}
	if b, err := os.ReadFile(realnode.HostFile); err == nil {
		s.record = true
		var rec struct {
			Holders map[string]int `json:"holders"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatalf("%s: %v", realnode.HostFile, err)
		}
		s.holders = slices.Sorted(maps.Values(rec.Holders))
	}
	return s
}

// compareHost: what the lab changed on the host is back as it was.
// Mounts of other labs on this machine (other developers', other test
// packages') may come and go meanwhile: only those a real node makes
// (overlay, nsfs, the node's bind targets, cgroups) count.
func compareHost(t *testing.T, before, after hostSnapshot) {
	t.Helper()
	if before.record {
		// Another lab with real nodes held the host when this test
		// started: the values it set stay (or go) with it.
		t.Logf("another lab held %s when the test started: sysctls and mount points not compared", realnode.HostFile)
		before.sysctls, before.dirs, before.record = after.sysctls, after.dirs, after.record
	}
	if after.record && !before.record {
		if slices.Contains(after.holders, os.Getpid()) {
			t.Errorf("%s still names this test's lab (PID %d) after it went down: %v", realnode.HostFile, os.Getpid(), after.holders)
		}
		// Another lab with real nodes (another test process on this
		// machine) came while this one ran: it holds the values now.
		t.Logf("labs %v took %s while the test ran: sysctls and mount points not compared", after.holders, realnode.HostFile)
		before.sysctls, before.dirs, before.record = after.sysctls, after.dirs, after.record
	}
	if !maps.Equal(before.sysctls, after.sysctls) {
		t.Errorf("sysctls changed: before %v, after %v", before.sysctls, after.sysctls)
	}
	if !maps.Equal(before.dirs, after.dirs) {
		t.Errorf("mount-point folders changed: before %v, after %v", before.dirs, after.dirs)
	}
	if before.record != after.record {
		t.Errorf("%s: existed before %v, after %v", realnode.HostFile, before.record, after.record)
	}
	mine := func(m string) bool {
		for _, p := range append(realnode.MountPoints(), "/run/netns") {
			if strings.HasPrefix(m, p+" ") || strings.HasPrefix(m, p+"/") {
				return true
			}
		}
		return strings.HasSuffix(m, " overlay") || strings.HasSuffix(m, " nsfs") || strings.Contains(m, "mooring-lab")
	}
	for _, m := range after.mounts {
		if mine(m) && !slices.Contains(before.mounts, m) {
			t.Errorf("mount left on the host: %s", m)
		}
	}
	for _, c := range after.cgroups {
		if !slices.Contains(before.cgroups, c) && strings.Contains(c, fmt.Sprintf("mooring-lab-%d", os.Getpid())) {
			t.Errorf("cgroup left on the host: %s", c)
		}
	}
}

// waitChartPodsReady: every pod of the chart Running, Ready, its
// containers started from the imported image.
func waitChartPodsReady(t *testing.T, cs kubernetes.Interface, limit time.Duration) []corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		pods, err := cs.CoreV1().Pods(lab.ChartNamespace).List(context.Background(), metav1.ListOptions{})
		var bad []string
		if err != nil {
			bad = append(bad, err.Error())
		} else {
			for _, p := range pods.Items {
				if p.Status.Phase != corev1.PodRunning || !podReady(p) {
					bad = append(bad, fmt.Sprintf("%s on %s: %s ready=%v", p.Name, p.Spec.NodeName, p.Status.Phase, podReady(p)))
				}
				for _, c := range p.Spec.Containers {
					if !strings.HasPrefix(c.Image, lab.MooringRepository+":") {
						bad = append(bad, fmt.Sprintf("%s runs %s", p.Name, c.Image))
					}
				}
			}
			if len(pods.Items) < 5 {
				bad = append(bad, fmt.Sprintf("%d pods, want 2 controllers and 3 agents", len(pods.Items)))
			}
		}
		if len(bad) == 0 {
			return pods.Items
		}
		if time.Now().After(deadline) {
			t.Fatalf("chart pods not all Running and Ready after %v: %s", limit, strings.Join(bad, "; "))
		}
		time.Sleep(time.Second)
	}
}

// checkRealSecurityContext reads the containers' processes on the host:
// the controllers run as 65532 with no capability, the agents as root
// with exactly NET_ADMIN and NET_RAW (the chart's securityContext, applied
// by runc).
func checkRealSecurityContext(t *testing.T) {
	procs := mooringProcesses(t)
	var ctl, agents int
	for _, p := range procs {
		switch p.role {
		case "controller":
			ctl++
			if p.uid != "65532" || p.capEff != "0000000000000000" {
				t.Errorf("controller process %d: uid %s, CapEff %s; want 65532 and none", p.pid, p.uid, p.capEff)
			}
		case "agent":
			agents++
			// CAP_NET_ADMIN (12) and CAP_NET_RAW (13).
			if p.uid != "0" || p.capEff != "0000000000003000" {
				t.Errorf("agent process %d: uid %s, CapEff %s; want 0 and NET_ADMIN+NET_RAW (3000)", p.pid, p.uid, p.capEff)
			}
		}
	}
	if ctl < 2 || agents < 3 {
		t.Errorf("found %d controller and %d agent processes, want 2 and 3", ctl, agents)
	}
}

type mooringProc struct {
	pid               int
	role, uid, capEff string
}

// mooringProcesses finds the processes running /mooring controller|agent
// in this lab's cgroups (the chart's containers).
func mooringProcesses(t *testing.T) []mooringProc {
	t.Helper()
	pids, err := realnode.CgroupPIDs(fmt.Sprintf("/mooring-lab-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	var out []mooringProc
	for _, pid := range pids {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(string(cmd), "\x00")
		if len(args) < 2 || args[0] != "/mooring" {
			continue
		}
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		p := mooringProc{pid: pid, role: args[1]}
		for _, l := range strings.Split(string(st), "\n") {
			if f := strings.Fields(l); len(f) >= 2 {
				switch f[0] {
				case "Uid:":
					p.uid = f[1]
				case "CapEff:":
					p.capEff = f[1]
				}
			}
		}
		out = append(out, p)
	}
	return out
}

// checkRealLogs reads every chart container's log through the apiserver
// (the kubelet serves it from the file containerd writes), and finds no
// authorization failure.
func checkRealLogs(t *testing.T, cs kubernetes.Interface) {
	pods, err := cs.CoreV1().Pods(lab.ChartNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			b, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(context.Background())
			if err != nil {
				t.Errorf("logs of %s/%s: %v", p.Name, c.Name, err)
				continue
			}
			if len(b) == 0 {
				t.Errorf("logs of %s/%s are empty", p.Name, c.Name)
			}
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(strings.ToLower(l), "forbidden") {
					t.Errorf("%s/%s: %s", p.Name, c.Name, l)
				}
			}
		}
	}
}

// checkRealExec runs `kubectl exec` (the kubectl built with the control
// plane) in an agent and a controller: `/mooring version`.
func checkRealExec(t *testing.T, cs kubernetes.Interface, r *lab.Ready) {
	if r.KubectlDir == "" {
		t.Fatal("no kubectl in the kubebin folder")
	}
	pods, err := cs.CoreV1().Pods(lab.ChartNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("pods: %v", err)
	}
	for _, p := range pods.Items[:2] {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, filepath.Join(r.KubectlDir, "kubectl"), "--kubeconfig", r.Kubeconfig,
			"-n", p.Namespace, "exec", p.Name, "--", "/mooring", "version").CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(out), "mooring") {
			t.Errorf("kubectl exec %s -- /mooring version: %v: %s", p.Name, err, out)
		}
	}
}

// checkRealKillRestore kills node and restores it: the kill leaves
// nothing of the node running (processes in its network namespace,
// containers in its cgroup), the restore reboots it and its kubelet runs
// every pod bound to it again. With the chart that is the node's agent and
// whichever controller replica the scheduler put there (the Deployment has
// no anti-affinity to node-3), so every pod on the node counts, and a pod
// counts only once its containers started after the kill: a Ready
// condition left over from before the kill proves nothing.
func checkRealKillRestore(t *testing.T, cs kubernetes.Interface, r *lab.Ready, ns, node string) {
	parent := fmt.Sprintf("/mooring-lab-%d/%s", os.Getpid(), node)
	old := containerCgroups(t, parent)
	if len(old) == 0 {
		t.Errorf("no container cgroups below %s before the kill", parent)
	}
	killed := time.Now()
	if err := r.Cluster.Kill(node); err != nil {
		t.Fatalf("kill: %v", err)
	}
	pids, err := realnode.CgroupPIDs(parent)
	if err != nil || len(pids) > 0 {
		t.Errorf("processes left in %s's cgroup after the kill: %v (%v)", node, pids, err)
	}
	if err := r.Cluster.Restore(node); err != nil {
		t.Fatalf("restore: %v", err)
	}
	// A rebooted machine has no cgroups of its old containers: left
	// there, each costs the kubelet's cAdvisor 3.1 s of retries at start
	// before it syncs any pod.
	var stale []string
	for _, d := range old {
		if _, err := os.Stat(d); err == nil {
			stale = append(stale, d)
		}
	}
	if len(stale) > 0 {
		t.Errorf("cgroups of %s's killed containers still there after the restore: %v", node, stale)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := cs.CoreV1().Pods(ns).List(context.Background(),
			metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err == nil && len(pods.Items) > 0 && !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
			return !restartedSince(p, killed)
		}) {
			for _, p := range pods.Items {
				t.Logf("%s's pod %s Ready again after the reboot (restarts %d)", node, p.Name, p.Status.ContainerStatuses[0].RestartCount)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's pods not all Ready with containers started after the kill, 2 min after restore: %v %v", node, err, podSummary(pods))
		}
		time.Sleep(time.Second)
	}
}

// containerCgroups are the cgroup folders of the containers below parent,
// in every hierarchy (named by their 64-hex container ID).
func containerCgroups(t *testing.T, parent string) []string {
	t.Helper()
	roots, err := filepath.Glob(filepath.Join(realnode.CgroupMountRoot, "*", parent))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && containerID.MatchString(d.Name()) {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

var containerID = regexp.MustCompile(`^[0-9a-f]{64}$`)

// restartedSince: p is Ready and each of its containers runs, started at
// or after t (container start times have whole seconds).
func restartedSince(p corev1.Pod, t time.Time) bool {
	if !podReady(p) || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil || c.State.Running.StartedAt.Time.Before(t.Truncate(time.Second)) {
			return false
		}
	}
	return true
}

func podSummary(pods *corev1.PodList) string {
	if pods == nil {
		return ""
	}
	var s []string
	for _, p := range pods.Items {
		s = append(s, fmt.Sprintf("%s %s ready=%v", p.Name, p.Status.Phase, podReady(p)))
	}
	return strings.Join(s, ", ")
}
