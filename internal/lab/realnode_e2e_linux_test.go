package lab_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
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
func requireRealNodes(t *testing.T) lab.Config {
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
		Install: lab.InstallChart, Helm: lab.FindHelm(), ChartDir: lab.FindChartDir(""),
		NodeMonitorGracePeriod: lab.DefaultNodeMonitorGracePeriod, Timeout: 3 * time.Minute,
		Log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
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

// TestRealNodes is issue 21's lean proof, one bring-up for every check:
// `lab up --runtime=containerd --install=chart` boots three nodes with a
// real containerd, runc and kubelet each; the chart's DaemonSet and
// Deployment run from the imported image under their real securityContext
// (checked on the processes: user, capabilities); `kubectl logs` and
// `kubectl exec` work; no log says "forbidden"; the demo Service answers
// from the client; a killed node leaves no process, container or
// cgroup member behind and comes back with its pods after restore; and
// `lab down` leaves the host as it found it (sysctls, mounts, cgroups,
// folders).
func TestRealNodes(t *testing.T) {
	cfg := requireRealNodes(t)
	before := snapshotHost(t)
	logs := filepath.Join(t.TempDir(), "logs")
	cfg.KeepLogs = logs
	defer func() {
		if t.Failed() {
			dumpLogProblems(t, logs)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	readyc := make(chan *lab.Ready, 1)
	errc := make(chan error, 1)
	go func() { errc <- lab.Run(ctx, cfg, func(r *lab.Ready) { readyc <- r }) }()
	var r *lab.Ready
	select {
	case r = <-readyc:
	case err := <-errc:
		t.Fatalf("lab.Run returned before ready: %v", err)
	case <-time.After(4 * time.Minute):
		t.Fatal("lab not ready after 4 minutes")
	}
	t.Logf("real-node lab (containerd, chart) ready in %v; Service %+v", r.Elapsed.Round(time.Millisecond), r.Service)
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-errc
		}
	}()
	rc, err := kube.RESTConfig(r.Kubeconfig, 20, 40)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(rc)
	t.Run("chart pods Running and Ready", func(t *testing.T) { waitChartPodsReady(t, cs, 2*time.Minute) })
	t.Run("securityContext", func(t *testing.T) { checkRealSecurityContext(t) })
	t.Run("kubectl logs, no forbidden", func(t *testing.T) { checkRealLogs(t, cs) })
	t.Run("kubectl exec", func(t *testing.T) { checkRealExec(t, cs, r) })
	t.Run("LoadBalancer", func(t *testing.T) { checkLoadBalancer(t, r) })
	t.Run("kill and restore", func(t *testing.T) { checkRealKillRestore(t, cs, r) })

	cancel()
	select {
	case err := <-errc:
		stopped = true
		if err != nil {
			t.Errorf("lab.Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("lab did not stop within a minute")
	}
	checkNothingLeft(t, cfg.StateDir)
	after := snapshotHost(t)
	compareHost(t, before, after)
}

// hostSnapshot is the host-wide state a kubelet and containerd could
// change.
type hostSnapshot struct {
	sysctls map[string]string
	mounts  []string // host mount namespace: mount point + fstype
	cgroups []string // first-level cgroups named mooring-lab-*
	dirs    map[string]bool
	record  bool // realnode.HostFile exists
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
	for _, d := range realnode.MountPoints() {
		_, err := os.Stat(d)
		s.dirs[d] = err == nil
	}
	_, err = os.Stat(realnode.HostFile)
	s.record = err == nil
	return s
}

// compareHost: what the lab changed on the host is back as it was.
// Mounts of other labs on this machine (other developers', other test
// packages') may come and go meanwhile: only those a real node makes
// (overlay, nsfs, the node's bind targets, cgroups) count.
func compareHost(t *testing.T, before, after hostSnapshot) {
	t.Helper()
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

// checkRealKillRestore kills node-3 (no demo pod: the Service keeps
// answering) and restores it: the kill leaves nothing of the node running
// (processes in its network namespace, containers in its cgroup), the
// restore reboots it and the kubelet runs its agent again.
func checkRealKillRestore(t *testing.T, cs kubernetes.Interface, r *lab.Ready) {
	const node = "node-3"
	if err := r.Cluster.Kill(node); err != nil {
		t.Fatalf("kill: %v", err)
	}
	pids, err := realnode.CgroupPIDs(fmt.Sprintf("/mooring-lab-%d/%s", os.Getpid(), node))
	if err != nil || len(pids) > 0 {
		t.Errorf("processes left in %s's cgroup after the kill: %v (%v)", node, pids, err)
	}
	if err := r.Cluster.Restore(node); err != nil {
		t.Fatalf("restore: %v", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := cs.CoreV1().Pods(lab.ChartNamespace).List(context.Background(),
			metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err == nil && len(pods.Items) == 1 && podReady(pods.Items[0]) && len(pods.Items[0].Status.ContainerStatuses) > 0 {
			t.Logf("%s's agent Ready again after the reboot (restarts %d)", node, pods.Items[0].Status.ContainerStatuses[0].RestartCount)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's agent not Ready again 2 min after restore: %v %v", node, err, podSummary(pods))
		}
		time.Sleep(time.Second)
	}
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
