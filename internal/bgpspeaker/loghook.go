package bgpspeaker

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"
)

// connHook is a slog.Handler in front of the agent's handler that GoBGP
// logs through. GoBGP reports why a connection attempt failed only in its
// debug log ("failed to connect", with the dial error) and keyed by the
// neighbor address ("Key"): the hook keeps the last such error per
// address, so the status can say ConnectRefused or NoRoute instead of
// just Active. Other debug records are dropped unless the agent's handler
// wants them.
type connHook struct {
	inner slog.Handler
	attrs []slog.Attr // from WithAttrs, to find "Key"
	errs  *connErrors
}

// connErrors is shared by every handler derived with WithAttrs.
type connErrors struct {
	mu    sync.Mutex
	last  map[netip.Addr]connError
	notes map[netip.Addr]notification
	now   func() time.Time
}

// notification is the last NOTIFICATION sent or received on a session.
// GoBGP exchanges OPENs of outgoing connections without a state change,
// so a refused OPEN shows only in its log.
type notification struct {
	sent          bool
	code, subcode int64
	// communication is the Cease's shutdown communication (RFC 8203),
	// e.g. GoBGP's "BFD is down".
	communication string
	at            time.Time
}

type connError struct {
	err string
	at  time.Time
}

func newConnHook(inner slog.Handler, now func() time.Time) *connHook {
	return &connHook{inner: inner, errs: &connErrors{last: map[netip.Addr]connError{}, notes: map[netip.Addr]notification{}, now: now}}
}

// Messages GoBGP logs that the hook records.
const (
	msgFailedToConnect = "failed to connect"
	msgPeerUp          = "Peer Up"
	msgSentNotif       = "sent notification"
	msgReceivedNotif   = "received notification"
)

func (h *connHook) Enabled(context.Context, slog.Level) bool { return true }

func (h *connHook) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case msgFailedToConnect:
		h.record(r)
	case msgSentNotif, msgReceivedNotif:
		h.recordNotification(r, r.Message == msgSentNotif)
	case msgPeerUp:
		if a, ok := h.key(r); ok {
			h.errs.forget(a)
		}
	}
	if !h.inner.Enabled(ctx, r.Level) {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *connHook) record(r slog.Record) {
	a, ok := h.key(r)
	if !ok {
		return
	}
	var msg string
	r.Attrs(func(at slog.Attr) bool {
		if at.Key == "Error" {
			msg = at.Value.String()
			return false
		}
		return true
	})
	h.errs.mu.Lock()
	h.errs.last[a] = connError{err: msg, at: h.errs.now()}
	h.errs.mu.Unlock()
}

func (h *connHook) recordNotification(r slog.Record, sent bool) {
	a, ok := h.key(r)
	if !ok {
		return
	}
	n := notification{sent: sent}
	r.Attrs(func(at slog.Attr) bool {
		switch at.Key {
		case "Code":
			n.code = at.Value.Int64()
		case "Subcode":
			n.subcode = at.Value.Int64()
		case "Communicated-Reason":
			n.communication = at.Value.String()
		}
		return true
	})
	h.errs.mu.Lock()
	n.at = h.errs.now()
	h.errs.notes[a] = n
	h.errs.mu.Unlock()
}

// lastNotification returns the last NOTIFICATION of a.
func (e *connErrors) lastNotification(a netip.Addr) (notification, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n, ok := e.notes[a]
	return n, ok
}

// key finds the neighbor address GoBGP attached ("Key").
func (h *connHook) key(r slog.Record) (netip.Addr, bool) {
	var key string
	for _, at := range h.attrs {
		if at.Key == "Key" {
			key = at.Value.String()
		}
	}
	r.Attrs(func(at slog.Attr) bool {
		if at.Key == "Key" {
			key = at.Value.String()
		}
		return true
	})
	a, err := netip.ParseAddr(key)
	return a, err == nil
}

func (h *connHook) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &connHook{inner: h.inner.WithAttrs(attrs), attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...), errs: h.errs}
}

func (h *connHook) WithGroup(name string) slog.Handler {
	return &connHook{inner: h.inner.WithGroup(name), attrs: h.attrs, errs: h.errs}
}

// lastError returns the last connection error of a and when it was seen.
func (e *connErrors) lastError(a netip.Addr) (string, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.last[a]
	return c.err, c.at
}

func (e *connErrors) forget(a netip.Addr) {
	e.mu.Lock()
	delete(e.last, a)
	delete(e.notes, a)
	e.mu.Unlock()
}
