package failover

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/kube"
)

func slice(name, svc string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
	}
}

func kep(addr, node string, ready *bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	if node != "" {
		e.NodeName = &node
	}
	return e
}

func ptr[T any](v T) *T { return &v }

func TestKubeSpreadCheck(t *testing.T) {
	tests := []struct {
		name    string
		objs    []runtime.Object
		wantErr bool
	}{
		{"spread over two slices", []runtime.Object{
			slice("echo-1", "echo", kep("10.1.0.1", "node-a", ptr(true))),
			slice("echo-2", "echo", kep("10.1.0.2", "node-b", nil)), // nil ready counts as ready
		}, false},
		{"both on one node", []runtime.Object{
			slice("echo-1", "echo", kep("10.1.0.1", "node-a", ptr(true)), kep("10.1.0.2", "node-a", ptr(true))),
		}, true},
		{"the other node's endpoint not ready", []runtime.Object{
			slice("echo-1", "echo", kep("10.1.0.1", "node-a", ptr(true)), kep("10.1.0.2", "node-b", ptr(false))),
		}, true},
		{"other Services' slices do not count", []runtime.Object{
			slice("echo-1", "echo", kep("10.1.0.1", "node-a", ptr(true))),
			slice("web-1", "web", kep("10.1.0.9", "node-b", ptr(true))),
		}, true},
		{"no slices", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := KubeCluster{Client: fake.NewClientset(tt.objs...), Namespace: "demo", Name: "echo"}
			eps, err := k.Endpoints(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			err = CheckSpread(eps)
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, ErrNotSpread)) {
				t.Errorf("CheckSpread = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
}

func TestEndpointsFromSlices(t *testing.T) {
	withPod := kep("10.1.0.3", "node-c", nil)
	withPod.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: "echo-3"}
	s := slice("echo-1", "echo", kep("10.1.0.2", "node-b", ptr(false)), kep("10.1.0.1", "node-a", nil), kep("bogus", "node-c", nil), withPod)
	got := endpointsFromSlices([]*discoveryv1.EndpointSlice{s})
	want := []Endpoint{ep("10.1.0.1", "node-a", true), ep("10.1.0.2", "node-b", false), podEP("10.1.0.3", "node-c", "demo/echo-3", true)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// announcers is the API as the agents leave it: nodes, one policy, svc
// and an L2Announcer per node whose gossip view holds only live.
func announcers(t *testing.T, svc *corev1.Service, nodes []string, live ...string) client.Reader {
	t.Helper()
	objs := []client.Object{svc.DeepCopy(), &v1alpha1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "all"}}}
	for _, n := range nodes {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}},
			&v1alpha1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: n}, Status: v1alpha1.L2AnnouncerStatus{Members: live,
				Interfaces: []v1alpha1.AnnouncerInterface{{Name: "eth0", Index: 2}}}})
	}
	return crfake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(objs...).Build()
}

func TestKubeServiceAndAnnouncedBy(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}, {Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}}},
	}
	k := KubeCluster{Client: fake.NewClientset(svc), Namespace: "demo", Name: "echo"}
	si, err := k.Service(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(si.Addrs, []netip.Addr{netip.MustParseAddr("192.0.2.10")}) || !reflect.DeepEqual(si.TCPPorts, []uint16{80}) {
		t.Errorf("ServiceInfo %+v", si)
	}
	if node, err := k.AnnouncedBy(context.Background(), si.Addrs[0]); err != nil || node != "" {
		t.Errorf("no reader: AnnouncedBy = %q, %v", node, err)
	}
	// node-a is the only live member every agent sees: it announces.
	k.Reader = announcers(t, svc, []string{"node-a", "node-b"}, "node-a")
	node, err := k.AnnouncedBy(context.Background(), si.Addrs[0])
	if err != nil || node != "node-a" {
		t.Errorf("AnnouncedBy = %q, %v", node, err)
	}
	if node, err := k.AnnouncedBy(context.Background(), netip.MustParseAddr("192.0.2.11")); err != nil || node != "" {
		t.Errorf("another address: AnnouncedBy = %q, %v", node, err)
	}
	if _, err := (KubeCluster{Client: fake.NewClientset(), Namespace: "demo", Name: "nope"}).Service(context.Background()); err == nil {
		t.Error("missing Service: want an error")
	}
}

func TestKubeWatchEndpoints(t *testing.T) {
	client := fake.NewClientset(slice("echo-1", "echo", kep("10.1.0.1", "node-a", ptr(true)), kep("10.1.0.2", "node-b", ptr(true))))
	k := KubeCluster{Client: client, Namespace: "demo", Name: "echo"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := make(chan []Endpoint, 16)
	done := make(chan error, 1)
	go func() { done <- k.WatchEndpoints(ctx, func(eps []Endpoint) { seen <- eps }) }()

	wait := func(cond func([]Endpoint) bool) {
		t.Helper()
		for {
			select {
			case eps := <-seen:
				if cond(eps) {
					return
				}
			case <-ctx.Done():
				t.Fatal("no matching endpoints seen")
			}
		}
	}
	wait(func(eps []Endpoint) bool { return len(eps) == 2 })
	// node-a dies: the endpointslice controller marks its endpoint not ready.
	upd := slice("echo-1", "echo", kep("10.1.0.1", "node-a", ptr(false)), kep("10.1.0.2", "node-b", ptr(true)))
	if _, err := client.DiscoveryV1().EndpointSlices("demo").Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(func(eps []Endpoint) bool { return NodeEndpointsGone(eps, "node-a") })
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("WatchEndpoints did not return after cancel")
	}
}

func TestAgentPodKiller(t *testing.T) {
	pod := func(name, node string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mooring-system", Name: name, Labels: labels},
			Spec: corev1.PodSpec{NodeName: node}}
	}
	agent := map[string]string{"app.kubernetes.io/name": "mooring-agent"}
	client := fake.NewClientset(
		pod("agent-a", "node-a", agent), pod("agent-b", "node-b", agent),
		pod("other-b", "node-b", map[string]string{"app": "other"}))
	k := AgentPodKiller{Client: client, Namespace: "mooring-system", Selector: "app.kubernetes.io/name=mooring-agent"}
	if err := k.Kill(context.Background(), "node-b"); err != nil {
		t.Fatal(err)
	}
	pods, _ := client.CoreV1().Pods("mooring-system").List(context.Background(), metav1.ListOptions{})
	var left []string
	for _, p := range pods.Items {
		left = append(left, p.Name)
	}
	if !reflect.DeepEqual(left, []string{"agent-a", "other-b"}) {
		t.Errorf("left %v, want agent-a and other-b", left)
	}
	if err := k.Kill(context.Background(), "node-c"); !errors.Is(err, ErrNoAgentPod) {
		t.Errorf("no agent there: err = %v", err)
	}
}
