package lab_test

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/kubelet"
)

// TestLabChartInstall is issue 10's "the lab runs what a user installs":
// `lab up --install=chart` renders charts/mooring, applies it, and the
// nodes run its controller Deployment and agent DaemonSet with the lab's
// binary, as their pods say (args, env, downward API, the gossip key
// Secret, a pod-bound ServiceAccount token read by in-cluster config,
// readiness probes). The demo Service then answers from the client, a hard
// failover of the announcing node works as in the default lab, and the
// pods' logs hold no authorization failure: the chart's RBAC (and its
// own-node admission policy) is all they need. Nothing of it outlives the
// lab.
func TestLabChartInstall(t *testing.T) {
	kubebin, crds := requireLab(t)
	helm, chart := lab.FindHelm(), lab.FindChartDir("")
	if helm == "" || chart == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("--install=chart needs helm (%q; `make helm`, or set %s) and charts/mooring (%q)", helm, lab.EnvHelm, chart)
		}
		t.Skipf("--install=chart needs helm (%q; `make helm`, or set %s) and charts/mooring (%q)", helm, lab.EnvHelm, chart)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "lab")
	logs := filepath.Join(t.TempDir(), "logs")
	defer func() {
		if t.Failed() {
			dumpLogProblems(t, logs)
		}
	}()
	cfg := lab.Config{
		Nodes: 3, StateDir: dir, KubeBin: kubebin, CRDDir: crds,
		Self: self, SelfEnv: []string{envSelf + "=1"}, Mooring: true,
		Install: lab.InstallChart, Helm: helm, ChartDir: chart,
		NodeMonitorGracePeriod: lab.DefaultNodeMonitorGracePeriod, Timeout: 90 * time.Second,
		KeepLogs: logs,
		Log:      slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
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
	case <-time.After(2 * time.Minute):
		t.Fatal("lab not ready after 2 minutes")
	}
	t.Logf("lab (chart) ready in %v; Service %+v", r.Elapsed.Round(time.Millisecond), r.Service)
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

	t.Run("chart pods", func(t *testing.T) { checkChartPods(t, cs) })
	t.Run("agents write their own L2Announcer", func(t *testing.T) { checkAnnouncers(t, dynamic.NewForConfigOrDie(rc)) })
	t.Run("LoadBalancer", func(t *testing.T) { checkLoadBalancer(t, r) })
	fs := []*foreign{startForeign(t, self, dir, "node-1"), startForeign(t, self, dir, "node-2")}
	restarted := 0
	t.Run("failover", func(t *testing.T) { checkFailover(t, r, fs, &restarted) })
	t.Run("chart pods after failover", func(t *testing.T) { checkChartPods(t, cs) })
	t.Run("deleted agent stops gracefully", func(t *testing.T) { checkGracefulDelete(t, cs, filepath.Join(dir, "logs")) })
	t.Run("no forbidden", func(t *testing.T) { checkNoForbidden(t, filepath.Join(dir, "logs")) })

	// The pods' supervisors and containers go with the lab.
	cancel()
	select {
	case err := <-errc:
		stopped = true
		if err != nil {
			t.Errorf("lab.Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("lab did not stop within 30s")
	}
	checkNothingLeft(t, dir)
}

// checkChartPods: every pod of the chart is Running and Ready within a
// minute: one agent per node in the node's network (its pod IP is the
// node's), two controllers with pod IPs of their own, each run from the
// lab's marker image.
func checkChartPods(t *testing.T, cs kubernetes.Interface) {
	var pods []corev1.Pod
	deadline := time.Now().Add(time.Minute)
	for {
		list, err := cs.CoreV1().Pods(lab.ChartNamespace).List(context.Background(), metav1.ListOptions{})
		if err == nil {
			pods = list.Items
		}
		agents, controllers, notReady := 0, 0, []string{}
		for _, p := range pods {
			if !podReady(p) {
				notReady = append(notReady, p.Name)
				continue
			}
			switch p.Labels["app.kubernetes.io/component"] {
			case "agent":
				agents++
			case "controller":
				controllers++
			}
		}
		if agents == 3 && controllers == 2 && len(notReady) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chart pods: %d agents and %d controllers ready, not ready %v (want 3 and 2)", agents, controllers, notReady)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, p := range pods {
		if !strings.HasPrefix(p.Spec.Containers[0].Image, kubelet.MooringImage+":") {
			t.Errorf("pod %s image %q, want the lab's marker %s", p.Name, p.Spec.Containers[0].Image, kubelet.MooringImage)
		}
		ip := netip.MustParseAddr(p.Status.PodIP)
		inPods := lab.ClusterCIDR4.Contains(ip)
		if p.Spec.HostNetwork == inPods || (p.Spec.HostNetwork && p.Status.PodIP != p.Status.HostIP) {
			t.Errorf("pod %s (hostNetwork %v) has IP %s on host %s", p.Name, p.Spec.HostNetwork, ip, p.Status.HostIP)
		}
	}
}

func podReady(p corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	return kube.PodReady(&p)
}

// checkAnnouncers: each node's agent wrote its L2Announcer, which the
// chart's admission policy allows only with a pod-bound token naming that
// node.
func checkAnnouncers(t *testing.T, dyn dynamic.Interface) {
	gvr := mooringv1.GroupVersion.WithResource("l2announcers")
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := dyn.Resource(gvr).List(context.Background(), metav1.ListOptions{})
		var names []string
		if err == nil {
			for _, o := range list.Items {
				names = append(names, o.GetName())
			}
		}
		if len(names) == 3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("L2Announcers %v (%v), want one per node", names, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkNoForbidden reads every chart pod's log: each ran, and none was
// refused by the apiserver (but for the agents' designed pod IPAM probe).
func checkNoForbidden(t *testing.T, logs string) {
	files, err := filepath.Glob(filepath.Join(logs, "pod-"+lab.ChartNamespace+"-*.log"))
	if err != nil || len(files) < 5 {
		t.Fatalf("chart pod logs %v (%v), want at least 5", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			t.Errorf("%s is empty: the pod's process never ran", filepath.Base(f))
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(strings.ToLower(l), "forbidden") {
				t.Errorf("%s: %s", filepath.Base(f), l)
			}
		}
	}
}

// checkGracefulDelete deletes node-3's agent pod: the stand-in sends it
// SIGTERM, so it leaves gossip ("gossip stopped") before it goes, and the
// DaemonSet's new pod runs Ready.
func checkGracefulDelete(t *testing.T, cs kubernetes.Interface, logs string) {
	ctx := context.Background()
	list, err := cs.CoreV1().Pods(lab.ChartNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=node-3"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("node-3's agent pods: %d (%v), want 1", len(list.Items), err)
	}
	old := list.Items[0].Name
	if err := cs.CoreV1().Pods(lab.ChartNamespace).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := cs.CoreV1().Pods(lab.ChartNamespace).Get(ctx, old, metav1.GetOptions{})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent pod %s not gone a minute after its deletion", old)
		}
		time.Sleep(200 * time.Millisecond)
	}
	b, err := os.ReadFile(filepath.Join(logs, "pod-"+lab.ChartNamespace+"-"+old+".log"))
	if err != nil || !strings.Contains(string(b), "gossip stopped") {
		t.Errorf("the deleted agent %s did not stop gracefully (no \"gossip stopped\" in its log; %v)", old, err)
	}
	checkChartPods(t, cs)
}
