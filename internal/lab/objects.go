package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lab/kubelet"
)

// The demo objects `lab up` creates.
const (
	DemoNamespace = "default"
	DemoService   = "echo"
	DemoPort      = 80
	// EchoPort is the echo server's port inside each pod.
	EchoPort = 8080
	// EchoImage marks pods the kubelet stand-in runs as `mooring lab echo`;
	// it is never pulled (see docs/lab.md). It leaves other pods alone.
	EchoImage = kubelet.Image
	// demoName names the pool and the policy.
	demoName = "lab"
	// mooringNamespace holds the controller's leader-election Lease.
	mooringNamespace = "mooring-system"
	// LabelL2 marks the nodes the demo L2 policy selects: the two that run
	// the echo pods (see demoNodeLabels).
	LabelL2 = "lab.mooring.dev/l2"
)

// demoNodeLabels are node i's labels (1-based). The demo policy announces
// only from the nodes holding an echo pod, as seed 002's lab announced
// from its two workers, each with one pod: killing the announcer then also
// kills a backend, so a failover shows both phases (address moves, then
// the dead pod leaves the endpoints). Further nodes are spares.
func demoNodeLabels(i int) map[string]string {
	l := map[string]string{"node-role.kubernetes.io/worker": ""}
	if i <= 2 {
		l[LabelL2] = "true"
	}
	return l
}

var (
	crdGVR    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	poolGVR   = mooringv1.GroupVersion.WithResource("loadbalancerippools")
	policyGVR = mooringv1.GroupVersion.WithResource("l2announcementpolicies")
)

// installCRDs creates every CRD in dir and returns their names.
func installCRDs(ctx context.Context, dyn dynamic.Interface, dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(doc), "---")) == "" {
				continue
			}
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				return nil, fmt.Errorf("lab: parsing %s: %w", f, err)
			}
			if u.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if _, err := dyn.Resource(crdGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("lab: creating CRD %s from %s: %w", u.GetName(), f, err)
			}
			names = append(names, u.GetName())
		}
	}
	return names, nil
}

// crdsEstablished reports whether every named CRD is Established.
func crdsEstablished(ctx context.Context, dyn dynamic.Interface, names []string) (bool, error) {
	for _, n := range names {
		u, err := dyn.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		ok := false
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				ok = true
			}
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// ensureNamespace creates the namespace name unless it exists.
func ensureNamespace(ctx context.Context, cs kubernetes.Interface, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("lab: creating namespace %s: %w", name, err)
	}
	return nil
}

// createCore creates the built-in objects: Mooring's namespace, the echo
// Service (of Mooring's class when mooring is set) and one echo pod on each
// of the first two nodes (bound by spec.nodeName: one per node whatever a
// scheduler would do, and no wait for one).
func createCore(ctx context.Context, cs kubernetes.Interface, nodes []nodeSpec, mooring bool, pod func(name, node string) *corev1.Pod) error {
	if err := ensureNamespace(ctx, cs, mooringNamespace); err != nil {
		return err
	}
	if _, err := cs.CoreV1().Services(DemoNamespace).Create(ctx, demoService(mooring), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("lab: creating Service %s: %w", DemoService, err)
	}
	for i, n := range nodes[:2] {
		if err := createPod(ctx, cs, pod(fmt.Sprintf("echo-%d", i+1), n.Name)); err != nil {
			return fmt.Errorf("lab: creating echo pod on %s: %w", n.Name, err)
		}
	}
	return nil
}

// createPod creates p in DemoNamespace. With real nodes the apiserver
// admits a pod only once its namespace's default ServiceAccount exists,
// which the serviceaccount controller creates a moment after it starts
// (seen on CI: `error looking up service account default/default`): that
// refusal is retried for up to 30 s, every other error returned.
func createPod(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) error {
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := cs.CoreV1().Pods(DemoNamespace).Create(ctx, p, metav1.CreateOptions{})
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "service account") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// demoService is the echo Service. Without Mooring it has no
// loadBalancerClass, so that the cluster's default implementation (another
// one the user runs in the lab, e.g. MetalLB) serves it.
func demoService(mooring bool) *corev1.Service {
	var class *string
	if mooring {
		class = ptr.To(mooringv1.LoadBalancerClass)
	}
	policy := corev1.IPFamilyPolicyPreferDualStack
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: DemoService, Namespace: DemoNamespace, Labels: map[string]string{"app": "echo"}},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: class,
			IPFamilyPolicy:    &policy,
			IPFamilies:        []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Selector:          map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: DemoPort,
				TargetPort: intstr.FromInt32(EchoPort),
			}},
		},
	}
}

func echoPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DemoNamespace, Labels: map[string]string{"app": "echo"}},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name:  "echo",
				Image: EchoImage,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: EchoPort, Protocol: corev1.ProtocolTCP}},
			}},
		},
	}
}

// labObject is an object the lab creates, with its resource.
type labObject struct {
	gvr schema.GroupVersionResource
	obj runtime.Object
}

// createMooringObjects creates the demo pool and L2 policy (the CRDs must
// be established); in the BGP lab (bgp.router valid) the pool and the BGP
// objects instead of the policy (bgp.go): the client sits behind the
// router, and an address announced both ways on one segment is a mistake
// docs/bgp.md warns about. A namespaced object's namespace must exist.
func createMooringObjects(ctx context.Context, dyn dynamic.Interface, bgp labBGP) error {
	pool := &mooringv1.LoadBalancerIPPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: mooringv1.GroupVersion.String(), Kind: "LoadBalancerIPPool"},
		ObjectMeta: metav1.ObjectMeta{Name: demoName},
		Spec: mooringv1.LoadBalancerIPPoolSpec{Blocks: []mooringv1.IPBlock{
			{Start: PoolRange4[0].String(), Stop: PoolRange4[1].String()},
			{Start: PoolRange6[0].String(), Stop: PoolRange6[1].String()},
		}},
	}
	yes := true
	policy := &mooringv1.L2AnnouncementPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: mooringv1.GroupVersion.String(), Kind: "L2AnnouncementPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: demoName},
		Spec: mooringv1.L2AnnouncementPolicySpec{
			NodeSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{LabelL2: "true"}},
			Interfaces:      []string{"eth0"},
			LoadBalancerIPs: &yes,
		},
	}
	objs := []labObject{{poolGVR, pool}, {policyGVR, policy}}
	if bgp.router.IsValid() {
		objs = append(objs[:1], mooringBGPObjects(bgp)...)
	}
	for _, o := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o.obj)
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{Object: m}
		var r dynamic.ResourceInterface = dyn.Resource(o.gvr)
		if ns := u.GetNamespace(); ns != "" {
			r = dyn.Resource(o.gvr).Namespace(ns)
		}
		if _, err := r.Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("lab: creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}
