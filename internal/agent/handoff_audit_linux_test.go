//go:build linux

package agent_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooringlb/mooring/internal/netlab"
)

// The ARP/NDP audit of the hand-off tests: every 100 ms (startAuditEvery:
// any interval) the client asks who answers for each address (a probe
// that waits 80% of the interval for replies, so consecutive samples never
// overlap) and the audit counts the samples in which two nodes answered,
// and those in which two nodes answered in two samples in a row (longer
// than one audit interval).

type auditResult struct {
	samples int      // address samples (one per address per interval)
	double  []string // "<time> <addr>: <nodes>" for every sample with two or more responders
	// doubleRun are the samples with two or more responders whose
	// address had two or more in the sample before too.
	doubleRun []string
	none      int      // samples nobody answered (a hand-off gap; clients keep their cached entry)
	noneAt    []string // "<time> <addr>" of each
	// late are samples not counted: the probe returned more than one
	// interval after it began (the test process starved on the loaded
	// machine: a reply read after the window is dropped, so an empty
	// sample would say nothing about who answered).
	late int
}

func (r auditResult) String() string {
	return fmt.Sprintf("%d address samples, %d with two responders %v (%d of them in a row), %d with none %v, %d late (not counted)",
		r.samples, len(r.double), r.double, len(r.doubleRun), r.none, r.noneAt, r.late)
}

// startAudit samples addrs every 100 ms until the returned function is
// called, which returns the result.
func (c *cluster) startAudit(addrs ...netip.Addr) func() auditResult {
	c.t.Helper()
	return c.startAuditEvery(100*time.Millisecond, addrs...)
}

// startAuditEvery samples addrs every interval until the returned
// function is called, which returns the result.
func (c *cluster) startAuditEvery(every time.Duration, addrs ...netip.Addr) func() auditResult {
	c.t.Helper()
	return c.startAuditFrom(c.lab.Client(), every, addrs...)
}

// startAuditFrom is startAuditEvery from the host from. A spare node sees
// the answers to its own requests and the gratuitous ones only; the client
// also sees the answers to its own connections' resolutions, so a sample
// there also counts a node whose answer changed within the window.
func (c *cluster) startAuditFrom(from *netlab.Host, every time.Duration, addrs ...netip.Addr) func() auditResult {
	c.t.Helper()
	var (
		mu       sync.Mutex
		res      auditResult
		wasTwice = map[netip.Addr]bool{}
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-c.ctx.Done():
				return
			case <-tick.C:
			}
			var wg sync.WaitGroup
			for _, a := range addrs {
				wg.Go(func() {
					began := time.Now()
					macs, err := netlab.Probe(c.ctx, from, a, every*4/5)
					if err != nil {
						return
					}
					if time.Since(began) > every {
						mu.Lock()
						res.late++
						mu.Unlock()
						return
					}
					var names []string
					for _, m := range macs {
						names = append(names, c.nodeByMAC(m.String()))
					}
					mu.Lock()
					defer mu.Unlock()
					res.samples++
					at := time.Now().Format("15:04:05.000")
					switch {
					case len(names) > 1:
						res.double = append(res.double, fmt.Sprintf("%s %s: %v", at, a, names))
						if wasTwice[a] {
							res.doubleRun = append(res.doubleRun, fmt.Sprintf("%s %s: %v", at, a, names))
						}
					case len(names) == 0:
						res.none++
						res.noneAt = append(res.noneAt, at+" "+a.String())
					}
					wasTwice[a] = len(names) > 1
				})
			}
			wg.Wait()
		}
	}()
	return func() auditResult {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return res
	}
}

// terminate stops a node's agent the way the kubelet stops a pod: SIGTERM,
// then waits for it to exit (SIGKILL after 10 s, the grace period).
func (c *cluster) terminate(h *netlab.Host) {
	c.t.Helper()
	p := c.agents[h.Name]
	if err := unix.Kill(p.PID, unix.SIGTERM); err != nil {
		c.t.Fatalf("SIGTERM to %s's agent: %v", h.Name, err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		_ = unix.Kill(p.PID, unix.SIGQUIT) // a goroutine dump into its log
		select {
		case <-p.Done():
		case <-time.After(2 * time.Second):
			_ = p.Kill()
			<-p.Done()
		}
		b, _ := os.ReadFile(filepath.Join(c.dir, h.Name+".log"))
		dump := string(b)
		if i := strings.LastIndex(dump, "SIGQUIT"); i >= 0 {
			dump = dump[i:]
		}
		c.t.Errorf("%s's agent did not exit within 10 s of SIGTERM:\n%s", h.Name, dump)
	}
}

// waitReadyz waits until the agent's /readyz answers 200 and returns the
// body.
func (c *cluster) waitReadyz(h *netlab.Host, within time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		code, body, err := c.get(h, "/readyz")
		if err == nil && code == 200 {
			return body
		}
		last = fmt.Sprint(code, " ", body, " ", err)
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("%s /readyz not ready within %v: %s", h.Name, within, last)
	return ""
}
