package cluster

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// Traffic requests URL every Interval for the whole migration and counts
// failures (any transport error or 5xx), keeping the error class, not only
// a status code (field notes: curl's 000 hides why).
type Traffic struct {
	URL      string
	Interval time.Duration
	Client   *http.Client

	mu       sync.Mutex
	ok, fail int
	failed   int // failures since the last check
	lastErr  string
	done     int // requests finished (Drain)
}

// Run requests until ctx ends.
func (t *Traffic) Run(ctx context.Context) {
	tick := time.NewTicker(t.Interval)
	defer tick.Stop()
	for {
		t.once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (t *Traffic) once(ctx context.Context) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	var msg string
	if err == nil {
		var resp *http.Response
		resp, err = t.Client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode >= 500 {
				msg = resp.Status
			}
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		msg = err.Error()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done++
	if msg == "" {
		t.ok++
		return
	}
	t.fail++
	t.failed++
	t.lastErr = msg
}

// FailuresSinceLastCheck returns and resets the failures counted since the
// previous call, with the last error.
func (t *Traffic) FailuresSinceLastCheck() (int, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, e := t.failed, t.lastErr
	t.failed = 0
	return n, e
}

// Totals returns every success and failure so far.
func (t *Traffic) Totals() (ok, fail int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ok, t.fail
}

// Drain waits until the request in flight now and the next one have
// finished (at most twice the client's timeout and interval), then
// returns the failures since the last check as FailuresSinceLastCheck
// does: a request that was in flight at the last step's check and failed
// after it would otherwise go unseen. ok is false when the requests did
// not finish in time (Run stopped, or ctx ended).
func (t *Traffic) Drain(ctx context.Context) (failed int, last string, ok bool) {
	t.mu.Lock()
	want := t.done + 2
	t.mu.Unlock()
	limit := time.NewTimer(2 * (t.Client.Timeout + t.Interval + time.Second))
	defer limit.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		t.mu.Lock()
		finished := t.done >= want
		t.mu.Unlock()
		if finished {
			failed, last = t.FailuresSinceLastCheck()
			return failed, last, true
		}
		select {
		case <-ctx.Done():
			return 0, "", false
		case <-limit.C:
			return 0, "", false
		case <-poll.C:
		}
	}
}
