package health_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mooringlb/mooring/internal/agent/health"
)

// freeAddr returns a loopback address no one listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(url)
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
}

// TestPprofOnItsOwnListener: --pprof-addr serves the heap profile; the
// metrics listener never serves profiles; an empty address serves nothing.
func TestPprofOnItsOwnListener(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	pp, metrics := freeAddr(t), freeAddr(t)
	done := make(chan error, 2)
	go func() { done <- health.ServePprof(ctx, pp, log) }()
	go func() {
		done <- health.Serve(ctx, metrics, prometheus.NewRegistry(), func() (string, error) { return "", nil }, log)
	}()
	if code, body := get(t, "http://"+pp+"/debug/pprof/heap?debug=1"); code != http.StatusOK || !strings.Contains(body, "heap profile") {
		t.Fatalf("--pprof-addr: %d %.200q", code, body)
	}
	if code, _ := get(t, "http://"+metrics+"/debug/pprof/heap?debug=1"); code != http.StatusNotFound {
		t.Fatalf("the metrics listener answered a profile request: %d", code)
	}
	if err := health.ServePprof(ctx, "", log); err != nil {
		t.Fatalf("empty address: %v", err)
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
