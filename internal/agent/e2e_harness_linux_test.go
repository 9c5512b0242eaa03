//go:build linux

package agent_test

// The end-to-end harness: a real kube-apiserver (internal/testenv), a
// netlab L2 segment, and one `mooring agent` PROCESS per node namespace,
// running with its ServiceAccount's own token (so every e2e test also checks
// the RBAC role).
//
// Reaching the API server from node namespaces: the apiserver listens on
// 127.0.0.1:<port> in the host namespace, which node namespaces cannot
// reach. The test process opens a listener on the SAME address inside each
// node namespace (the socket is created on the node's worker thread via
// Host.Do) and forwards every accepted connection to the real apiserver
// from an ordinary goroutine (host namespace). Because the address is the
// same, the apiserver's certificate and the kubeconfig work unchanged inside
// the nodes. Stopping the apiserver makes the forwarded dials fail, exactly
// as an unreachable control plane would.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/netlab"
	"github.com/mooringlb/mooring/internal/testenv"
)

const (
	gossipPort  = 7946
	metricsPort = 9473
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// agentBinary builds cmd/mooring once per test process (a cold link of
// client-go takes minutes on 2 cores; never per test).
func agentBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := testenv.RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(root, "tmp", "mooring-agent-e2e")
		cmd := exec.Command("go", "build", "-o", builtBin, "./cmd/mooring")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/mooring: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// cluster is one e2e world.
type cluster struct {
	t      *testing.T
	ctx    context.Context
	env    *testenv.Env
	lab    *netlab.Lab
	dir    string
	kcs    map[string]string // per node: the agent's kubeconfig (a pod-bound ServiceAccount token)
	agents map[string]*netlab.Process
	api    *forwarder
}

func newCluster(t *testing.T, nodes int, labels map[string]map[string]string) *cluster {
	t.Helper()
	return newClusterOpts(t, netlab.Config{Nodes: nodes}, labels)
}

// agentLogDir is where the agents' logs go: a test's temporary folder, or
// MOORING_AGENT_LOGDIR (kept, for reading a benchmark's timeline after it).
func agentLogDir(t *testing.T) string {
	dir := os.Getenv("MOORING_AGENT_LOGDIR")
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newClusterOpts(t *testing.T, cfg netlab.Config, labels map[string]map[string]string) *cluster {
	t.Helper()
	netlab.RequirePrivileges(t)
	agentBinary(t) // fail fast, before building anything else
	lab := netlab.NewForTest(t, cfg)
	env := testenv.StartT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := &cluster{t: t, ctx: ctx, env: env, lab: lab, dir: agentLogDir(t), agents: map[string]*netlab.Process{}, kcs: map[string]string{}}
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	c.api = newForwarder(t, ctx, u.Host)
	for _, n := range lab.Nodes() {
		c.api.listen(t, n)
	}
	c.installRBAC()
	for _, n := range lab.Nodes() {
		c.createNode(n, labels[n.Name])
		c.kcs[n.Name] = c.agentKubeconfig(n.Name)
	}
	return c
}

// forwarder relays TCP from listeners inside node namespaces to the
// apiserver in the host namespace.
type forwarder struct {
	target string
	ctx    context.Context
	cut    context.CancelFunc // closes every relayed connection
	down   atomic.Bool
	wg     sync.WaitGroup
}

func newForwarder(t *testing.T, ctx context.Context, target string) *forwarder {
	ctx, cancel := context.WithCancel(ctx)
	f := &forwarder{target: target, ctx: ctx, cut: cancel}
	// Cleanups run before the lab kills the agents, so cut first: that
	// closes the open connections instead of waiting for them.
	t.Cleanup(func() { f.Cut(); f.wg.Wait() })
	return f
}

// Cut makes the apiserver unreachable from every node: open connections
// are closed and new ones are refused, as in a control-plane partition.
func (f *forwarder) Cut() {
	f.down.Store(true)
	f.cut()
}

// listen relays connections accepted on the target address inside h.
func (f *forwarder) listen(t *testing.T, h *netlab.Host) {
	var ln net.Listener
	if err := h.Do(func() (err error) { ln, err = net.Listen("tcp", f.target); return err }); err != nil {
		t.Fatalf("API forwarder in %s: %v", h.Name, err)
	}
	stop := context.AfterFunc(f.ctx, func() { ln.Close() })
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer stop()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.relay(in)
			}()
		}
	}()
}

func (f *forwarder) relay(in net.Conn) {
	defer in.Close()
	if f.down.Load() {
		return
	}
	out, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(f.ctx, "tcp", f.target)
	if err != nil {
		return // the apiserver is down: the agent sees the connection closed
	}
	defer out.Close()
	stop := context.AfterFunc(f.ctx, func() { in.Close(); out.Close() })
	defer stop()
	done := make(chan struct{})
	go func() { _, _ = io.Copy(out, in); out.Close(); close(done) }()
	_, _ = io.Copy(in, out)
	in.Close()
	<-done
}

// stopAPIServer cuts every node off the API server and then stops it; it
// cannot be restarted, so this is a test's last step.
func (c *cluster) stopAPIServer() {
	c.t.Helper()
	c.api.Cut()
	if err := c.env.ControlPlane.APIServer.Stop(); err != nil {
		c.t.Logf("stopping the API server: %v (it was killed)", err)
	}
}

// installRBAC applies the shipped ServiceAccount, ClusterRole (generated
// from the RBAC markers), binding and admission policy: the agents get
// exactly the DaemonSet's permissions.
func (c *cluster) installRBAC() {
	if err := installAgentRBAC(c.ctx, c.env.Clientset); err != nil {
		c.t.Fatal(err)
	}
}

// agentKubeconfig returns a kubeconfig holding a token bound to a pod on
// node, as the kubelet gives the DaemonSet's pod there.
func (c *cluster) agentKubeconfig(node string) string {
	t := c.t
	tok, err := agentToken(c.ctx, c.env.Clientset, node)
	if err != nil {
		t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.env.Config.Host, CertificateAuthorityData: c.env.Config.CAData}
	kc.AuthInfos[agentSA] = &clientcmdapi.AuthInfo{Token: tok}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: agentSA}
	kc.CurrentContext = "e2e"
	path := filepath.Join(c.dir, node+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func readYAML(path string, into any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return yaml.Unmarshal(b, into)
}

// createNode writes the Node the kubelet would: labels and InternalIP.
func (c *cluster) createNode(h *netlab.Host, labels map[string]string) {
	cs := c.env.Clientset
	n, err := cs.CoreV1().Nodes().Create(c.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.Name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: h.Addr4.String()}, {Type: corev1.NodeHostName, Address: h.Name}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(c.ctx, n, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// startAgent runs `mooring agent` as a process inside the node's namespace.
func (c *cluster) startAgent(h *netlab.Host, extra ...string) *netlab.Process {
	c.t.Helper()
	logf, err := os.OpenFile(filepath.Join(c.dir, h.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { logf.Close() })
	args := append([]string{"agent", "--kubeconfig", c.kcs[h.Name], "--node-name", h.Name,
		"--gossip-bind-address", h.Addr4.String(), "--gossip-port", fmt.Sprint(gossipPort),
		"--metrics-addr", net.JoinHostPort(h.Addr4.String(), fmt.Sprint(metricsPort)),
		"--probe-interval", "1s", "--safety-interval", "1s", "--log-level", "debug"}, extra...)
	// An agent refuses to gossip without a key unless told it is on a lab
	// network: the harness's agents are, unless a test gives a key.
	if !slices.ContainsFunc(extra, func(a string) bool {
		return strings.HasPrefix(a, "--gossip-key-file") || strings.HasPrefix(a, "--insecure-gossip")
	}) {
		args = append(args, "--insecure-gossip")
	}
	cmd := exec.Command(agentBinary(c.t), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := h.Start(cmd)
	if err != nil {
		c.t.Fatal(err)
	}
	c.agents[h.Name] = p
	return p
}

func (c *cluster) startAgents(extra ...string) {
	for _, n := range c.lab.Nodes() {
		c.startAgent(n, extra...)
	}
	c.t.Cleanup(func() {
		if c.t.Failed() {
			c.dumpLogs()
		}
	})
}

func (c *cluster) dumpLogs() {
	for _, n := range c.lab.Nodes() {
		b, _ := os.ReadFile(filepath.Join(c.dir, n.Name+".log"))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		c.t.Logf("---- %s agent log (last 40 lines) ----\n%s", n.Name, strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

// service creates a LoadBalancer Service with the given ingress addresses
// (written to status, as the LB-IPAM controller would).
func (c *cluster) service(name string, labels map[string]string, local bool, ips ...string) *corev1.Service {
	c.t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}}}}
	if local {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	created, err := c.env.Clientset.CoreV1().Services("default").Create(c.ctx, svc, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, ip := range ips {
		created.Status.LoadBalancer.Ingress = append(created.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	if created, err = c.env.Clientset.CoreV1().Services("default").UpdateStatus(c.ctx, created, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	return created
}

// endpoints writes the Service's EndpointSlice (there is no kubelet or
// endpointslice controller): one endpoint per node, ready or not.
func (c *cluster) endpoints(svc string, ready map[string]bool) {
	c.t.Helper()
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: svc + "-e2e", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080))}},
	}
	i := 0
	for _, n := range slices.Sorted(mapsKeys(ready)) {
		i++
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.10", i)},
			NodeName: ptr.To(n), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready[n])}})
	}
	api := c.env.Clientset.DiscoveryV1().EndpointSlices("default")
	if old, err := api.Get(c.ctx, es.Name, metav1.GetOptions{}); err == nil {
		es.ResourceVersion = old.ResourceVersion
		_, err = api.Update(c.ctx, es, metav1.UpdateOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		return
	}
	if _, err := api.Create(c.ctx, es, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (c *cluster) policy(name string, spec mooringv1.L2AnnouncementPolicySpec) {
	c.t.Helper()
	p := &mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if err := c.env.Client.Create(c.ctx, p); err != nil {
		c.t.Fatal(err)
	}
}

// responders asks from the client who answers for addr (one request,
// every reply collected).
func (c *cluster) responders(addr netip.Addr) []string {
	macs, err := netlab.Probe(c.ctx, c.lab.Client(), addr, 300*time.Millisecond)
	if err != nil {
		c.t.Fatalf("probing %s: %v", addr, err)
	}
	var names []string
	for _, m := range macs {
		names = append(names, c.nodeByMAC(m.String()))
	}
	return names
}

func (c *cluster) nodeByMAC(mac string) string {
	for _, n := range c.lab.Nodes() {
		if n.MAC.String() == mac {
			return n.Name
		}
	}
	return mac
}

// waitResponders polls until exactly want (node names, sorted) answer for
// addr; nil means nobody.
func (c *cluster) waitResponders(addr netip.Addr, want []string, within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	var got []string
	for time.Now().Before(deadline) {
		if got = c.responders(addr); slices.Equal(got, want) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("responders for %s: %v, want %v (after %v)", addr, got, want, within)
}

// scrape reads one metric's value from a node's agent (summed over labels);
// the connection is opened inside the node's namespace.
func (c *cluster) scrape(h *netlab.Host, metric string) (float64, error) {
	text, err := c.metrics(h)
	if err != nil {
		return 0, err
	}
	return sumMetric(strings.NewReader(text), metric)
}

// metrics fetches h's agent's /metrics from inside h.
func (c *cluster) metrics(h *netlab.Host) (string, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
		err = h.Do(func() error {
			conn, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(fmt.Sprintf("http://%s/metrics", net.JoinHostPort(h.Addr4.String(), fmt.Sprint(metricsPort))))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// sumMetric adds up every sample of metric in a Prometheus text exposition.
func sumMetric(r io.Reader, metric string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	found, sum := false, 0.0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric) {
			continue
		}
		rest := line[len(metric):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += v
			found = true
		}
	}
	if !found {
		return 0, errors.Join(sc.Err(), fmt.Errorf("metric %s not found", metric))
	}
	return sum, sc.Err()
}

// events returns the Events Mooring's components recorded on a Service.
// The API server's own controllers record some too (the ClusterIP repair
// loop's ClusterIPNotAllocated when a Service is created while it runs):
// they are not Mooring's writes, so they are left out.
func (c *cluster) events(svc string) []corev1.Event {
	evs, err := c.env.Clientset.CoreV1().Events("default").List(c.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + svc})
	if err != nil {
		c.t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range evs.Items {
		if strings.HasPrefix(e.ReportingController, "mooring") || strings.HasPrefix(e.Source.Component, "mooring") {
			out = append(out, e)
		}
	}
	return out
}

func (c *cluster) waitEvent(svc, reason string, within time.Duration) corev1.Event {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, e := range c.events(svc) {
			if e.Reason == reason {
				return e
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.t.Fatalf("no %s event on Service %s within %v; events: %v", reason, svc, within, c.events(svc))
	return corev1.Event{}
}
