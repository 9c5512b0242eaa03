package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooringlb/mooring/internal/netlab"
)

// poll calls cond every interval until it returns true, an error, or ctx
// ends.
func poll(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// waitAPIServer polls /readyz through the host's forwarder (which proves
// the forwarder too) until the apiserver is ready.
func (c *Cluster) waitAPIServer(ctx context.Context) error {
	var last error
	errExited := errors.New("lab: the control plane exited while starting (its log tail is above)")
	err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		if c.exited("kube-apiserver") || c.exited("etcd") {
			return false, errExited
		}
		// One attempt per tick: client-go would otherwise retry a reset
		// connection for seconds inside one call.
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, last = c.cs.Discovery().RESTClient().Get().AbsPath("/readyz").MaxRetries(0).DoRaw(cctx)
		return last == nil, nil
	})
	if errors.Is(err, errExited) {
		return err
	}
	if err != nil {
		return fmt.Errorf("lab: waiting for kube-apiserver /readyz (last: %v): %w", last, err)
	}
	return nil
}

// waitReady waits for every Node Ready, both echo pods Ready and in the
// EndpointSlice, the Service's address (with Mooring), and finally for one
// HTTP answer through the Service: from the client to the LoadBalancer
// address, or without Mooring from the last node to the ClusterIP; in the
// BGP lab also for every node's session at the router to settle
// (bgpSettled).
func (c *Cluster) waitReady(ctx context.Context) (*Ready, error) {
	var stage, lastStage string
	var said time.Time
	seen := map[string]bool{} // pods that answered through the Service
	var svc *corev1.Service
	// With MetalLB, MetalLB gives the Service its LoadBalancer address.
	mooring := c.cfg.Mooring || c.cfg.MetalLB != ""
	warned := false
	err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		if c.cfg.MetalLB == "" && mooring && c.exited("mooring-controller") {
			if !warned {
				c.log.Warn("mooring controller exited: the Service gets no address; checking the ClusterIP path only",
					"log", c.paths.Logs+"/"+logName("mooring-controller"))
				warned = true
			}
			mooring = false
		}
		select {
		case err := <-c.objErr:
			if err != nil {
				return false, err
			}
			c.objErr = nil
		default:
		}
		var ok bool
		var err error
		switch {
		case !c.nodesReady(ctx, &stage):
		case !c.endpointsReady(ctx, &stage):
		default:
			svc, err = c.cs.CoreV1().Services(DemoNamespace).Get(ctx, DemoService, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			ok = c.serviceAnswers(ctx, svc, mooring, seen, &stage) && c.bgpSettled(ctx, &stage)
		}
		// Say what the lab waits for when it changes, and again every
		// 10 s while it does not: a slow start is never silent.
		if stage != lastStage || time.Since(said) >= 10*time.Second {
			c.log.Info("waiting", "for", stage, "elapsed", time.Since(c.start).Round(time.Millisecond))
			lastStage, said = stage, time.Now()
		}
		return ok, nil
	})
	if err != nil {
		return nil, fmt.Errorf("lab: not ready after %v (waiting for %s): %w",
			time.Since(c.start).Round(time.Millisecond), stage, err)
	}
	r := &Ready{Kubeconfig: c.paths.Kubeconfig, Elapsed: time.Since(c.start), Cluster: c}
	if k := filepath.Join(c.cfg.KubeBin, "kubectl"); isExecFile(k) {
		if err := os.Symlink(k, filepath.Join(c.paths.Bin, "kubectl")); err == nil || errors.Is(err, os.ErrExist) {
			r.KubectlDir = c.paths.Bin
		}
	}
	r.Service = ServiceState{Namespace: DemoNamespace, Name: DemoService, ClusterIP: svc.Spec.ClusterIPs, Port: DemoPort}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		r.Service.Ingress = append(r.Service.Ingress, in.IP)
	}
	r.URL, r.From = c.serviceURL(svc, mooring)
	c.progress("lab ready")
	return r, nil
}

func (c *Cluster) nodesReady(ctx context.Context, stage *string) bool {
	*stage = "nodes to be Ready"
	nodes, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	ready := 0
	for _, n := range nodes.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	return ready == len(c.nodes)
}

func (c *Cluster) endpointsReady(ctx context.Context, stage *string) bool {
	*stage = "both echo pods to be ready endpoints"
	list, err := c.cs.DiscoveryV1().EndpointSlices(DemoNamespace).List(ctx,
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + DemoService})
	if err != nil {
		return false
	}
	ready := 0
	for _, s := range list.Items {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				ready++
			}
		}
	}
	return ready >= 2
}

// serviceAnswers sends a few requests through the Service and records
// which pods answered in seen. The Service is ready once both echo pods
// have answered: then every node's kube-proxy on the path has both
// endpoints, not just the first one it heard of (it syncs at most once a
// second).
func (c *Cluster) serviceAnswers(ctx context.Context, svc *corev1.Service, mooring bool, seen map[string]bool, stage *string) bool {
	if mooring && len(svc.Status.LoadBalancer.Ingress) == 0 {
		*stage = "the Service's LoadBalancer address"
		return false
	}
	url, from := c.serviceURL(svc, mooring)
	*stage = "answers from both echo pods through " + url + " in " + from
	// Short timeouts: in the lab an answer takes a millisecond, and a SYN
	// sent before kube-proxy has the rule is lost (TCP would retry it only
	// after a second), so a fresh connection soon is quicker.
	for range 4 {
		body, err := HTTPGet(ctx, c.host(from), url, 300*time.Millisecond)
		if err != nil {
			return false
		}
		if f := strings.Fields(body); len(f) > 0 {
			seen[f[0]] = true
		}
		if len(seen) >= 2 {
			return true
		}
	}
	return false
}

// serviceURL is how to reach the Service and from where: its first
// LoadBalancer address from the client, else its ClusterIP from the last
// node (a ClusterIP is only routed inside the cluster).
func (c *Cluster) serviceURL(svc *corev1.Service, mooring bool) (url, from string) {
	if mooring && len(svc.Status.LoadBalancer.Ingress) > 0 {
		return hostURL(svc.Status.LoadBalancer.Ingress[0].IP, DemoPort), netlab.ClientName
	}
	return hostURL(svc.Spec.ClusterIP, DemoPort), c.nodes[len(c.nodes)-1].Name
}

// HTTPGet sends one GET from inside h with a new connection, as a client on
// that host would, and returns the body.
func HTTPGet(ctx context.Context, h *netlab.Host, url string, timeout time.Duration) (string, error) {
	if h == nil {
		return "", fmt.Errorf("lab: no host to send from")
	}
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			if _, err := netip.ParseAddrPort(addr); err != nil {
				return nil, fmt.Errorf("lab: %s is not an address: the lab resolves no names", addr)
			}
			return dialIn(ctx, h, addr)
		},
	}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: timeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("lab: GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}
