package failover

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// DialFunc opens one connection, like (*net.Dialer).DialContext. It is the
// seam that puts the client where it must be: the lab passes one that dials
// from inside its client network namespace.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Clock is where timelines get their time. RealClock is the wall clock.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// RealClock is the wall clock.
type RealClock struct{}

// Now is time.Now.
func (RealClock) Now() time.Time { return time.Now() }

// After is time.After.
func (RealClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Target is what each request asks.
type Target struct {
	Addr netip.AddrPort
	// Scheme is "http" (default), "https" or "tcp" (connect only: for
	// Services that do not speak HTTP).
	Scheme string
	Path   string // default "/"
	// Host is the Host header and TLS server name; default the address.
	Host string
	// InsecureSkipVerify skips certificate verification for https; the
	// handshake itself is still made, so TLS failures still show.
	InsecureSkipVerify bool
}

// Validate checks the target.
func (t Target) Validate() error {
	if !t.Addr.IsValid() || t.Addr.Port() == 0 {
		return fmt.Errorf("target %v: need an address and a port", t.Addr)
	}
	switch t.Scheme {
	case "", "http", "https", "tcp":
	default:
		return fmt.Errorf("target scheme %q: use http, https or tcp", t.Scheme)
	}
	return nil
}

func (t Target) String() string {
	s := t.Scheme
	if s == "" {
		s = "http"
	}
	if s == "tcp" {
		return "tcp://" + t.Addr.String()
	}
	return s + "://" + t.Addr.String() + t.path()
}

func (t Target) path() string {
	if t.Path == "" {
		return "/"
	}
	return t.Path
}

func (t Target) host() string {
	if t.Host != "" {
		return t.Host
	}
	return t.Addr.Addr().Unmap().String()
}

// Result is one request: when it started, how long it took, what happened.
type Result struct {
	Start   time.Time
	Latency time.Duration
	Outcome Outcome
}

// End is when the request finished.
func (r Result) End() time.Time { return r.Start.Add(r.Latency) }

// Probe makes one request to t over a new connection from dial, bounded by
// timeout, and classifies it. ok is false when ctx ended first: the request
// says nothing about the target then and must not be counted.
func Probe(ctx context.Context, dial DialFunc, t Target, timeout time.Duration) (out Outcome, ok bool) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out = probe(rctx, dial, t)
	return out, ctx.Err() == nil
}

func probe(ctx context.Context, dial DialFunc, t Target) Outcome {
	conn, err := dial(ctx, "tcp", t.Addr.String())
	if err != nil {
		return ErrorOutcome(StageConnect, err)
	}
	defer conn.Close()
	if t.Scheme == "tcp" {
		return Outcome{Class: ClassOK}
	}
	// Deadlines, not just ctx: blocked reads only wake on a deadline.
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var rw io.ReadWriter = conn
	if t.Scheme == "https" {
		tc := tls.Client(conn, &tls.Config{ServerName: t.host(), InsecureSkipVerify: t.InsecureSkipVerify}) //nolint:gosec // opt-in, for lab certificates
		if err := tc.HandshakeContext(ctx); err != nil {
			return ErrorOutcome(StageTLS, err)
		}
		rw = tc
	}
	req := "GET " + t.path() + " HTTP/1.1\r\nHost: " + t.host() + "\r\nUser-Agent: mooring-failover\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(rw, req); err != nil {
		return ErrorOutcome(StageRequest, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(rw), nil)
	if err != nil {
		return ErrorOutcome(StageResponse, err)
	}
	defer resp.Body.Close()
	// Read the body: a backend dying mid-response is a failure too.
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)); err != nil {
		return ErrorOutcome(StageResponse, err)
	}
	return StatusOutcome(resp.StatusCode)
}

// Load sends requests to Target at Rate per second, each on its own
// connection with its own Timeout, and hands every counted Result to Record
// (from many goroutines at once).
type Load struct {
	Target  Target
	Rate    float64
	Timeout time.Duration
	Dial    DialFunc // nil: (&net.Dialer{}).DialContext
	Clock   Clock    // nil: RealClock
	Record  func(Result)
}

// Validate checks the load's settings.
func (l *Load) Validate() error {
	if err := l.Target.Validate(); err != nil {
		return err
	}
	if l.Rate <= 0 || l.Rate > 1000 {
		return fmt.Errorf("rate %v/s: use more than 0 and at most 1000", l.Rate)
	}
	if l.Timeout <= 0 {
		return fmt.Errorf("timeout %v: must be positive", l.Timeout)
	}
	if l.Record == nil {
		return errors.New("load: Record is nil")
	}
	return nil
}

// Run sends requests until ctx ends, then waits for the ones in flight and
// returns. Requests cut short by ctx are not recorded. Ticks are scheduled
// from the start, so a slow tick does not shift the ones after it.
func (l *Load) Run(ctx context.Context) error {
	if err := l.Validate(); err != nil {
		return err
	}
	clk := l.Clock
	if clk == nil {
		clk = RealClock{}
	}
	dial := l.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	interval := time.Duration(float64(time.Second) / l.Rate)
	var wg sync.WaitGroup
	defer wg.Wait()
	start := clk.Now()
	for i := 0; ; i++ {
		next := start.Add(time.Duration(i) * interval)
		if wait := next.Sub(clk.Now()); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-clk.After(wait):
			}
		} else if ctx.Err() != nil {
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := clk.Now()
			out, ok := Probe(ctx, dial, l.Target, l.Timeout)
			if ok {
				l.Record(Result{Start: t0, Latency: clk.Now().Sub(t0), Outcome: out})
			}
		}()
	}
}

// Recorder collects Results safely from many goroutines.
type Recorder struct {
	mu      sync.Mutex
	results []Result
}

// Add records r.
func (r *Recorder) Add(res Result) {
	r.mu.Lock()
	r.results = append(r.results, res)
	r.mu.Unlock()
}

// Snapshot returns a copy of what was recorded so far.
func (r *Recorder) Snapshot() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Result(nil), r.results...)
}
