package testenv_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooringlb/mooring/internal/testenv"
)

// TestControllerManagerMakesEndpointSlices proves the variant with
// kube-controller-manager: for a Node, a Ready Pod bound to it (status
// written by hand, as the lab's kubelet stand-in does) and a selector
// Service, the endpointslice controller publishes a ready endpoint.
func TestControllerManagerMakesEndpointSlices(t *testing.T) {
	env := testenv.StartT(t)
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(dir, "kcm.log"))
	if err != nil {
		t.Fatal(err)
	}
	kcm, err := env.StartControllerManager(dir, testenv.KCMOptions{Log: logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kcm.Stop(context.Background())
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("kube-controller-manager log:\n%s", b)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs := env.Clientset

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default", Labels: map[string]string{"app": "echo"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{
			Name: "echo", Image: "echo", Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		}}},
	}
	pod, err = cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "10.244.1.2", PodIPs: []corev1.PodIP{{IP: "10.244.1.2"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if _, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		slices, err := cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=echo"})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slices.Items {
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready != nil && *ep.Conditions.Ready && ep.NodeName != nil && *ep.NodeName == "node-1" &&
					len(ep.Addresses) == 1 && ep.Addresses[0] == "10.244.1.2" {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no ready endpoint for the pod on node-1 after 90 s: %+v", slices.Items)
		case <-kcm.Exited():
			t.Fatalf("kube-controller-manager exited: %v", kcm.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestMutatingRequestsCountsAWrite: one ConfigMap created between two
// readings shows as one POST configmaps; a read adds nothing.
func TestMutatingRequestsCountsAWrite(t *testing.T) {
	env := testenv.StartT(t)
	ctx := context.Background()
	before, err := testenv.MutatingRequests(ctx, env.Clientset)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "counted", Namespace: "default"}}
	if _, err := env.Clientset.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Clientset.CoreV1().ConfigMaps("default").Get(ctx, "counted", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	after, err := testenv.MutatingRequests(ctx, env.Clientset)
	if err != nil {
		t.Fatal(err)
	}
	d := testenv.DiffRequests(before, after)
	if d["POST configmaps"] != 1 {
		t.Fatalf("writes between the readings %v, want exactly one POST configmaps", d)
	}
	for k := range d {
		if strings.HasPrefix(k, "GET ") || strings.HasPrefix(k, "LIST ") {
			t.Errorf("a read counted as a write: %s", k)
		}
	}
}
