package ipamd

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// Client talks to an ipamd over its unix socket; the CNI plugin uses it.
// It imports no HTTP stack, to keep the plugin small and quick to start.
type Client struct{ socket string }

// NewClient returns a client for the socket.
func NewClient(socket string) *Client { return &Client{socket: socket} }

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

// GC frees every allocation not in valid.
func (c *Client) GC(ctx context.Context, valid []Key) (GCResponse, error) {
	r, err := c.call(ctx, Request{Op: OpGC, GC: &GCRequest{Valid: valid}})
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
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		return Response{}, &UnreachableError{Socket: c.socket, Err: err}
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(connTimeout))
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return Response{}, &UnreachableError{Socket: c.socket, Err: err}
	}
	var resp Response
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		// The agent closed without answering: it is stopping.
		return Response{}, &UnreachableError{Socket: c.socket, Err: err}
	}
	if resp.Error != nil {
		return resp, &CallError{*resp.Error}
	}
	return resp, nil
}
