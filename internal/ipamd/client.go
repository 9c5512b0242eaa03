package ipamd

import (
	"context"
	"fmt"
	"time"
)

// Client talks to an ipamd over its unix socket; the CNI plugin uses it.
// It imports no HTTP stack, to keep the plugin small and quick to start.
// A call is bounded by its context's deadline or the client's timeout (30s
// unless WithTimeout), whichever comes first; on Linux a cancellation
// without a deadline is seen only before the call starts, because the
// call uses plain blocking system calls (see roundTrip).
type Client struct {
	socket  string
	timeout time.Duration
}

// NewClient returns a client for the socket.
func NewClient(socket string) *Client { return &Client{socket: socket, timeout: connTimeout} }

// WithTimeout returns a client whose calls end after d unless their
// context ends them sooner. The CNI plugin bounds its call this way rather
// than with a context deadline: a context's timer is what would start the
// runtime's network poller (see roundTrip).
func (c *Client) WithTimeout(d time.Duration) *Client {
	return &Client{socket: c.socket, timeout: d}
}

// UnreachableError means the agent did not answer at all.
type UnreachableError struct {
	Socket string
	Err    error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("the Mooring agent is unreachable on %s (%v): is the mooring agent running on this node?", e.Socket, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// CallError is an error the agent answered with.
type CallError struct{ ErrorBody }

func (e *CallError) Error() string { return e.Message }

// Add asks for an allocation.
func (c *Client) Add(ctx context.Context, req AddRequest) (Allocation, error) {
	r, err := c.call(ctx, Request{Op: OpAdd, Add: &req})
	if err != nil || r.Allocation == nil {
		return Allocation{}, err
	}
	return *r.Allocation, nil
}

// Del frees an allocation.
func (c *Client) Del(ctx context.Context, k Key) error {
	_, err := c.call(ctx, Request{Op: OpDel, Key: &k})
	return err
}

// Check returns the allocation of an attachment.
func (c *Client) Check(ctx context.Context, k Key) (Allocation, error) {
	r, err := c.call(ctx, Request{Op: OpCheck, Key: &k})
	if err != nil || r.Allocation == nil {
		return Allocation{}, err
	}
	return *r.Allocation, nil
}

// GC frees every allocation of network not in valid. valid must not be
// nil: a GC that does not know what is in use frees nothing.
func (c *Client) GC(ctx context.Context, network string, valid []Key) (GCResponse, error) {
	r, err := c.call(ctx, Request{Op: OpGC, GC: &GCRequest{Network: network, Valid: valid}})
	if err != nil || r.GC == nil {
		return GCResponse{}, err
	}
	return *r.GC, nil
}

// Status returns nil when the node can give a pod an address.
func (c *Client) Status(ctx context.Context) error {
	_, err := c.call(ctx, Request{Op: OpStatus})
	return err
}

func (c *Client) call(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, &UnreachableError{Socket: c.socket, Err: err}
	}
	now := time.Now()
	deadline := now.Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// The agent stops working on the call when this client stops waiting.
	req.TimeoutMs = max(1, deadline.Sub(now).Milliseconds())
	out, err := roundTrip(c.socket, deadline, appendRequest(make([]byte, 0, 256), req))
	if err != nil {
		return Response{}, &UnreachableError{Socket: c.socket, Err: err}
	}
	resp, err := decodeResponse(out)
	if err != nil {
		// The agent closed without a whole answer: it is stopping.
		return Response{}, &UnreachableError{Socket: c.socket, Err: fmt.Errorf("no whole answer (%d bytes): %w", len(out), err)}
	}
	if resp.Error != nil {
		return resp, &CallError{*resp.Error}
	}
	return resp, nil
}
