package gather_test

import (
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/doctor"
	"github.com/mooringlb/mooring/internal/doctor/gather"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/netlab"
)

const envSelf = "MOORING_DOCTOR_TEST_SELF"

func TestMain(m *testing.M) { labtest.Main(m, envSelf) }

// TestDoctorInLab: the real lab with Mooring's controller and agents is
// clean to doctor; a pool off the nodes' segment and a stale local copy of
// the LoadBalancer address on node-2 (lo, arp_ignore=0, as a leftover
// kube-ipvs0 would be) are each found, the latter from the real agent's
// report.
func TestDoctorInLab(t *testing.T) {
	ctx, r := labtest.Start(t, envSelf, labtest.Options{Mooring: true, LogLevel: slog.LevelWarn})
	rc, err := clientcmd.BuildConfigFromFlags("", r.Kubeconfig)
	must(t, err)
	cs, err := kubernetes.NewForConfig(rc)
	must(t, err)
	dc, err := dynamic.NewForConfig(rc)
	must(t, err)
	cl, err := client.New(rc, client.Options{Scheme: kube.Scheme()})
	must(t, err)
	run := func() []doctor.Finding {
		in, err := gather.Gather(ctx, cs, dc, gather.Options{Reader: cl})
		must(t, err)
		return problems(doctor.Run(in))
	}
	// Wait until an agent announces the demo Service (the lab's ready line
	// says it is reachable; the annotation follows within a second or so).
	var lb netip.Addr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		svc, err := cs.CoreV1().Services(r.Service.Namespace).Get(ctx, r.Service.Name, metav1.GetOptions{})
		must(t, err)
		ann, err := gather.Announced(ctx, cl)
		must(t, err)
		if len(svc.Status.LoadBalancer.Ingress) > 0 {
			if a := netip.MustParseAddr(svc.Status.LoadBalancer.Ingress[0].IP); ann[a] != "" {
				lb = a
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no agent announced the demo Service")
		}
	}
	if p := run(); len(p) != 0 {
		t.Fatalf("clean lab: %s", dump(p))
	}

	// A pool off the segment.
	far := &unstructured.Unstructured{Object: map[string]any{"apiVersion": mooringv1.GroupVersion.String(), "kind": "LoadBalancerIPPool",
		"metadata": map[string]any{"name": "far"}, "spec": map[string]any{"blocks": []any{map[string]any{"cidr": "198.51.100.0/28"}}}}}
	_, err = dc.Resource(poolGVR).Create(ctx, far, metav1.CreateOptions{})
	must(t, err)
	if p := run(); len(p) != 1 || p[0].Check != "pool-subnet" || !strings.Contains(p[0].Message, "198.51.100.0-198.51.100.15") {
		t.Fatalf("off-segment pool: %s", dump(p))
	}
	must(t, dc.Resource(poolGVR).Delete(ctx, "far", metav1.DeleteOptions{}))

	// An agent on an old configuration: node-2's agent stopped (SIGSTOP),
	// then the policy changed (a serviceSelector every Service matches, so
	// nothing else changes). node-1's agent reports the new generation,
	// node-2's the old one: doctor names node-2; after SIGCONT it is clean.
	pid := agentPID(t, r.Cluster.Host("node-2"), "node-2")
	must(t, unix.Kill(pid, unix.SIGSTOP))
	cont := sync.OnceFunc(func() { _ = unix.Kill(pid, unix.SIGCONT) })
	defer cont()
	pols, err := dc.Resource(policyGVR).List(ctx, metav1.ListOptions{})
	must(t, err)
	if len(pols.Items) == 0 {
		t.Fatal("the lab has no L2AnnouncementPolicy")
	}
	pol := pols.Items[0].GetName()
	_, err = dc.Resource(policyGVR).Patch(ctx, pol, types.MergePatchType,
		[]byte(`{"spec":{"serviceSelector":{"matchExpressions":[{"key":"lab.mooring.dev/none","operator":"DoesNotExist"}]}}}`), metav1.PatchOptions{})
	must(t, err)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		p := run()
		if len(p) == 1 && p[0].Check == "agent-config" && p[0].Node == "node-2" && strings.Contains(p[0].Message, "L2AnnouncementPolicy "+pol+" is at generation 1, the cluster's at 2") {
			t.Logf("stopped agent: %s", dump(p))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an agent on an old configuration: %s", dump(p))
		}
	}
	cont()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		p := run()
		if len(p) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SIGCONT: %s", dump(p))
		}
	}

	// A stale local copy of the LoadBalancer address on node-2.
	h := r.Cluster.Host("node-2")
	must(t, h.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/conf/all/arp_ignore", []byte("0"), 0)
	}))
	must(t, h.AddAddr("lo", netip.PrefixFrom(lb, 32)))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		p := run()
		if len(p) > 0 {
			if p[0].Check != "stale-local-address" || p[0].Node != "node-2" || !strings.Contains(p[0].Message, lb.String()) {
				t.Fatalf("stale address: %s", dump(p))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stale local address on node-2 was not found within 60 s")
		}
	}
}

var (
	poolGVR   = schema.GroupVersionResource{Group: mooringv1.GroupVersion.Group, Version: mooringv1.GroupVersion.Version, Resource: "loadbalancerippools"}
	policyGVR = schema.GroupVersionResource{Group: mooringv1.GroupVersion.Group, Version: mooringv1.GroupVersion.Version, Resource: "l2announcementpolicies"}
)

// agentPID finds the lab's `mooring agent --node-name=node` process in h's
// network namespace (other labs on the machine may have a node of that name).
func agentPID(t *testing.T, h *netlab.Host, node string) int {
	t.Helper()
	var want unix.Stat_t
	must(t, unix.Fstat(int(h.NS()), &want))
	ents, err := os.ReadDir("/proc")
	must(t, err)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if !slices.Contains(args, "agent") || !slices.Contains(args, "--node-name="+node) {
			continue
		}
		var got unix.Stat_t
		if unix.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &got) == nil && got.Ino == want.Ino && got.Dev == want.Dev {
			return pid
		}
	}
	t.Fatalf("no agent process for %s in its namespace", node)
	return 0
}
