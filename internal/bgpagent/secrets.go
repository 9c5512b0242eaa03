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
type secrets struct {
	c         client.Reader
	namespace string
	every     time.Duration
	// timeout bounds one GET: a hung API server (stopped, or a
	// connection that black-holes) must not hold up the decision, which
	// reads the passwords inline.
	timeout time.Duration
	now     func() time.Time

	mu   sync.Mutex
	read map[string]secretEntry
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

func newSecrets(c client.Reader, namespace string, every time.Duration, now func() time.Time) *secrets {
	return &secrets{c: c, namespace: namespace, every: every, timeout: secretTimeout, now: now, read: map[string]secretEntry{}}
}

// passwords returns the passwords of names, reading those never read or
// read more than every ago. A Secret that cannot be read now keeps its
// last password unless the API server says it is gone. Cost: one GET per
// stale name.
func (s *secrets) passwords(ctx context.Context, names []string) map[string]bgpspeaker.Password {
	out := map[string]bgpspeaker.Password{}
	for _, n := range names {
		s.mu.Lock()
		e, ok := s.read[n]
		s.mu.Unlock()
		if !ok || s.now().Sub(e.at) >= s.every {
			e = s.get(ctx, n, e, ok)
			s.mu.Lock()
			s.read[n] = e
			s.mu.Unlock()
		}
		out[n] = e.pw
	}
	return out
}

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
			// Stale at once: the first pass re-reads it when it can.
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
