package labtest

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mooringlb/mooring/internal/doctor/gather"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/netlab"
)

// AgentMetricsPort is where the lab's agents serve /metrics and /readyz
// (the agent's default --metrics-addr).
const AgentMetricsPort = 9473

// HTTPClient is an HTTP client whose connections leave from host's
// network namespace.
func HTTPClient(host *netlab.Host, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := host.Do(func() error {
				var err error
				c, err = (&net.Dialer{Timeout: timeout}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}}
}

// DoctorOptions are `mooring doctor`'s inputs as an operator on the lab's
// client machine has them: each agent's /metrics and /readyz over HTTP
// from the client namespace (AgentMetricsPort on the node's InternalIP),
// and the ARP/NDP audit asked from the client's eth0.
func DoctorOptions(r *lab.Ready, reader client.Reader) gather.Options {
	host := r.Cluster.Host(r.From)
	hc := HTTPClient(host, 2*time.Second)
	get := func(ctx context.Context, n *corev1.Node, path string) (int, []byte, error) {
		var ip string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
				break
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(ip, strconv.Itoa(AgentMetricsPort))+path, nil)
		if err != nil {
			return 0, nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		return resp.StatusCode, b, err
	}
	return gather.Options{
		Reader:  reader,
		Metrics: gather.AgentMetrics(get), Readyz: gather.AgentReadyz(get),
		Interface: "eth0 of " + r.From,
		Responders: func(ctx context.Context, addrs []netip.Addr) (map[netip.Addr][]net.HardwareAddr, error) {
			return Responders(ctx, host, addrs)
		},
	}
}
