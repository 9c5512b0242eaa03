package kubelet

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNthAddr(t *testing.T) {
	if got := nthAddr(netip.MustParsePrefix("10.244.3.0/24"), 2); got.String() != "10.244.3.2" {
		t.Errorf("v4: %s", got)
	}
	if got := nthAddr(netip.MustParsePrefix("fd00:244:0:3::/64"), 2); got.String() != "fd00:244:0:3::2" {
		t.Errorf("v6: %s", got)
	}
}

// The status is what EndpointSlices are built from: pod IPs per family,
// Ready, and the phase.
func TestPodStatus(t *testing.T) {
	obj := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "echo", Image: "x"}}}}
	p := &pod{addrs: []netip.Addr{netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("fd00:244:0:1::2")},
		started: metav1.Now(), proc: &podProcess{}}
	nodeIPs := []netip.Addr{netip.MustParseAddr("10.213.0.11"), netip.MustParseAddr("fd00:213::b")}
	st := podStatus(obj, p, nodeIPs, true, "")
	if st.Phase != corev1.PodRunning || st.PodIP != "10.244.1.2" || len(st.PodIPs) != 2 || st.HostIP != "10.213.0.11" {
		t.Fatalf("status = %+v", st)
	}
	if !ready(st) || !st.ContainerStatuses[0].Ready {
		t.Fatal("a ready pod is not Ready")
	}
	st = podStatus(&corev1.Pod{Spec: obj.Spec, Status: st}, p, nodeIPs, false, "echo process exited")
	if ready(st) || st.Phase != corev1.PodFailed || st.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("failed pod status = %+v", st)
	}
}

func ready(st corev1.PodStatus) bool {
	for _, c := range st.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func TestPodPort(t *testing.T) {
	obj := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{ContainerPort: 9000}}}}}}
	if podPort(obj) != 9000 || podPort(&corev1.Pod{}) != DefaultPort {
		t.Fatal("podPort")
	}
}

// The stand-in runs only the lab's image in a namespace of the pod's own;
// everything else (another system's hostNetwork pods, real images) it
// leaves alone rather than run an echo server under the pod's name.
func TestRunnable(t *testing.T) {
	pod := func(hostNet bool, images ...string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: hostNet}}
		for i, im := range images {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: string(rune('a' + i)), Image: im})
		}
		return p
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want bool
	}{
		{pod(false, Image), true},
		{pod(false, Image+":v1", Image), true},
		{pod(true, Image), false},
		{pod(false, "quay.io/metallb/speaker:v0.15.2"), false},
		{pod(false, Image, "nginx"), false},
		{pod(false, "mooring.dev/lab-echo-not"), false},
	} {
		ok, why := runnable(tc.pod)
		if ok != tc.want || (ok == (why != "")) {
			t.Errorf("runnable(hostNetwork=%v %v) = %v %q, want %v", tc.pod.Spec.HostNetwork, tc.pod.Spec.Containers, ok, why, tc.want)
		}
	}
}

// As the kubelet does, the stand-in takes its own conditions back (a
// Ready=False written by another party while the pod runs is undone, issue
// 9 item 8) and keeps the conditions others own.
func TestPodStatusReconcilesConditions(t *testing.T) {
	obj := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "echo", Image: Image}}}}
	obj.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "NodeConfirmedDead"},
		{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByMooring"},
	}
	p := &pod{addrs: []netip.Addr{netip.MustParseAddr("10.244.1.2")}, started: metav1.Now(), proc: &podProcess{}}
	st := podStatus(obj, p, []netip.Addr{netip.MustParseAddr("10.213.0.11")}, true, "")
	if !ready(st) {
		t.Error("a running pod marked NotReady by someone else stays NotReady")
	}
	n := 0
	for _, c := range st.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Reason == "EvictionByMooring" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("conditions %+v: want the DisruptionTarget kept once", st.Conditions)
	}
}

// A false fast eviction (the Mooring agent's patch, issue 9 item 8) is
// taken back whole: Ready and ContainersReady True again, without the
// agent's reason and message, a new transition time.
func TestPodStatusUndoesFastEviction(t *testing.T) {
	obj := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "echo", Image: Image}}}}
	then := metav1.NewTime(metav1.Now().Add(-time.Minute))
	for _, ct := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		obj.Status.Conditions = append(obj.Status.Conditions, corev1.PodCondition{Type: ct, Status: corev1.ConditionFalse,
			Reason: "MooringNodeUnreachable", Message: "node-2 is confirmed dead", LastTransitionTime: then})
	}
	p := &pod{addrs: []netip.Addr{netip.MustParseAddr("10.244.2.2")}, started: metav1.Now(), proc: &podProcess{}}
	st := podStatus(obj, p, []netip.Addr{netip.MustParseAddr("10.213.0.12")}, true, "")
	for _, c := range st.Conditions {
		if c.Type != corev1.PodReady && c.Type != corev1.ContainersReady {
			continue
		}
		if c.Status != corev1.ConditionTrue || c.Reason != "" || c.Message != "" || !c.LastTransitionTime.After(then.Time) {
			t.Errorf("%s after the kubelet's sync: %+v", c.Type, c)
		}
	}
}

// The Node's Ready follows the pod network as a kubelet's follows the
// runtime's NetworkReady: NotReady with the kubelet's reason and message
// while STATUS fails, Ready again when it succeeds; the transition time
// moves only when the status does.
func TestNodeReadyFollowsTheNetwork(t *testing.T) {
	k := &kubelet{cfg: Config{NodeName: "node-1"}, net: &fakeNet{}}
	readyOf := func(st corev1.NodeStatus) corev1.NodeCondition {
		for _, c := range st.Conditions {
			if c.Type == corev1.NodeReady {
				return c
			}
		}
		t.Fatal("no Ready condition")
		return corev1.NodeCondition{}
	}
	t0 := metav1.NewTime(time.Unix(1000, 0))
	st := k.nodeStatus(corev1.NodeStatus{}, t0, nil)
	if c := readyOf(st); c.Status != corev1.ConditionTrue || c.Reason != "KubeletReady" {
		t.Fatalf("healthy: %+v", c)
	}
	t1 := metav1.NewTime(t0.Add(time.Second))
	st = k.nodeStatus(st, t1, errors.New(`plugin type="mooring-ipam" failed (status): the agent is unreachable`))
	c := readyOf(st)
	want := `container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: plugin type="mooring-ipam" failed (status): the agent is unreachable`
	if c.Status != corev1.ConditionFalse || c.Reason != "KubeletNotReady" || c.Message != want || !c.LastTransitionTime.Equal(&t1) {
		t.Fatalf("network down: %+v", c)
	}
	t2 := metav1.NewTime(t1.Add(time.Second))
	if c := readyOf(k.nodeStatus(st, t2, errors.New("still down"))); !c.LastTransitionTime.Equal(&t1) || !c.LastHeartbeatTime.Equal(&t2) {
		t.Fatalf("still down: transition %v heartbeat %v", c.LastTransitionTime, c.LastHeartbeatTime)
	}
	if c := readyOf(k.nodeStatus(st, t2, nil)); c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&t2) {
		t.Fatalf("back: %+v", c)
	}
}

// checkNetwork reports a change of NetworkReady, or of its reason, once.
func TestCheckNetworkReportsChanges(t *testing.T) {
	n := &fakeNet{}
	k := &kubelet{net: n}
	ctx := context.Background()
	for i, step := range []struct {
		err     error
		changed bool
	}{{nil, false}, {errors.New("down"), true}, {errors.New("down"), false}, {errors.New("other"), true}, {nil, true}, {nil, false}} {
		n.err = step.err
		if got := k.checkNetwork(ctx); got != step.changed || (k.networkErr() == nil) != (step.err == nil) {
			t.Errorf("step %d (%v): changed %v, want %v; recorded %v", i, step.err, got, step.changed, k.networkErr())
		}
	}
}

type fakeNet struct{ err error }

func (*fakeNet) ready(context.Context) error                   { return nil }
func (f *fakeNet) status(context.Context) error                { return f.err }
func (*fakeNet) wire(context.Context, *corev1.Pod, *pod) error { return nil }
func (*fakeNet) unwire(context.Context, *pod)                  {}
