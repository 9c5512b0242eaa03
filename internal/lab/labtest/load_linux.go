package labtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/arpprobe"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/netlab"
)

// LBServices creates n IPv4 LoadBalancer Services without a class
// (lb-01, lb-02, ...) in front of the lab's echo pods and waits until each
// has an address; it returns the addresses in Service order.
func LBServices(t *testing.T, ctx context.Context, cs kubernetes.Interface, n int, timeout time.Duration) []netip.Addr {
	t.Helper()
	for i := range n {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lb-%02d", i+1), Namespace: lab.DemoNamespace},
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeLoadBalancer,
				Selector: map[string]string{"app": "echo"},
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: lab.DemoPort,
					TargetPort: intstr.FromInt32(lab.EchoPort)}},
			},
		}
		if _, err := cs.CoreV1().Services(lab.DemoNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]netip.Addr, n)
	deadline := time.Now().Add(timeout)
	for i := 0; i < n; {
		s, err := cs.CoreV1().Services(lab.DemoNamespace).Get(ctx, fmt.Sprintf("lb-%02d", i+1), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Status.LoadBalancer.Ingress) > 0 {
			out[i] = netip.MustParseAddr(s.Status.LoadBalancer.Ingress[0].IP)
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("Service %s has no LoadBalancer address after %v", s.Name, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return out
}

// Load sends GETs to every URL from a lab host, each URL on its own at a
// fixed interval, with a new connection per request (as many clients
// would), and counts answers and failures.
type Load struct {
	Host     *netlab.Host
	URLs     []string
	Interval time.Duration
	Timeout  time.Duration

	mu       sync.Mutex
	ok, fail int
	failures []string
	wg       sync.WaitGroup
}

// Start runs the load until ctx ends or Stop.
func (l *Load) Start(ctx context.Context) {
	for _, u := range l.URLs {
		l.wg.Go(func() {
			cl := &http.Client{Timeout: l.Timeout, Transport: &http.Transport{DisableKeepAlives: true,
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					var c net.Conn
					err := l.Host.Do(func() error {
						var err error
						c, err = (&net.Dialer{Timeout: l.Timeout}).DialContext(ctx, network, addr)
						return err
					})
					return c, err
				}}}
			t := time.NewTicker(l.Interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
				resp, err := cl.Do(req)
				if ctx.Err() != nil {
					return
				}
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("%s", resp.Status)
					}
				}
				l.mu.Lock()
				if err != nil {
					l.fail++
					l.failures = append(l.failures, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), u, err))
				} else {
					l.ok++
				}
				l.mu.Unlock()
			}
		})
	}
}

// Wait waits for every sender to stop (after ctx ended).
func (l *Load) Wait() { l.wg.Wait() }

// Totals are the answers and failures so far, with the failures' text.
func (l *Load) Totals() (ok, fail int, failures []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok, l.fail, append([]string(nil), l.failures...)
}

// URLs renders http://addr/ for each address.
func URLs(addrs []netip.Addr) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = "http://" + netip.AddrPortFrom(a, lab.DemoPort).String() + "/"
	}
	return out
}

// Responders counts ARP/NDP answers per address from host's eth0. The
// sockets are opened on the host's thread (in its namespace) and the
// families probed in parallel outside it: the probe's wait does not hold
// the thread that a Load running from the same host dials on.
func Responders(ctx context.Context, host *netlab.Host, addrs []netip.Addr) (map[netip.Addr][]net.HardwareAddr, error) {
	ifi, err := host.Interface()
	if err != nil {
		return nil, err
	}
	var conns []net.PacketConn
	var want [][]netip.Addr
	err = host.Do(func() error {
		for _, fam := range []arpprobe.Family{arpprobe.IPv4, arpprobe.IPv6} {
			as := slices.DeleteFunc(slices.Clone(addrs), func(a netip.Addr) bool { return arpprobe.FamilyOf(a) != fam })
			if len(as) == 0 {
				continue
			}
			c, err := arpprobe.Listen(ifi, fam)
			if err != nil {
				return err
			}
			conns, want = append(conns, c), append(want, as)
		}
		return nil
	})
	if err != nil {
		for _, c := range conns {
			c.Close()
		}
		return nil, err
	}
	// From the host's own addresses: MetalLB's NDP responder ignores a
	// solicitation without a source link-layer address, which a
	// DAD-style one (from ::) may not carry.
	opts := arpprobe.Options{Wait: 300 * time.Millisecond, Src4: host.Addr4, Src6: host.Addr6}
	res := make([]arpprobe.Result, len(conns))
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { res[i], errs[i] = arpprobe.ProbeConn(ctx, c, ifi.HardwareAddr, want[i], opts) })
	}
	wg.Wait()
	out := arpprobe.Result{}
	for _, r := range res {
		maps.Copy(out, r)
	}
	return out, errors.Join(errs...)
}

// OneResponderEach fails unless every address has exactly one responder;
// it returns the responders' MACs by address.
func OneResponderEach(ctx context.Context, host *netlab.Host, addrs []netip.Addr) (map[netip.Addr]string, error) {
	res, err := Responders(ctx, host, addrs)
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]string{}
	var bad []string
	for _, a := range addrs {
		macs := res[a]
		if len(macs) != 1 {
			var ms []string
			for _, m := range macs {
				ms = append(ms, m.String())
			}
			bad = append(bad, fmt.Sprintf("%s: %d responders [%s]", a, len(macs), strings.Join(ms, " ")))
			continue
		}
		out[a] = macs[0].String()
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return out, nil
}
