package failover

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// serverMode is how the loopback test server treats a connection.
type serverMode int32

const (
	modeOK     serverMode = iota
	modeAlt503            // every other response is a 503: a stale backend behind the address
	mode503
	modeHang  // accept, never answer
	modeReset // accept, then RST
	modeClose // accept, then close without a response
)

// loopServer is a raw HTTP/1.1 server on 127.0.0.1 that a test can stop
// (connection refused), restart on the same port, and switch between modes.
type loopServer struct {
	t    *testing.T
	addr netip.AddrPort
	mode atomic.Int32
	n    atomic.Int64

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newLoopServer(t *testing.T) *loopServer {
	t.Helper()
	s := &loopServer{t: t, conns: map[net.Conn]bool{}}
	s.start("127.0.0.1:0")
	s.addr = netip.MustParseAddrPort(s.ln.Addr().String())
	t.Cleanup(func() { s.stop(); s.wg.Wait() })
	return s
}

func (s *loopServer) setMode(m serverMode) { s.mode.Store(int32(m)) }

func (s *loopServer) start(addr string) {
	s.t.Helper()
	var ln net.Listener
	var err error
	// The port was just released by stop; allow a few tries (bounded).
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("listen %s: %v", addr, err)
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = true
			s.mu.Unlock()
			s.wg.Go(func() { s.serve(c) })
		}
	})
}

func (s *loopServer) restart() { s.start(s.addr.String()) }

// stop closes the listener and every open connection: new connections are
// refused.
func (s *loopServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
		s.ln = nil
	}
	for c := range s.conns {
		c.Close()
	}
	clear(s.conns)
}

func (s *loopServer) serve(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	mode := serverMode(s.mode.Load())
	switch mode {
	case modeHang:
		buf := make([]byte, 512)
		for { // until the client gives up or stop closes us
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	case modeReset:
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		return
	case modeClose:
		_, _ = http.ReadRequest(bufio.NewReader(c))
		return
	}
	if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
		return
	}
	status := "200 OK"
	if mode == mode503 || (mode == modeAlt503 && s.n.Add(1)%2 == 0) {
		status = "503 Service Unavailable"
	}
	_, _ = c.Write([]byte("HTTP/1.1 " + status + "\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"))
}

// blackholeDial wraps a dialer: while on is set, dials hang until their
// context ends, as when nobody answers ARP for the address.
type blackholeDial struct {
	on atomic.Bool
}

func (b *blackholeDial) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if b.on.Load() {
		<-ctx.Done()
		return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

// t0 and ts give readable instants for pure tests.
var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func ts(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
