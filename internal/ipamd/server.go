package ipamd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Wire protocol: one JSON Request per connection on a unix socket, one
// JSON Response back, then the server closes. No HTTP: the plugin is a
// process started per call, and every millisecond of its start-up and
// round trip is a millisecond of pod start. The client writes and reads
// these documents without reflection (wire.go); a field added here must
// be added there too (TestWireKnowsEveryField fails until it is).
type Request struct {
	Op string `json:"op"` // add, del, check, gc, status
	// TimeoutMs is how long the plugin waits for the answer: the server
	// gives up at that point too, so an ADD never completes after the
	// plugin (and the runtime) stopped waiting for it. 0: connTimeout.
	TimeoutMs int64       `json:"timeoutMs,omitempty"`
	Add       *AddRequest `json:"add,omitempty"`
	Key       *Key        `json:"key,omitempty"`
	GC        *GCRequest  `json:"gc,omitempty"`
}

// Response answers a Request: Error is set when it failed.
type Response struct {
	Error      *ErrorBody  `json:"error,omitempty"`
	Allocation *Allocation `json:"allocation,omitempty"`
	GC         *GCResponse `json:"gc,omitempty"`
}

// Operations.
const (
	OpAdd    = "add"
	OpDel    = "del"
	OpCheck  = "check"
	OpGC     = "gc"
	OpStatus = "status"
)

// Error kinds on the wire, so the plugin maps them to CNI codes.
const (
	KindNoBlock     = "no-block"
	KindNotFound    = "not-found"
	KindBad         = "bad-request"
	KindInternal    = "internal"
	KindUnavailable = "unavailable" // ErrUnavailable: retry
	KindNoPool      = "no-pool"     // ErrNoPool
	KindExhausted   = "exhausted"   // ErrPoolExhausted
)

// ErrorBody is a failed call's error.
type ErrorBody struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// GCRequest lists the attachments of one network the runtime still has.
// A GC frees only allocations of Network; Valid must be present (an empty
// list frees every allocation of the network, a missing one frees
// nothing).
type GCRequest struct {
	Network string `json:"network"`
	Valid   []Key  `json:"valid"`
}

// GCResponse lists what GC freed.
type GCResponse struct {
	Freed []Allocation `json:"freed"`
}

// Server serves an Allocator on a unix socket.
type Server struct {
	Alloc  *Allocator
	Socket string
	Log    *slog.Logger
	// Observe, when set, is called with each call's timings after its
	// answer is written (on the call's goroutine, so it must be quick).
	Observe func(CallTimes)
	// AddFailed, when set, is called with every failed ADD after its
	// answer is written, so the caller can tell the pod (an Event): the
	// runtime keeps the CNI error in the kubelet's log only.
	AddFailed func(AddRequest, error)
}

// CallTimes is when the server reached each phase of one call: the
// latency benchmark splits a CNI ADD with it.
type CallTimes struct {
	Op  string
	Key Key
	// Accepted: Accept returned the connection. Decoded: the request is
	// read. Handled: the allocator answered (the journal append included).
	// Replied: the answer is written to the socket.
	Accepted, Decoded, Handled, Replied time.Time
}

// connTimeout bounds one connection: a stuck plugin cannot hold a
// goroutine. A request's own TimeoutMs shortens it.
const connTimeout = 30 * time.Second

// MaxRequestBytes bounds one request: a GC listing 10,000 attachments
// takes about 1 MB. A larger one is refused without being read whole.
const MaxRequestBytes = 4 << 20

// Run listens on the socket (replacing a stale one: the store's lock proves
// no other ipamd runs) and serves until ctx ends; it then waits for the
// calls in flight, so an answered ADD is always saved, and removes the
// socket.
func (s *Server) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(s.Socket), 0o755); err != nil {
		return fmt.Errorf("ipamd: socket folder: %w", err)
	}
	_ = os.Remove(s.Socket)
	l, err := net.Listen("unix", s.Socket)
	if err != nil {
		return fmt.Errorf("ipamd: listen on %s: %w", s.Socket, err)
	}
	if err := os.Chmod(s.Socket, 0o600); err != nil {
		l.Close()
		return err
	}
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		conn, err := l.Accept()
		if err != nil {
			wg.Wait()
			_ = os.Remove(s.Socket)
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("ipamd: accept: %w", err)
		}
		accepted := time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serve(ctx, conn, accepted)
		}()
	}
}

// serve answers one connection. The call runs until the plugin's deadline
// (TimeoutMs from when the connection was accepted, at most connTimeout),
// not until the agent's context ends: an agent stopping finishes the calls
// it accepted (Run waits for them), so an answered ADD is always saved,
// while an ADD whose plugin gave up is abandoned, not completed late.
func (s *Server) serve(ctx context.Context, conn net.Conn, accepted time.Time) {
	defer conn.Close()
	_ = conn.SetDeadline(accepted.Add(connTimeout))
	req, err := decodeRequest(conn)
	if err != nil {
		_ = json.NewEncoder(conn).Encode(Response{Error: &ErrorBody{Kind: KindBad, Message: err.Error()}})
		return
	}
	decoded := time.Now()
	deadline := accepted.Add(connTimeout)
	if t := time.Duration(req.TimeoutMs) * time.Millisecond; t > 0 && t < connTimeout {
		deadline = accepted.Add(t)
	}
	_ = conn.SetDeadline(deadline)
	callCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	resp, key := s.handle(callCtx, req)
	cancel()
	handled := time.Now()
	_ = json.NewEncoder(conn).Encode(resp)
	if s.Observe != nil {
		s.Observe(CallTimes{Op: req.Op, Key: key, Accepted: accepted, Decoded: decoded, Handled: handled, Replied: time.Now()})
	}
	if resp.Error != nil && s.Log != nil && req.Op != OpStatus {
		s.Log.Debug("ipamd request failed", "op", req.Op, "network", key.Network, "container", key.ContainerID, "ifname", key.IfName, "err", resp.Error.Message)
	}
}

// decodeRequest reads one request of at most MaxRequestBytes.
func decodeRequest(conn net.Conn) (Request, error) {
	var req Request
	lr := &io.LimitedReader{R: conn, N: MaxRequestBytes + 1}
	err := json.NewDecoder(lr).Decode(&req)
	if lr.N <= 0 {
		return Request{}, fmt.Errorf("%w: the request is larger than %d bytes", ErrBadRequest, MaxRequestBytes)
	}
	return req, err
}

func (s *Server) handle(ctx context.Context, req Request) (Response, Key) {
	var k Key
	if req.Key != nil {
		k = *req.Key
	}
	switch {
	case req.Op == OpAdd && req.Add != nil:
		al, err := s.Alloc.Add(ctx, *req.Add)
		if err != nil && s.AddFailed != nil {
			defer s.AddFailed(*req.Add, err)
		}
		return reply(&al, err), req.Add.Key
	case req.Op == OpDel && req.Key != nil:
		return reply(nil, s.Alloc.Del(k)), k
	case req.Op == OpCheck && req.Key != nil:
		al, err := s.Alloc.Get(k)
		return reply(&al, err), k
	case req.Op == OpGC && req.GC != nil:
		freed, err := s.Alloc.GC(req.GC.Network, req.GC.Valid)
		// Every GC is logged, freeing or not: runtimes call it rarely, and
		// whether one calls it at all decides what frees a sandbox it
		// forgot (containerd v2.4.2 never does: docs/podipam.md).
		if err != nil && s.Log != nil {
			s.Log.Warn("CNI GC refused", "network", req.GC.Network, "err", err)
		} else if s.Log != nil {
			s.Log.Info("CNI GC served", "network", req.GC.Network, "valid", len(req.GC.Valid), "freed", len(freed))
		}
		r := reply(nil, err)
		if err == nil {
			r.GC = &GCResponse{Freed: freed}
		}
		return r, k
	case req.Op == OpStatus:
		return reply(nil, s.Alloc.Status()), k
	}
	return Response{Error: &ErrorBody{Kind: KindBad, Message: fmt.Sprintf("unknown or incomplete request %q", req.Op)}}, k
}

func reply(al *Allocation, err error) Response {
	if err == nil {
		return Response{Allocation: al}
	}
	body := &ErrorBody{Kind: KindInternal, Message: err.Error()}
	switch {
	case errors.Is(err, ErrNoBlock):
		body.Kind = KindNoBlock
	case errors.Is(err, ErrNotFound):
		body.Kind = KindNotFound
	case errors.Is(err, ErrBadRequest):
		body.Kind = KindBad
	case errors.Is(err, ErrUnavailable):
		body.Kind = KindUnavailable
	case errors.Is(err, ErrNoPool):
		body.Kind = KindNoPool
	case errors.Is(err, ErrPoolExhausted):
		body.Kind = KindExhausted
	}
	return Response{Error: body}
}
