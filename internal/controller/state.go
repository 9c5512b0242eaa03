package controller

import (
	"context"
	"net/netip"
	"reflect"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/mooringlb/mooring/internal/lbipam"
)

// state is what the reconcilers and runnables of one Run share: the
// allocator behind its mutex, the start-up gate, and the bookkeeping that
// decides which Services to look at again when addresses free up.
//
// Allocation happens under mu; API writes never do, so the API round trips
// of several workers overlap while the core stays single-threaded.
type state struct {
	mu      sync.Mutex
	alloc   *lbipam.Allocator
	pools   map[string]poolInput                // last converted pools, by name
	held    map[lbipam.ServiceKey]int           // addresses each tracked Service holds
	pending map[lbipam.ServiceKey]lbipam.Reason // ours, with a family pending
	warned  map[lbipam.ServiceKey]lbipam.Reason // ours, holding an address with a warning
	written map[lbipam.ServiceKey]string        // resourceVersion our last status write replaced, until the cache moves past it
	adopted map[lbipam.ServiceKey]string        // class-less under AdoptOnly, by adoption state
	// freed says an address was released since pending Services were last
	// re-enqueued; poolsChanged says every tracked Service needs a look
	// (its address may have left every pool, or a pending one may fit now).
	freed, poolsChanged bool

	gate    chan struct{} // closed when start-up import is done
	dirty   chan struct{} // buffer 1: pool status / metrics need a recompute
	requeue chan event.GenericEvent
	m       *metrics
}

func newState(m *metrics) *state {
	return &state{
		alloc:   lbipam.NewAllocator(),
		pools:   map[string]poolInput{},
		held:    map[lbipam.ServiceKey]int{},
		pending: map[lbipam.ServiceKey]lbipam.Reason{},
		warned:  map[lbipam.ServiceKey]lbipam.Reason{},
		written: map[lbipam.ServiceKey]string{},
		adopted: map[lbipam.ServiceKey]string{},
		gate:    make(chan struct{}),
		dirty:   make(chan struct{}, 1),
		requeue: make(chan event.GenericEvent, 1024),
		m:       m,
	}
}

// waitOpen blocks until start-up import is done: nothing is allocated
// before every existing assignment is known.
func (s *state) waitOpen(ctx context.Context) error {
	select {
	case <-s.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *state) open() { close(s.gate) }

// kick asks the pool status writer for a recompute; it coalesces.
func (s *state) kick() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// setPools installs a new pool set. Callers hold no lock.
func (s *state) setPools(in []poolInput) {
	pools := make([]lbipam.Pool, 0, len(in))
	byName := make(map[string]poolInput, len(in))
	for _, p := range in {
		pools = append(pools, p.pool)
		byName[p.pool.Name] = p
	}
	s.mu.Lock()
	if reflect.DeepEqual(byName, s.pools) {
		// The pool controller's first pass repeats what start-up installed;
		// re-enqueueing every Service for it would double start-up work.
		s.mu.Unlock()
		return
	}
	s.alloc.SetPools(pools)
	s.pools = byName
	s.poolsChanged = true
	s.mu.Unlock()
	s.kick()
}

// assign runs the core for one of our Services. With invalid set the
// Service's own request is unusable: its held addresses are imported and
// nothing is allocated.
func (s *state) assign(in lbipam.Service, invalid bool) lbipam.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.adopted, in.Key)
	var res lbipam.Result
	if invalid {
		res = s.alloc.Import(in)
	} else {
		res = s.alloc.Assign(in)
	}
	changed := s.track(in.Key, in.Held, res.Addrs)
	if invalid {
		changed = changed || s.pending[in.Key] != lbipam.ReasonInvalidRequest
		s.pending[in.Key] = lbipam.ReasonInvalidRequest
	} else if len(res.Pending) > 0 {
		changed = changed || s.pending[in.Key] != res.Pending[0].Reason
		s.pending[in.Key] = res.Pending[0].Reason
	} else if _, ok := s.pending[in.Key]; ok {
		delete(s.pending, in.Key)
		changed = true
	}
	if len(res.Warnings) > 0 {
		changed = changed || s.warned[in.Key] != res.Warnings[0].Reason
		s.warned[in.Key] = res.Warnings[0].Reason
	} else if _, ok := s.warned[in.Key]; ok {
		delete(s.warned, in.Key)
		changed = true
	}
	if changed {
		s.kick()
	}
	return res
}

// track records what key holds now and counts new allocations; it reports
// whether anything changed.
func (s *state) track(key lbipam.ServiceKey, before, after []netip.Addr) bool {
	changed := false
	for _, a := range after {
		if !slices.Contains(before, a) {
			s.m.allocations.Inc()
			changed = true
		}
	}
	for _, a := range before {
		if !slices.Contains(after, a) {
			s.freed, changed = true, true
		}
	}
	s.held[key] = len(after)
	return changed
}

// reserve imports the addresses of a Service of another class so they are
// never handed out twice; Mooring never writes to it.
func (s *state) reserve(svc *corev1.Service) {
	held := heldAddrs(svc)
	if len(held) == 0 {
		s.release(serviceKey(svc))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.adopted, serviceKey(svc))
	res := s.alloc.Import(lbipam.Service{Key: serviceKey(svc), Held: held})
	if s.track(serviceKey(svc), held, res.Addrs) {
		s.kick()
	}
}

// Adoption states of class-less Services under AdoptOnly (metric label).
const (
	adoptedInPools      = "in_pools"      // every held address lies in a pool: safe to switch
	adoptedOutsidePools = "outside_pools" // some held address lies in no pool: add a pool first
	adoptedNoAddress    = "no_address"    // holds nothing yet
)

// adopt records a class-less Service under AdoptOnly: what it holds and
// requests is imported (never handed to anyone else); nothing is allocated
// and nothing is written to it.
func (s *state) adopt(in lbipam.Service) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := s.alloc.Import(in)
	changed := s.track(in.Key, in.Held, res.Addrs)
	st := adoptedInPools
	switch {
	case len(res.Addrs) == 0:
		st = adoptedNoAddress
	case slices.ContainsFunc(res.Warnings, func(p lbipam.Problem) bool { return p.Reason == lbipam.ReasonHeldOutsidePools }):
		st = adoptedOutsidePools
	}
	if s.adopted[in.Key] != st {
		s.adopted[in.Key] = st
		changed = true
	}
	if changed {
		s.kick()
	}
}

// release forgets a Service that is gone or no longer a LoadBalancer of
// any class.
func (s *state) release(key lbipam.ServiceKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, tracked := s.held[key]
	_, p := s.pending[key]
	_, w := s.warned[key]
	_, ad := s.adopted[key]
	delete(s.adopted, key)
	if !tracked && !p && !w && !ad {
		return
	}
	s.alloc.Release(key)
	delete(s.held, key)
	delete(s.pending, key)
	delete(s.warned, key)
	delete(s.written, key)
	if n > 0 {
		s.freed = true
	}
	s.kick()
}

// wrote remembers the resourceVersion of the copy our status patch was
// based on (the optimistic lock made the patch fail on any other).
func (s *state) wrote(key lbipam.ServiceKey, basedOn string) {
	s.mu.Lock()
	s.written[key] = basedOn
	s.mu.Unlock()
}

// cacheBehind reports whether the cached Service is still the copy our
// last write replaced. Reconciling it would make the core drop the address
// we just wrote (it adopts what the object says it holds) and hand it to
// someone else, so the caller waits for the cache instead. Any other
// version is ours or newer (a cache never goes back), so resourceVersions
// are only compared for equality, never parsed or ordered.
func (s *state) cacheBehind(key lbipam.ServiceKey, rv string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.written[key]
	if !ok {
		return false
	}
	if rv == w {
		return true
	}
	delete(s.written, key)
	return false
}

// takeRequeue returns the Services to look at again because addresses were
// freed (pending and warned ones) or pools changed (every tracked one), and
// clears the flags.
func (s *state) takeRequeue() []lbipam.ServiceKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := s.poolsChanged
	if !s.freed && !all {
		return nil
	}
	s.freed, s.poolsChanged = false, false
	seen := make(map[lbipam.ServiceKey]struct{}, len(s.pending)+len(s.warned))
	keys := make([]lbipam.ServiceKey, 0, len(s.pending)+len(s.warned))
	add := func(k lbipam.ServiceKey) {
		if _, dup := seen[k]; !dup {
			seen[k] = struct{}{}
			keys = append(keys, k)
		}
	}
	for k := range s.pending {
		add(k)
	}
	for k := range s.warned {
		add(k)
	}
	if all {
		for k := range s.held {
			add(k)
		}
	}
	return keys
}

// requeueEvent turns a key into an event for the Service controller.
func requeueEvent(k lbipam.ServiceKey) event.GenericEvent {
	return event.GenericEvent{Object: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}}
}
