package bgpagent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
)

// secrets reads the password Secrets the node's peers name — only those,
// only in Mooring's namespace, one GET each (the agent may not list or
// watch Secrets) — and keeps what it read, so sessions keep their password
// while the API server is away.
//
// The decision never waits on the API server for a password it has: reads
// run in the background, one in flight per name, and a read whose result
// differs from what was kept calls changed (the backend's Trigger) so the
// backend decides again. A Secret never read has no password yet, and a
// peer is never opened without its password (fail closed): passwords
// leaves the name out, so that one peer stays closed — the speaker reports
// PasswordUnavailable, "not known yet … until it is read" — while every
// other peer and route is applied at once; once the read ends, the
// re-decision opens it, or keeps it closed with the read's reason (the
// Secret is missing, the API server did not answer). The one exception is
// the first decision after the agent starts (waitNew): a peer opened then
// carries graceful restart's Restart State and Forwarding State bits, one
// opened by a later decision does not and the router would drop the
// routes it kept for it, so that decision waits for Secrets never read —
// all at once, at most timeout. A password kept in the state file counts
// as read: a restarted agent opens its sessions from it and re-reads it
// in the background.
type secrets struct {
	c         client.Reader
	namespace string
	every     time.Duration
	// timeout bounds one GET: a hung API server (stopped, or a
	// connection that black-holes) must not keep a read in flight for
	// longer, nor hold the first decision longer.
	timeout time.Duration
	now     func() time.Time
	// changed is called when a background read changed a password or its
	// reason; it must not block.
	changed func()

	mu   sync.Mutex
	read map[string]secretEntry
	// reading holds the reads in flight; each channel closes when its
	// read has ended and its result is in read.
	reading map[string]chan struct{}
	// reads counts the reads' goroutines, for wait.
	reads sync.WaitGroup
}

type secretEntry struct {
	pw bgpspeaker.Password
	at time.Time
}

// secretTimeout is how long one Secret GET may take; secretRetry how soon
// a failed read is tried again.
const (
	secretTimeout = 3 * time.Second
	secretRetry   = 5 * time.Second
)

func newSecrets(c client.Reader, namespace string, every time.Duration, now func() time.Time, changed func()) *secrets {
	return &secrets{c: c, namespace: namespace, every: every, timeout: secretTimeout, now: now, changed: changed,
		read: map[string]secretEntry{}, reading: map[string]chan struct{}{}}
}

// passwords returns the kept passwords of names (the reason, for one that
// cannot be used) and leaves out the names never read. It starts a
// background read, bounded by timeout and ctx, for each name never read,
// read more than every ago, or whose failed read is due again, unless one
// is in flight. A Secret that cannot be read keeps its last password
// unless the API server says it is gone. With waitNew it first waits for
// the reads of names never read (at most timeout; see secrets). Cost: no
// API call of its own; one goroutine per read started.
func (s *secrets) passwords(ctx context.Context, names []string, waitNew bool) map[string]bgpspeaker.Password {
	var pending []chan struct{}
	s.mu.Lock()
	now := s.now()
	for _, n := range names {
		e, ok := s.read[n]
		if ok && now.Sub(e.at) < s.every {
			continue
		}
		if done := s.refresh(ctx, n, e, ok); done != nil && !ok && waitNew {
			pending = append(pending, done)
		}
	}
	s.mu.Unlock()
	for _, done := range pending {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	out := map[string]bgpspeaker.Password{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		if e, ok := s.read[n]; ok {
			out[n] = e.pw
		}
	}
	return out
}

// refresh starts a background read of name unless one is in flight, and
// returns the channel that closes when the read in flight ends (nil once
// ctx ended: no read starts). s.mu is held.
func (s *secrets) refresh(ctx context.Context, name string, last secretEntry, had bool) chan struct{} {
	if done, ok := s.reading[name]; ok {
		return done
	}
	if ctx.Err() != nil {
		return nil
	}
	done := make(chan struct{})
	s.reading[name] = done
	s.reads.Add(1)
	go func() {
		defer s.reads.Done()
		defer close(done)
		e := s.get(ctx, name, last, had)
		s.mu.Lock()
		delete(s.reading, name)
		if ctx.Err() != nil {
			// The agent stops: what was read (or not) no longer matters.
			s.mu.Unlock()
			return
		}
		prev, ok := s.read[name]
		s.read[name] = e
		s.mu.Unlock()
		if !ok || prev.pw != e.pw {
			s.changed()
		}
	}()
	return done
}

// wait returns when every read started has ended: after ctx ended, at once
// (a read ends with its context).
func (s *secrets) wait() { s.reads.Wait() }

func (s *secrets) get(ctx context.Context, name string, last secretEntry, had bool) secretEntry {
	var sec corev1.Secret
	gctx, cancel := context.WithTimeout(ctx, s.timeout)
	err := s.c.Get(gctx, client.ObjectKey{Namespace: s.namespace, Name: name}, &sec)
	cancel()
	if err != nil && gctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("the API server did not answer within %s (%w)", s.timeout, err)
	}
	now := s.now()
	switch {
	case err == nil:
		v, ok := sec.Data[mooringv1.BGPPasswordSecretKey]
		if !ok {
			return secretEntry{at: now, pw: bgpspeaker.Password{Unavailable: fmt.Sprintf("Secret %s/%s has no key %q: add it", s.namespace, name, mooringv1.BGPPasswordSecretKey)}}
		}
		return secretEntry{at: now, pw: bgpspeaker.Password{Value: string(v)}}
	case apierrors.IsNotFound(err):
		return secretEntry{at: now, pw: bgpspeaker.Password{Unavailable: fmt.Sprintf("Secret %s/%s does not exist: create it with the key %q", s.namespace, name, mooringv1.BGPPasswordSecretKey)}}
	case apierrors.IsForbidden(err):
		return secretEntry{at: now, pw: bgpspeaker.Password{Unavailable: fmt.Sprintf("the agent may not read Secret %s/%s (%v): the agent reads Secrets only in its own namespace", s.namespace, name, err)}}
	case had && last.pw.Value != "":
		// The API server is away: keep the password, try again soon.
		return secretEntry{at: now.Add(-s.every + secretRetry), pw: last.pw}
	}
	return secretEntry{at: now.Add(-s.every + secretRetry), pw: bgpspeaker.Password{Unavailable: fmt.Sprintf("reading Secret %s/%s: %v", s.namespace, name, err)}}
}

// restore seeds the cache with passwords kept on disk (read at start).
func (s *secrets) restore(kept map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, v := range kept {
		if _, ok := s.read[n]; !ok {
			// Stale at once: the first pass re-reads it in the background.
			s.read[n] = secretEntry{pw: bgpspeaker.Password{Value: v}}
		}
	}
}

// known returns the passwords read, for the state file.
func (s *secrets) known() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for _, n := range slices.Sorted(maps.Keys(s.read)) {
		if v := s.read[n].pw.Value; v != "" {
			out[n] = v
		}
	}
	return out
}
