// Package podipame2e holds the lab end-to-end tests of pod IPAM: one lab
// per mode, pods created with kubectl and set up by the kubelet stand-in
// through libcni with the ptp or bridge, loopback and mooring-ipam plugins.
package podipame2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
)

// envSelf makes this test binary the mooring executable the lab runs.
const envSelf = "MOORING_PODIPAM_E2E_SELF"

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard()) // the tests' client logs nothing
	labtest.Main(m, envSelf)
}

// env is a running lab with pod IPAM and its clients.
type env struct {
	t   *testing.T
	ctx context.Context
	r   *lab.Ready
	cs  kubernetes.Interface
	c   client.Client
}

func start(t *testing.T, mode, network string) *env {
	t.Helper()
	ctx, r := labtest.Start(t, envSelf, labtest.Options{Nodes: 3, Mooring: true, PodIPAM: mode, PodNetwork: network})
	rc, err := kube.RESTConfig(r.Kubeconfig, 100, 200)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(rc, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if r.KubectlDir == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no kubectl in the kubebin folder: run make kubebin")
		}
		t.Skip("no kubectl in the kubebin folder: run make kubebin")
	}
	return &env{t: t, ctx: ctx, r: r, cs: cs, c: c}
}

// kubectl runs the lab's kubectl with stdin.
func (e *env) kubectl(stdin string, args ...string) string {
	e.t.Helper()
	cmd := exec.Command(filepath.Join(e.r.KubectlDir, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.r.Kubeconfig)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		e.t.Fatalf("kubectl %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

// podSpec is one pod to create: name, namespace, optional node and pool
// annotation. Label app=ipam-e2e selects them all.
type podSpec struct{ name, ns, node, pool string }

// apply creates the namespace-less objects' YAML for the pods with kubectl.
func (e *env) applyPods(pods []podSpec) {
	e.t.Helper()
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: %s\n  labels: {app: ipam-e2e}\n", p.name, p.ns)
		if p.pool != "" {
			fmt.Fprintf(&b, "  annotations: {%s: %s}\n", mooringv1.AnnotationPodIPPool, p.pool)
		}
		b.WriteString("spec:\n")
		if p.node != "" {
			fmt.Fprintf(&b, "  nodeName: %s\n", p.node)
		}
		fmt.Fprintf(&b, "  containers: [{name: echo, image: %s, ports: [{containerPort: %d}]}]\n", lab.EchoImage, lab.EchoPort)
	}
	e.kubectl(b.String(), "apply", "-f", "-")
}

// service creates a dual-stack ClusterIP Service in ns over the test's pods.
func (e *env) service(ns, name string) *corev1.Service {
	e.t.Helper()
	e.kubectl(fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %s, namespace: %s}
spec:
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [IPv4, IPv6]
  selector: {app: ipam-e2e}
  ports: [{port: 80, targetPort: %d}]
`, name, ns, lab.EchoPort), "apply", "-f", "-")
	svc, err := e.cs.CoreV1().Services(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return svc
}

// ready waits until every named pod is Ready and returns them.
func (e *env) ready(pods []podSpec, limit time.Duration) []corev1.Pod {
	e.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var out []corev1.Pod
		var waiting []string
		for _, s := range pods {
			p, err := e.cs.CoreV1().Pods(s.ns).Get(e.ctx, s.name, metav1.GetOptions{})
			if err == nil && podReady(p) {
				out = append(out, *p)
			} else {
				waiting = append(waiting, s.ns+"/"+s.name)
			}
		}
		if len(waiting) == 0 {
			return out
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("pods not Ready after %v: %v", limit, waiting)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// gone waits until the pods' objects are deleted (the kubelet stand-in
// confirms a deletion after the pod's CNI DEL).
func (e *env) gone(pods []podSpec, limit time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var left []string
		for _, s := range pods {
			if _, err := e.cs.CoreV1().Pods(s.ns).Get(e.ctx, s.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, s.ns+"/"+s.name)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("pods still there %v after their deletion: %v", limit, left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func podReady(p *corev1.Pod) bool {
	return kube.PodReady(p) && len(p.Status.PodIPs) > 0
}

// podIPs returns a pod's addresses, IPv4 first.
func podIPs(p *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// blocks returns the blocks of pool held by node according to its
// PodIPAMNode.
func (e *env) blocks(node, pool string) []netip.Prefix {
	e.t.Helper()
	var rec mooringv1.PodIPAMNode
	if err := e.c.Get(e.ctx, client.ObjectKey{Name: node}, &rec); err != nil {
		e.t.Fatalf("PodIPAMNode %s: %v", node, err)
	}
	var out []netip.Prefix
	for _, b := range rec.Status.Blocks {
		if b.Pool == pool {
			out = append(out, netip.MustParsePrefix(b.CIDR))
		}
	}
	return out
}

// checkAddresses: every pod has one IPv4 and one IPv6 address, each inside
// a block its node holds (blocksOf(node)), and no address is used twice.
func (e *env) checkAddresses(pods []corev1.Pod, blocksOf func(node string) []netip.Prefix) {
	e.t.Helper()
	seen := map[netip.Addr]string{}
	for _, p := range pods {
		ips := podIPs(&p)
		if len(ips) != 2 || !ips[0].Is4() || !ips[1].Is6() {
			e.t.Errorf("pod %s/%s: addresses %v, want one IPv4 and one IPv6", p.Namespace, p.Name, ips)
			continue
		}
		bl := blocksOf(p.Spec.NodeName)
		for _, a := range ips {
			if !slices.ContainsFunc(bl, func(b netip.Prefix) bool { return b.Contains(a) }) {
				e.t.Errorf("pod %s/%s on %s: %s is in none of the node's blocks %v", p.Namespace, p.Name, p.Spec.NodeName, a, bl)
			}
			if other, dup := seen[a]; dup {
				e.t.Errorf("%s is held by %s and %s/%s", a, other, p.Namespace, p.Name)
			}
			seen[a] = p.Namespace + "/" + p.Name
		}
	}
}

// checkReach: from a pod on each node, the first pod found on the next
// node answers on both families, and the Service answers on both of its
// ClusterIPs.
func (e *env) checkReach(pods []corev1.Pod, svc *corev1.Service) {
	e.t.Helper()
	byNode := map[string]corev1.Pod{}
	var nodes []string
	for _, p := range pods {
		if _, ok := byNode[p.Spec.NodeName]; !ok {
			byNode[p.Spec.NodeName] = p
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	slices.Sort(nodes)
	if len(nodes) < 2 {
		e.t.Fatalf("the pods run on %v: need two nodes or more", nodes)
	}
	for i, n := range nodes {
		from, to := byNode[n], byNode[nodes[(i+1)%len(nodes)]]
		for _, a := range podIPs(&to) {
			url := netip.AddrPortFrom(a, lab.EchoPort)
			body, err := labtest.GetFromPod(pid(e.t, &from), url, 3*time.Second)
			if err != nil || !strings.Contains(body, "pod="+to.Namespace+"/"+to.Name) {
				e.t.Errorf("%s (%s) → %s (%s) at %s: %q, %v", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName, url, body, err)
			}
		}
		if svc == nil {
			continue
		}
		for _, ip := range svc.Spec.ClusterIPs {
			url := netip.AddrPortFrom(netip.MustParseAddr(ip), 80)
			// The EndpointSlice may lag the pods' readiness by a moment.
			var body string
			var err error
			for try := 0; try < 30; try++ {
				if body, err = labtest.GetFromPod(pid(e.t, &from), url, 3*time.Second); err == nil && strings.Contains(body, "pod=") {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if err != nil || !strings.Contains(body, "pod=") {
				e.t.Errorf("%s (%s) → Service %s at %s: %q, %v", from.Name, from.Spec.NodeName, svc.Name, url, body, err)
			}
		}
	}
}

// pid is the echo process of a pod (the stand-in's container ID).
func pid(t *testing.T, p *corev1.Pod) int {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container status", p.Name)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "mooring-lab://"))
	if err != nil {
		t.Fatalf("pod %s: container ID %q", p.Name, p.Status.ContainerStatuses[0].ContainerID)
	}
	return n
}

// spread returns n pod specs named prefix-i in ns, without a node.
func spread(prefix, ns string, n int) []podSpec {
	out := make([]podSpec, n)
	for i := range out {
		out[i] = podSpec{name: fmt.Sprintf("%s-%d", prefix, i+1), ns: ns}
	}
	return out
}
