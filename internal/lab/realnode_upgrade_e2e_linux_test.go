package lab_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/netlab"
)

// EnvUpgradeImage names a second Mooring image archive (`make image` of
// a later commit: another tag) for TestRealNodesChartUpgrade.
const envUpgradeImage = "MOORING_UPGRADE_IMAGE"

// TestRealNodesChartUpgrade upgrades a chart install on real nodes with
// `helm upgrade` to a new image while the client sends 20 req/s to the
// demo Service through its LoadBalancer address. The archive
// $MOORING_UPGRADE_IMAGE (`make image` of another commit: another tag) is
// imported into every node's containerd; `helm upgrade --install` with the
// lab's values first adopts the objects the lab applied (a release, no
// change: no pod is replaced), then `helm upgrade --reuse-values --set
// image.tag=<new>` rolls the DaemonSet and the Deployment. No request
// fails, the ARP audit never sees two responders, and every pod is
// replaced by one of the new image, Ready. About 3 minutes: behind the
// variable (docs/benchmarks.md has the figures and how to build the second
// archive).
func TestRealNodesChartUpgrade(t *testing.T) {
	archive := os.Getenv(envUpgradeImage)
	if archive == "" {
		t.Skipf("set %s to a second `make image` archive (another commit) to run the upgrade", envUpgradeImage)
	}
	cfg := requireRealNodes(t, lab.InstallChart)
	r, _ := runRealLab(t, cfg)
	cs := realClient(t, r)
	old := waitChartPodsReady(t, cs, 2*time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tag, err := r.Cluster.ImportImage(ctx, archive)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(old, func(p corev1.Pod) bool { return p.Spec.Containers[0].Image == lab.MooringRepository+":"+tag }) {
		t.Fatalf("%s has the install's tag %s: build it from another commit", archive, tag)
	}
	helm := helmRunner(t, cfg, r)
	adopt := []string{"upgrade", "--install", lab.ChartRelease, cfg.ChartDir, "--namespace", lab.ChartNamespace}
	helm(append(adopt, r.Cluster.ChartValues()...)...)
	if now := waitChartPodsReady(t, cs, time.Minute); !samePods(old, now) {
		t.Fatalf("adopting the lab's objects into a release replaced pods: before %s, after %s", podNames(old), podNames(now))
	}
	client := r.Cluster.Host(netlab.ClientName)
	addrs := serviceAddrs(t, r)
	if _, err := labtest.OneResponderEach(ctx, client, addrs); err != nil {
		t.Fatalf("before the upgrade: %v", err)
	}
	arp := startARPAudit(ctx, client, addrs)
	load := &labtest.Load{Host: client, URLs: labtest.URLs(addrs[:1]), Interval: 50 * time.Millisecond, Timeout: 3 * time.Second}
	lctx, lstop := context.WithCancel(ctx)
	load.Start(lctx)
	time.Sleep(3 * time.Second)
	start := time.Now()
	helm("upgrade", lab.ChartRelease, cfg.ChartDir, "--namespace", lab.ChartNamespace, "--reuse-values", "--set-string", "image.tag="+tag)
	pods := waitRolledOut(t, cs, old, lab.MooringRepository+":"+tag, 5*time.Minute)
	took := time.Since(start)
	time.Sleep(3 * time.Second)
	lstop()
	load.Wait()
	audit := arp.end(t)
	ok, fail, failures := load.Totals()
	t.Logf("helm upgrade to %s: %d pods replaced and Ready %v after the command started; client 20 req/s to %s: %d ok, %d failed; ARP audit: %s",
		tag, len(pods), took.Round(100*time.Millisecond), addrs[0], ok, fail, audit)
	if fail > 0 || ok < int(took.Seconds())*15 {
		t.Errorf("%d ok, %d failed during the upgrade: %v", ok, fail, failures)
	}
}

// helmRunner runs the lab's helm against the lab's cluster, its folders
// in the test's temporary directory; a failure fails the test.
func helmRunner(t *testing.T, cfg lab.Config, r *lab.Ready) func(args ...string) {
	home := t.TempDir()
	return func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, cfg.Helm, append(args, "--kubeconfig", r.Kubeconfig)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", args[0], err, out)
		}
		t.Logf("helm %s %s (%v): %s", args[0], args[1], time.Since(start).Round(100*time.Millisecond), firstLines(string(out), 3))
	}
}

func firstLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[:min(n, len(l))], " | ")
}

func samePods(a, b []corev1.Pod) bool { return podNames(a) == podNames(b) }

func podNames(ps []corev1.Pod) string {
	var n []string
	for _, p := range ps {
		n = append(n, p.Name)
	}
	slices.Sort(n)
	return strings.Join(n, " ")
}

// waitRolledOut waits until no pod of old is left and every chart pod
// runs image, Ready (two controllers, three agents).
func waitRolledOut(t *testing.T, cs kubernetes.Interface, old []corev1.Pod, image string, limit time.Duration) []corev1.Pod {
	t.Helper()
	gone := map[string]bool{}
	for _, p := range old {
		gone[string(p.UID)] = false
	}
	deadline := time.Now().Add(limit)
	for {
		pods, err := cs.CoreV1().Pods(lab.ChartNamespace).List(context.Background(), metav1.ListOptions{})
		var bad []string
		if err != nil {
			bad = append(bad, err.Error())
		} else {
			for _, p := range pods.Items {
				if _, ok := gone[string(p.UID)]; ok {
					bad = append(bad, p.Name+" not replaced yet")
				} else if p.Spec.Containers[0].Image != image || !podReady(p) || p.DeletionTimestamp != nil {
					bad = append(bad, fmt.Sprintf("%s: %s ready=%v", p.Name, p.Spec.Containers[0].Image, podReady(p)))
				}
			}
			if len(pods.Items) != len(old) {
				bad = append(bad, fmt.Sprintf("%d pods, want %d", len(pods.Items), len(old)))
			}
		}
		if len(bad) == 0 {
			for _, p := range pods.Items {
				t.Logf("%s on %s: %s, Ready", p.Name, p.Spec.NodeName, p.Spec.Containers[0].Image)
			}
			return pods.Items
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollout to %s not done after %v: %s", image, limit, strings.Join(bad, "; "))
		}
		time.Sleep(500 * time.Millisecond)
	}
}
