package lab_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/netlab"
)

// TestLabMetalLB runs the real MetalLB (controller and one speaker per
// node, built by hack/metallb) in the lab without Mooring: 10 Services get
// addresses from MetalLB's IPAddressPool and L2Advertisement, each answers
// from the client under 8 requests/s for 10 s with no failure, and each
// address has exactly one ARP responder. Then the speaker DaemonSet is
// deleted and the lab stops the speakers and removes their Pods.
func TestLabMetalLB(t *testing.T) {
	ctx, r := labtest.Start(t, envSelf, labtest.Options{Nodes: 3, MetalLB: true, LogLevel: slog.LevelWarn})
	rc, err := clientcmd.BuildConfigFromFlags("", r.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Service.Ingress) == 0 {
		t.Fatalf("the demo Service has no MetalLB address: %+v", r.Service)
	}
	addrs := labtest.LBServices(t, ctx, cs, 10, 60*time.Second)
	for _, a := range addrs {
		if a.Compare(lab.PoolRange4[0]) < 0 || a.Compare(lab.PoolRange4[1]) > 0 {
			t.Errorf("address %s outside MetalLB's pool %v", a, lab.PoolRange4)
		}
	}
	client := r.Cluster.Host(netlab.ClientName)
	// The speakers answer ARP once memberlist has settled who announces.
	var macs map[netip.Addr]string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		macs, err = labtest.OneResponderEach(ctx, client, addrs)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ARP responders: %v", err)
		}
	}
	t.Logf("MetalLB's responders: %v", macs)
	// A warm-up first: a Service's first connections can meet a node
	// before kube-proxy programmed its address, and their SYN retransmits
	// stay on that path (conntrack) until the client gives up; the
	// measured load starts after every warm-up request has ended.
	wctx, wstop := context.WithTimeout(ctx, 2*time.Second)
	warm := &labtest.Load{Host: client, URLs: labtest.URLs(addrs), Interval: 250 * time.Millisecond, Timeout: 3 * time.Second}
	warm.Start(wctx)
	warm.Wait()
	wstop()
	if _, wfail, wf := warm.Totals(); wfail > 0 {
		t.Logf("warm-up: %d requests failed (not counted): %v", wfail, wf[0])
	}
	lctx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	load := &labtest.Load{Host: client, URLs: labtest.URLs(addrs), Interval: 125 * time.Millisecond, Timeout: 3 * time.Second}
	load.Start(lctx)
	load.Wait()
	ok, fail, failures := load.Totals()
	t.Logf("10 Services × 8 req/s for 10 s: %d ok, %d failed", ok, fail)
	if fail != 0 || ok < 10*40 {
		t.Errorf("%d ok, %d failed: %v", ok, fail, failures)
	}
	if _, err := labtest.OneResponderEach(ctx, client, addrs); err != nil {
		t.Errorf("ARP responders after the load: %v", err)
	}

	// Deleting the DaemonSet stops the speakers and removes their Pods.
	if err := cs.AppsV1().DaemonSets(lab.MetalLBNamespace).Delete(ctx, lab.MetalLBSpeaker, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		pods, err := cs.CoreV1().Pods(lab.MetalLBNamespace).List(ctx, metav1.ListOptions{LabelSelector: "component=speaker"})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d speaker Pods left 15 s after the DaemonSet was deleted", len(pods.Items))
		}
	}
	// The garbage collector (the lab runs it beside MetalLB) may delete
	// the Pods before the supervisor has stopped the processes, as a
	// real cluster's does before the kubelets: the answers stop within
	// the supervisor's period and the speakers' exit.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		res, err := labtest.Responders(ctx, client, addrs)
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, a := range addrs {
			if len(res[a]) != 0 {
				left = append(left, fmt.Sprintf("%s by %v", a, res[a]))
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still answered 15 s after the DaemonSet was deleted: %v", left)
		}
	}
}
