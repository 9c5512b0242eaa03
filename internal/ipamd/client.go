package ipamd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
)

// Client talks to an ipamd over its unix socket; the CNI plugin uses it.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient returns a client for the socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}
	return &Client{socket: socket, hc: &http.Client{Transport: tr}}
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
	var al Allocation
	return al, c.call(ctx, http.MethodPost, pathAdd, req, &al)
}

// Del frees an allocation.
func (c *Client) Del(ctx context.Context, k Key) error {
	return c.call(ctx, http.MethodPost, pathDel, k, nil)
}

// Check returns the allocation of an attachment.
func (c *Client) Check(ctx context.Context, k Key) (Allocation, error) {
	var al Allocation
	return al, c.call(ctx, http.MethodPost, pathCheck, k, &al)
}

// GC frees every allocation not in valid.
func (c *Client) GC(ctx context.Context, valid []Key) (GCResponse, error) {
	var out GCResponse
	return out, c.call(ctx, http.MethodPost, pathGC, GCRequest{Valid: valid}, &out)
}

// Status returns nil when the node can give a pod an address.
func (c *Client) Status(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, pathStatus, nil, nil)
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body bytes.Buffer
	if in != nil {
		if err := json.NewEncoder(&body).Encode(in); err != nil {
			return err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://ipamd"+path, &body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return &UnreachableError{Socket: c.socket, Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var eb ErrorBody
		if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
			eb = ErrorBody{Kind: KindInternal, Message: fmt.Sprintf("agent answered %s", resp.Status)}
		}
		return &CallError{eb}
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
