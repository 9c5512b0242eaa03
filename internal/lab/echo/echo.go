// Package echo is the lab's only pod image: an HTTP server that answers
// every request with the pod's and node's names, so a client can tell which
// backend served it. The kubelet stand-in runs it as `mooring lab echo` in
// each pod's network namespace.
package echo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/mooringlb/mooring/internal/serve"
)

// Config is what Run needs.
type Config struct {
	Port                 int
	Pod, Namespace, Node string
	// ReadyFD, when > 0, is a pipe to write one byte to once listening. It
	// also says Run is in a fresh pod namespace: IPv6 duplicate address
	// detection is turned off there first (see kubelet.startPodProcess).
	ReadyFD int
	Log     *slog.Logger
}

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Port < 1 || cfg.Port > 65535 {
		return fmt.Errorf("echo: --port %d: use 1..65535", cfg.Port)
	}
	if cfg.ReadyFD > 0 {
		for _, k := range []string{"all", "default"} {
			p := "/proc/sys/net/ipv6/conf/" + k + "/accept_dad"
			if err := os.WriteFile(p, []byte("0"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("echo: %s: %w", p, err)
			}
		}
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(cfg.Port))
	if err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	if cfg.ReadyFD > 0 {
		f := os.NewFile(uintptr(cfg.ReadyFD), "ready")
		_, err := f.Write([]byte{1})
		f.Close()
		if err != nil {
			ln.Close()
			return fmt.Errorf("echo: reporting ready: %w", err)
		}
	}
	cfg.Log.Info("echo server listening", "addr", ln.Addr(), "pod", cfg.Pod, "node", cfg.Node)
	srv := &http.Server{Handler: handler(cfg), ReadHeaderTimeout: 5 * time.Second}
	return serve.HTTP(ctx, srv, ln)
}

// handler answers "pod=<ns>/<name> node=<node> client=<addr>".
func handler(cfg Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Pod", cfg.Pod)
		w.Header().Set("X-Node", cfg.Node)
		fmt.Fprintf(w, "pod=%s/%s node=%s client=%s\n", cfg.Namespace, cfg.Pod, cfg.Node, r.RemoteAddr)
	})
}
