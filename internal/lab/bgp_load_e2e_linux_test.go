package lab_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/netlab"
)

// request is one request of the BGP restart tests' client.
type request struct {
	start time.Time
	url   string
	kept  bool  // on a kept-alive connection
	err   error // nil: answered 200
	// redialed: a kept connection broke and had to be dialled again
	// (Go's transport retries a GET on a new connection by itself, so
	// the request may still have been answered).
	redialed bool
}

func (r request) String() string {
	how := "new connection"
	if r.kept {
		how = "kept connection"
	}
	if r.redialed {
		how += ", redialed"
	}
	return fmt.Sprintf("%s %s (%s): %v", r.start.Format("15:04:05.000"), r.url, how, r.err)
}

// loadResult is every request the client sent, in start order.
type loadResult []request

// failed are the requests that failed and started outside every one of
// the windows skip (pairs of times).
func (l loadResult) failed(skip ...time.Time) []request {
	return l.outside(func(r request) bool { return r.err != nil }, skip)
}

// broken are the requests whose kept connection broke (answered or not)
// and started outside every one of the windows skip. A route change
// breaks kept connections (their packets reach another node, which has no
// conntrack entry for them), but so does an agent's conntrack clean-up
// after a node it believes dead (a false death on a starved machine).
func (l loadResult) broken(skip ...time.Time) []request {
	return l.outside(func(r request) bool { return r.redialed }, skip)
}

func (l loadResult) outside(bad func(request) bool, skip []time.Time) []request {
	var out []request
	for _, r := range l {
		if !bad(r) {
			continue
		}
		in := false
		for i := 0; i+1 < len(skip); i += 2 {
			in = in || !r.start.Before(skip[i]) && !r.start.After(skip[i+1])
		}
		if !in {
			out = append(out, r)
		}
	}
	return out
}

func (l loadResult) String() string {
	var fail, redial int
	for _, r := range l {
		if r.err != nil {
			fail++
		}
		if r.redialed {
			redial++
		}
	}
	return fmt.Sprintf("%d requests, %d failed, %d kept connections broken", len(l), fail, redial)
}

// lines renders requests one a line.
func lines(rs []request) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.String() + "\n")
	}
	return b.String()
}

// load sends 20 requests a second from the client behind the router to
// the demo Service's two addresses (or its one) until stopped: 10 a second on a new
// connection each (many short clients), and 10 a second on six kept
// connections (three per family, each its own source port and so its own
// ECMP hash at the router): a kept connection breaks when its packets move
// to another next hop, which new connections would not notice.
func (b *bgpLab) load() (stop func() loadResult) {
	ctx, cancel := context.WithCancel(b.ctx)
	client := b.r.Cluster.Host(netlab.ClientName)
	var addrs []netip.Addr
	for _, p := range []netip.Prefix{b.vip4, b.vip6} {
		if p.IsValid() {
			addrs = append(addrs, p.Addr())
		}
	}
	urls := labtest.URLs(addrs)
	var mu sync.Mutex
	var res loadResult
	var wg sync.WaitGroup
	run := func(u string, keep bool, interval time.Duration) {
		wg.Go(func() {
			rs := requester(ctx, client, u, keep, interval)
			mu.Lock()
			res = append(res, rs...)
			mu.Unlock()
		})
	}
	for _, u := range urls { // 10 a second in all
		run(u, false, time.Duration(len(urls))*100*time.Millisecond)
	}
	for i := range 6 {
		run(urls[i%len(urls)], true, 600*time.Millisecond)
	}
	return func() loadResult {
		cancel()
		wg.Wait()
		sort.Slice(res, func(i, j int) bool { return res[i].start.Before(res[j].start) })
		return res
	}
}

// requester sends a GET to u every interval from host until ctx ends, on
// one kept-alive connection (keep) or a new one each time.
func requester(ctx context.Context, host *netlab.Host, u string, keep bool, interval time.Duration) []request {
	dials := 0 // one request at a time: no lock needed
	tr := &http.Transport{DisableKeepAlives: !keep, MaxIdleConnsPerHost: 1,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials++
			var c net.Conn
			err := host.Do(func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Timeout: 3 * time.Second, Transport: tr}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var out []request
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		r := request{start: time.Now(), url: u, kept: keep}
		before := dials
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := cl.Do(req)
		if ctx.Err() != nil {
			return out
		}
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s", resp.Status)
			}
		}
		r.err, r.redialed = err, keep && before > 0 && dials > before
		out = append(out, r)
	}
}
