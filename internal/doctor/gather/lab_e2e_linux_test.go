package gather_test

import (
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/doctor"
	"github.com/mooringlb/mooring/internal/doctor/gather"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab/labtest"
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

var poolGVR = schema.GroupVersionResource{Group: mooringv1.GroupVersion.Group, Version: mooringv1.GroupVersion.Version, Resource: "loadbalancerippools"}
