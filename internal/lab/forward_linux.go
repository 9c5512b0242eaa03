package lab

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/mooringlb/mooring/internal/netlab"
)

// forwarder carries TCP from a listener in the machine's own namespace
// (127.0.0.1:<port>, where kubectl runs) to an address inside a lab host,
// dialling from that host's worker thread so the socket belongs to the
// host's namespace. It is how the host reaches the apiserver without the
// lab touching the machine's own links.
type forwarder struct {
	ln     net.Listener
	host   *netlab.Host
	target netip.AddrPort
	log    *slog.Logger
}

// dialIn opens a TCP connection from inside h. The connect to an address of
// the lab is immediate or refused, so holding h's only thread is short.
func dialIn(ctx context.Context, h *netlab.Host, addr string) (net.Conn, error) {
	var conn net.Conn
	err := h.Do(func() error {
		d := net.Dialer{Timeout: 2 * time.Second}
		var err error
		conn, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return conn, err
}

// Run serves until ctx ends, then closes the listener and every connection.
func (f *forwarder) Run(ctx context.Context) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = struct{}{}
		} else {
			delete(conns, c)
		}
	}
	go func() {
		<-ctx.Done()
		f.ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	defer wg.Wait()
	for {
		in, err := f.ln.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				f.log.Warn("forwarder stopped accepting", "err", err)
			}
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := dialIn(ctx, f.host, f.target.String())
			if err != nil {
				in.Close()
				return
			}
			track(in, true)
			track(out, true)
			pipe(in, out)
			track(in, false)
			track(out, false)
		}()
	}
}

// pipe copies both ways until either side ends, then closes both.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
}
