package gather_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	clidoctor "github.com/mooringlb/mooring/internal/cli/doctor"
	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/doctor"
	"github.com/mooringlb/mooring/internal/doctor/gather"
	"github.com/mooringlb/mooring/internal/testenv"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// crd installs a minimal open-schema CRD of our own for another system's kind.
func crd(t *testing.T, dc dynamic.Interface, group, version, kind, plural string) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + group},
		"spec": map[string]any{"group": group, "scope": "Namespaced",
			"versions": []any{map[string]any{"name": version, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
			"names": map[string]any{"kind": kind, "plural": plural, "listKind": kind + "List", "singular": strings.ToLower(kind)}},
	}}
	_, err := dc.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
		Create(context.Background(), obj, metav1.CreateOptions{})
	must(t, err)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := dc.Resource(schema.GroupVersionResource{Group: group, Version: version, Resource: plural}).List(context.Background(), metav1.ListOptions{}); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("CRD %s never served: %v", plural, err)
		}
	}
}

func node(t *testing.T, cs kubernetes.Interface, name, ip string) {
	t.Helper()
	ctx := context.Background()
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err)
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	must(t, err)
}

func ns(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err)
}

// runDoctor runs the verb as an operator would (metrics from the given
// server for node n1 only) and returns its findings and exit error.
func runDoctor(t *testing.T, cs kubernetes.Interface, dc dynamic.Interface, r client.Reader, metricsURL string) ([]doctor.Finding, error) {
	t.Helper()
	opt := gather.Options{Reader: r}
	if metricsURL != "" {
		u, _ := url.Parse(metricsURL)
		port, _ := strconv.Atoi(u.Port())
		httpAgent := gather.HTTPAgent(port, 2*time.Second)
		get := func(ctx context.Context, n *corev1.Node, path string) (int, []byte, error) {
			if n.Name != "n1" {
				return 0, nil, errors.New("dial tcp 192.0.2.12:9473: i/o timeout")
			}
			// n1's agent, reached over real HTTP on loopback.
			lo := n.DeepCopy()
			lo.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
			return httpAgent(ctx, lo, path)
		}
		opt.Metrics, opt.Readyz = gather.AgentMetrics(get), gather.AgentReadyz(get)
	}
	in, err := gather.Gather(context.Background(), cs, dc, opt)
	must(t, err)
	return doctor.Run(in), nil
}

// problems are the findings that make doctor exit 1.
func problems(fs []doctor.Finding) []doctor.Finding {
	var out []doctor.Finding
	for _, f := range fs {
		if f.Severity == doctor.Problem {
			out = append(out, f)
		}
	}
	return out
}

// Against a real apiserver: a clean cluster reports nothing; then each
// problem is planted the way the real thing would look, and each is found.
func TestDoctorFindsPlantedProblems(t *testing.T) {
	env := testenv.StartT(t)
	cs, c := env.Clientset, env.Client
	dc, err := dynamic.NewForConfig(env.Config)
	must(t, err)
	ctx := context.Background()

	// A clean cluster: one pool on the nodes' segment, one policy, two
	// nodes, one Service announced by n1, kube-proxy in nftables mode.
	must(t, c.Create(ctx, &mooringv1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "lan"},
		Spec: mooringv1.LoadBalancerIPPoolSpec{Blocks: []mooringv1.IPBlock{{Start: "192.0.2.200", Stop: "192.0.2.220"}}}}))
	must(t, c.Create(ctx, &mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "all"}}))
	node(t, cs, "n1", "192.0.2.11")
	node(t, cs, "n2", "192.0.2.12")
	ns(t, cs, "d")
	svc, err := cs.CoreV1().Services("d").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	must(t, err)
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.200"}}
	svc, err = cs.CoreV1().Services("d").UpdateStatus(ctx, svc, metav1.UpdateOptions{})
	must(t, err)
	// n1's agent is the only live one both see: it announces web's address.
	for _, n := range []string{"n1", "n2"} {
		l := &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: n}}
		must(t, c.Create(ctx, l))
		l.Status.Members = []string{"n1"}
		must(t, c.Status().Update(ctx, l))
	}
	kp, err := cs.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy"},
		Data: map[string]string{"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n"}}, metav1.CreateOptions{})
	must(t, err)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			fmt.Fprintln(w, "ok: serving from the live API state")
			return
		}
		fmt.Fprintln(w, "# TYPE mooring_agent_api_writes_total counter")
		fmt.Fprintln(w, `mooring_agent_api_writes_total{kind="annotation",result="ok"} 3`)
		fmt.Fprintln(w, "mooring_split_brain_addresses 0")
	}))
	defer agent.Close()
	fs, _ := runDoctor(t, cs, dc, c, agent.URL)
	if p := problems(fs); len(p) != 0 {
		t.Fatalf("clean cluster: %+v", p)
	}
	var out bytes.Buffer
	if err := clidoctor.Run(ctx, clidoctor.Options{Output: "table"}, cs, dc, &out); err != nil || !strings.Contains(out.String(), "no problems found") {
		t.Fatalf("mooring doctor on a clean cluster: %v\n%s", err, out.String())
	}

	// Plant every problem.
	must(t, c.Create(ctx, &mooringv1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "far"},
		Spec: mooringv1.LoadBalancerIPPoolSpec{Blocks: []mooringv1.IPBlock{{CIDR: "198.51.100.0/28"}}}}))
	must(t, c.Create(ctx, &mooringv1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "on-nodes"},
		Spec: mooringv1.LoadBalancerIPPoolSpec{Blocks: []mooringv1.IPBlock{{CIDR: "192.0.2.8/29"}}}}))
	for _, ev := range []struct{ reason, node, msg string }{
		{mooringv1.EventReasonStaleLocalAddress, "n2", "node n2 has 192.0.2.200 configured on kube-ipvs0"},
		{mooringv1.EventReasonSplitBrain, "n1", "split brain: 192.0.2.200 is announced by n1 on eth0, but 02:00:00:00:00:09 also answered"},
	} {
		_, err := cs.CoreV1().Events("d").Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "web."},
			InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: "d", Name: "web", UID: svc.UID},
			Reason:         ev.reason, Message: ev.msg, Type: corev1.EventTypeWarning,
			Source: corev1.EventSource{Component: "mooring-agent", Host: ev.node}, FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
		}, metav1.CreateOptions{})
		must(t, err)
	}
	kp.Data["config.conf"] = "kind: KubeProxyConfiguration\nmode: ipvs\nipvs:\n  strictARP: false\n"
	_, err = cs.CoreV1().ConfigMaps("kube-system").Update(ctx, kp, metav1.UpdateOptions{})
	must(t, err)
	// MetalLB as the lab runs it: a DaemonSet whose status no controller
	// updates (it says nothing is scheduled), and a speaker Pod running
	// on n1 with its ServiceL2Status naming n1 for d/web. The Pods decide
	// (issue 18: doctor read the DaemonSet's status and said "no problems
	// found" while three speakers ran).
	ns(t, cs, "metallb-system")
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "speaker", Namespace: "metallb-system", Labels: map[string]string{"app": "metallb", "component": "speaker"}},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "metallb"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "metallb"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "speaker", Image: "quay.io/metallb/speaker:v0.16.0"}}}}}}
	_, err = cs.AppsV1().DaemonSets("metallb-system").Create(ctx, ds, metav1.CreateOptions{})
	must(t, err)
	speaker, err := cs.CoreV1().Pods("metallb-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "speaker-n1", Labels: map[string]string{"app": "metallb", "component": "speaker"}},
		Spec:       corev1.PodSpec{NodeName: "n1", HostNetwork: true, Containers: []corev1.Container{{Name: "speaker", Image: "quay.io/metallb/speaker:v0.16.2"}}},
	}, metav1.CreateOptions{})
	must(t, err)
	speaker.Status.Phase = corev1.PodRunning
	_, err = cs.CoreV1().Pods("metallb-system").UpdateStatus(ctx, speaker, metav1.UpdateOptions{})
	must(t, err)
	crd(t, dc, "metallb.io", "v1beta1", "ServiceL2Status", "servicel2statuses")
	l2s, err := dc.Resource(schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "servicel2statuses"}).Namespace("metallb-system").Create(ctx,
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "metallb.io/v1beta1", "kind": "ServiceL2Status",
			"metadata": map[string]any{"generateName": "l2-", "labels": map[string]any{"metallb.io/node": "n1", "metallb.io/service-name": "web", "metallb.io/service-namespace": "d"}}}},
		metav1.CreateOptions{})
	must(t, err)
	l2s.Object["status"] = map[string]any{"node": "n1", "serviceName": "web", "serviceNamespace": "d", "interfaces": []any{map[string]any{"name": "eth0"}}}
	_, err = dc.Resource(schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "servicel2statuses"}).Namespace("metallb-system").Update(ctx, l2s, metav1.UpdateOptions{})
	must(t, err)
	crd(t, dc, "metallb.io", "v1beta1", "IPAddressPool", "ipaddresspools")
	_, err = dc.Resource(schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}).Namespace("metallb-system").Create(ctx,
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
			"metadata": map[string]any{"name": "old"}, "spec": map[string]any{"addresses": []any{"192.0.2.192/27"}}}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.CoordinationV1().Leases("kube-system").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "cilium-l2announce-d-web"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n2"), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: time.Now()}}}, metav1.CreateOptions{})
	must(t, err)
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "kube-vip-n1", Namespace: "kube-system"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "svclb-web-1a2b3", Namespace: "kube-system",
			Labels: map[string]string{"svccontroller.k3s.cattle.io/svcname": "web", "svccontroller.k3s.cattle.io/svcnamespace": "d"}}},
	} {
		p.Spec = corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "x"}}}
		p, err := cs.CoreV1().Pods("kube-system").Create(ctx, p, metav1.CreateOptions{})
		must(t, err)
		p.Status.Phase = corev1.PodRunning
		_, err = cs.CoreV1().Pods("kube-system").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		must(t, err)
	}
	// n1's agent: split brain now, failed writes, and its responder cannot
	// open its sockets (seed 004: the process runs, /readyz says why not).
	agent.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			http.Error(w, "responder: responder: NDP socket on eth0 (2): listen packet : setsockopt: cannot allocate memory\n(serving from the live API state)", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, `mooring_agent_api_writes_total{kind="event",result="error"} 41`)
		fmt.Fprintln(w, "mooring_split_brain_addresses 1")
		fmt.Fprintln(w, `mooring_responder_errors_total{op="open"} 12`)
	})

	fs, _ = runDoctor(t, cs, dc, c, agent.URL)
	for _, w := range []struct {
		sev            doctor.Severity
		check, mention string
	}{
		{doctor.Problem, "pool-subnet", "198.51.100.0-198.51.100.15"},
		{doctor.Problem, "pool-node-address", "192.0.2.11 (node n1), 192.0.2.12 (node n2)"},
		// n2's metrics cannot be read and no audit ran: its Event is history.
		{doctor.History, "stale-local-address", "kube-ipvs0"},
		{doctor.Problem, "kube-proxy", "strictARP"},
		{doctor.Problem, "other-load-balancer", "1 speaker(s) (Pod metallb-system/speaker-n1 on n1)"},
		{doctor.Problem, "other-load-balancer", "its speakers announce 1 Service(s) now (ServiceL2Status): d/web from n1"},
		{doctor.Problem, "other-load-balancer", "192.0.2.200 (d/web, MetalLB pool metallb-system/old)"},
		{doctor.Problem, "other-load-balancer", "d/web held by n2"},
		{doctor.Problem, "other-load-balancer", "addresses both Cilium and Mooring announce: 192.0.2.200 (d/web)"},
		{doctor.Problem, "other-load-balancer", "kube-vip"},
		{doctor.Problem, "other-load-balancer", "svclb"},
		{doctor.Problem, "split-brain", "02:00:00:00:00:09"},
		{doctor.Problem, "agent-dataplane", `cannot allocate memory; failures since it started: responder-open (mooring_responder_errors_total{op="open"} = 12)`},
		{doctor.Warning, "agent-metrics", "agent metrics unreachable on n2 (dial tcp 192.0.2.12:9473: i/o timeout)"},
		{doctor.Warning, "agent-counters", "41"},
	} {
		found := false
		for _, f := range fs {
			found = found || (f.Severity == w.sev && f.Check == w.check && strings.Contains(f.Message, w.mention))
		}
		if !found {
			t.Errorf("no %s %s finding mentioning %q in:\n%s", w.sev, w.check, w.mention, dump(fs))
		}
	}
	// The verb itself: JSON, exit code 1.
	out.Reset()
	err = clidoctor.Run(ctx, clidoctor.Options{Output: "json"}, cs, dc, &out)
	var ee cliutil.ExitError
	if !errors.As(err, &ee) || ee.Code != 1 {
		t.Fatalf("mooring doctor with problems: err %v, want exit 1", err)
	}
	var doc struct {
		Findings []doctor.Finding
		Problem  bool
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || !doc.Problem || len(doc.Findings) < 7 {
		t.Fatalf("-o json: %v %s", err, out.String())
	}
}

func dump(fs []doctor.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "  %s %s %s: %s\n", f.Severity, f.Check, f.Node, f.Message)
	}
	return b.String()
}

func TestParseMetrics(t *testing.T) {
	m := gather.ParseMetrics([]byte(`# HELP x
mooring_stale_local_addresses 2
mooring_agent_api_writes_total{kind="event",result="error"} 3
mooring_agent_api_writes_total{kind="annotation",result="error"} 4 1700000000
mooring_agent_api_writes_total{kind="annotation",result="ok"} 100
mooring_agent_ownership_changes_total{change="lost"} 7
mooring_members_insecure 1
mooring_agent_memory_limit_pressure 1
mooring_responder_errors_total{op="open"} 5
mooring_responder_errors_total{op="join"} 0
mooring_agent_dataplane_failures_total{step="read-addresses"} 3
mooring_agent_dataplane_failing{step="read-addresses"} 1
mooring_agent_dataplane_failing{step="split-brain-probe"} 0
garbage line
`))
	if m.StaleLocal != 2 || m.WriteErrors != 7 || m.OwnershipLosses != 7 || m.GossipInsecure != 1 || m.MemoryLimit != 1 {
		t.Fatalf("%+v", m)
	}
	if c := m.StepFailures["responder-open"]; c.Value != 5 || c.Series != `mooring_responder_errors_total{op="open"}` ||
		m.StepFailures["read-addresses"].Value != 3 || len(m.StepsFailing) != 1 || m.StepsFailing[0] != "read-addresses" {
		t.Fatalf("steps: %+v %v", m.StepFailures, m.StepsFailing)
	}
	r := gather.ParseReadyz(503, []byte("responder: NDP socket: cannot allocate memory\nholding down after a restart\n(serving from the live API state)\n"))
	if r.Ready || len(r.Reasons) != 2 || gather.ParseReadyz(200, []byte("ok")).Ready != true {
		t.Fatalf("readyz: %+v", r)
	}
	kp := gather.ParseKubeProxy("mode: ipvs\nipvs:\n  strictARP: true\n")
	if kp.Mode != "ipvs" || !kp.StrictARP {
		t.Fatalf("%+v", kp)
	}
}
