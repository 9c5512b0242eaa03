package store

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/convert"
	"github.com/mooringlb/mooring/internal/announce"
)

// The agent keeps Services and EndpointSlices in a compact store of its
// own instead of informer caches: at 10,000 Services even objects trimmed
// to the fields the decision reads (transform.go) cost ~2.3 KB each with
// the informer's indexes, and a Service with its slice costs ~0.4 KB here.
// The store is fed by a client-go Reflector (watch.go) and converts
// every object as it arrives, so a full object lives only as long as one
// watch event or one list page. It also drops updates that change nothing
// the decision reads (status updates of other fields, endpoint churn that
// keeps the same ready nodes): they do not wake the decision loop.
//
// The decision reads the core's Services straight from it (Service:
// no object built per event); Reader serves every other read of
// Services and slices (Events, tests) as client.Reader calls.

// compactService is what the agent reads of a Service.
type compactService struct {
	uid             types.UID
	resourceVersion string
	labels          map[string]string
	typ             corev1.ServiceType
	class           *string
	local           bool // externalTrafficPolicy: Local
	ingress         []netip.Addr
	externalIPs     []netip.Addr
}

// sameDecision reports whether s and o decide alike (identity and version
// aside).
func (s *compactService) sameDecision(o *compactService) bool {
	return s.typ == o.typ && s.local == o.local && ptrEqual(s.class, o.class) &&
		slices.Equal(s.ingress, o.ingress) && slices.Equal(s.externalIPs, o.externalIPs) && maps.Equal(s.labels, o.labels)
}

func ptrEqual(a, b *string) bool { return a == b || (a != nil && b != nil && *a == *b) }

// compactSlice is what the agent reads of an EndpointSlice: its Service and
// the nodes with a ready endpoint, in order.
type compactSlice struct {
	service string
	ready   []string
}

// Store holds Services and EndpointSlices compactly. It implements
// the Reflector's store for both types (serviceSink, sliceSink) and calls
// changed with each Service whose decision input may have changed.
type Store struct {
	mu sync.RWMutex
	// services holds pointers: a map's slots are allocated for its whole
	// capacity (up to twice its length), and a pointer slot is a fifth of
	// a compactService's (BGP at 10,000 Services, docs/benchmarks.md).
	services map[types.NamespacedName]*compactService
	slices   map[types.NamespacedName]compactSlice
	// bySvc names the slices of each Service.
	bySvc map[types.NamespacedName][]string
	// strs interns namespaces and node names (few, repeated 10,000 times).
	strs map[string]string

	changed func(types.NamespacedName)
	all     func() // everything may have changed (a relist)

	svcSynced, sliceSynced atomic.Bool
	// gen moves after every change the decision reads (the snapshot
	// skips encoding when it did not).
	gen atomic.Uint64
}

// NewStore is an empty store that tells nobody of changes (tests and
// tools; the agent's comes with NewCache).
func NewStore() *Store { return newStore(func(types.NamespacedName) {}, func() {}) }

// Update stores a Service or an EndpointSlice as a watch event does.
func (s *Store) Update(obj any) error {
	if _, ok := obj.(*discoveryv1.EndpointSlice); ok {
		return sliceSink{s}.Update(obj)
	}
	return serviceSink{s}.Update(obj)
}

func newStore(changed func(types.NamespacedName), all func()) *Store {
	return &Store{services: map[types.NamespacedName]*compactService{}, slices: map[types.NamespacedName]compactSlice{},
		bySvc: map[types.NamespacedName][]string{}, strs: map[string]string{}, changed: changed, all: all}
}

// synced reports whether both types have been listed once.
func (s *Store) synced() bool { return s.svcSynced.Load() && s.sliceSynced.Load() }

// intern returns a shared copy of str; called with mu held.
func (s *Store) intern(str string) string {
	if v, ok := s.strs[str]; ok {
		return v
	}
	if len(s.strs) > 4096 { // only namespaces and node names go here; bound it anyway
		return str
	}
	s.strs[str] = str
	return str
}

func compactServiceOf(svc *corev1.Service) compactService {
	out := compactService{uid: svc.UID, resourceVersion: svc.ResourceVersion, typ: canonicalType(svc.Spec.Type),
		class: svc.Spec.LoadBalancerClass, local: svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal}
	if len(svc.Labels) > 0 {
		out.labels = svc.Labels // the decoded object is dropped after this
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(ing.IP); err == nil {
			out.ingress = append(out.ingress, a)
		}
	}
	out.externalIPs = convert.Addrs(svc.Spec.ExternalIPs)
	if out.ingress != nil {
		out.ingress = slices.Clip(out.ingress)
	}
	return out
}

// canonicalType returns the package constant for the known types, so the
// store does not keep one copy of "LoadBalancer" per Service.
func canonicalType(t corev1.ServiceType) corev1.ServiceType {
	for _, c := range []corev1.ServiceType{corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeExternalName} {
		if t == c {
			return c
		}
	}
	return t
}

// service materialises the Service as the agent reads it: the fields
// convertService and the Event recorder use, nothing else.
func (c *compactService) service(k types.NamespacedName) *corev1.Service {
	out := &corev1.Service{}
	out.Kind, out.APIVersion = "Service", "v1"
	out.Namespace, out.Name, out.UID, out.ResourceVersion, out.Labels = k.Namespace, k.Name, c.uid, c.resourceVersion, c.labels
	out.Spec.Type, out.Spec.LoadBalancerClass = c.typ, c.class
	if c.local {
		out.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	} else {
		out.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	for _, a := range c.externalIPs {
		out.Spec.ExternalIPs = append(out.Spec.ExternalIPs, a.String())
	}
	for _, a := range c.ingress {
		out.Status.LoadBalancer.Ingress = append(out.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: a.String()})
	}
	return out
}

func compactSliceOf(es *discoveryv1.EndpointSlice) compactSlice {
	out := compactSlice{service: es.Labels[discoveryv1.LabelServiceName]}
	for _, ep := range es.Endpoints {
		if ep.NodeName == nil || *ep.NodeName == "" || (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) {
			continue
		}
		out.ready = append(out.ready, *ep.NodeName)
	}
	if out.ready != nil {
		out.ready = slices.Clip(out.ready)
	}
	return out
}

// slice materialises the EndpointSlice as readyNodes reads it: its Service
// label and one ready endpoint per ready node.
func (c *compactSlice) slice(k types.NamespacedName) discoveryv1.EndpointSlice {
	out := discoveryv1.EndpointSlice{}
	out.Kind, out.APIVersion = "EndpointSlice", "discovery.k8s.io/v1"
	out.Namespace, out.Name = k.Namespace, k.Name
	if c.service != "" {
		out.Labels = map[string]string{discoveryv1.LabelServiceName: c.service}
	}
	ready := true
	for i := range c.ready {
		out.Endpoints = append(out.Endpoints, discoveryv1.Endpoint{NodeName: &c.ready[i], Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	return out
}

// setService stores a Service and reports whether the decision may
// change; called with mu held.
func (s *Store) setService(k types.NamespacedName, next compactService) bool {
	k.Namespace = s.intern(k.Namespace)
	prev, ok := s.services[k]
	s.services[k] = &next
	return !ok || !prev.sameDecision(&next)
}

// setSlice stores a slice and returns the Services whose decision may
// change (its old and new Service when the label moved); called with mu
// held.
func (s *Store) setSlice(k types.NamespacedName, next compactSlice) []types.NamespacedName {
	k.Namespace = s.intern(k.Namespace)
	for i, n := range next.ready {
		next.ready[i] = s.intern(n)
	}
	prev, ok := s.slices[k]
	if ok && prev.service == next.service && slices.Equal(prev.ready, next.ready) {
		return nil
	}
	s.slices[k] = next
	var out []types.NamespacedName
	if ok && prev.service != next.service {
		out = append(out, s.unindex(k, prev.service)...)
	}
	if next.service != "" {
		sk := types.NamespacedName{Namespace: k.Namespace, Name: next.service}
		if !ok || prev.service != next.service {
			s.bySvc[sk] = append(s.bySvc[sk], k.Name)
		}
		out = append(out, sk)
	}
	return out
}

// unindex removes slice k from its Service's index; called with mu held.
func (s *Store) unindex(k types.NamespacedName, service string) []types.NamespacedName {
	if service == "" {
		return nil
	}
	sk := types.NamespacedName{Namespace: k.Namespace, Name: service}
	names := slices.DeleteFunc(s.bySvc[sk], func(n string) bool { return n == k.Name })
	if len(names) == 0 {
		delete(s.bySvc, sk)
	} else {
		s.bySvc[sk] = names
	}
	return []types.NamespacedName{sk}
}

func (s *Store) deleteSlice(k types.NamespacedName) []types.NamespacedName {
	prev, ok := s.slices[k]
	if !ok {
		return nil
	}
	delete(s.slices, k)
	return s.unindex(k, prev.service)
}

// notify calls changed for each key, outside the lock, after moving gen.
func (s *Store) notify(keys ...types.NamespacedName) {
	if len(keys) > 0 {
		s.gen.Add(1)
	}
	for _, k := range keys {
		s.changed(k)
	}
}

// objectKey returns the key of an object or of a tombstone.
func objectKey(obj any) (types.NamespacedName, bool) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(client.Object)
	if !ok {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}, true
}

// compactServiceObject and compactSliceObject are what a list page
// becomes (watch.go): the Reflector hands list items to the store as
// runtime.Objects, and these hold only the compact form.
type compactServiceObject struct {
	key types.NamespacedName
	c   compactService
}

type compactSliceObject struct {
	key types.NamespacedName
	c   compactSlice
}

func (*compactServiceObject) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (o *compactServiceObject) DeepCopyObject() runtime.Object { c := *o; return &c }
func (*compactSliceObject) GetObjectKind() schema.ObjectKind   { return schema.EmptyObjectKind }
func (o *compactSliceObject) DeepCopyObject() runtime.Object   { c := *o; return &c }

func toCompactService(obj any) (types.NamespacedName, compactService, error) {
	switch o := obj.(type) {
	case *compactServiceObject:
		return o.key, o.c, nil
	case *corev1.Service:
		return types.NamespacedName{Namespace: o.Namespace, Name: o.Name}, compactServiceOf(o), nil
	}
	return types.NamespacedName{}, compactService{}, fmt.Errorf("compact store: %T is not a Service", obj)
}

func toCompactSlice(obj any) (types.NamespacedName, compactSlice, error) {
	switch o := obj.(type) {
	case *compactSliceObject:
		return o.key, o.c, nil
	case *discoveryv1.EndpointSlice:
		return types.NamespacedName{Namespace: o.Namespace, Name: o.Name}, compactSliceOf(o), nil
	}
	return types.NamespacedName{}, compactSlice{}, fmt.Errorf("compact store: %T is not an EndpointSlice", obj)
}

// serviceSink is the Reflector's store for Services.
type serviceSink struct{ *Store }

func (s serviceSink) Add(obj any) error { return s.Update(obj) }
func (s serviceSink) Resync() error     { return nil }
func (s serviceSink) Update(obj any) error {
	k, c, err := toCompactService(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	changed := s.setService(k, c)
	s.mu.Unlock()
	if changed {
		s.notify(k)
	}
	return nil
}

func (s serviceSink) Delete(obj any) error {
	k, ok := objectKey(obj)
	if !ok {
		return fmt.Errorf("compact store: cannot delete %T", obj)
	}
	s.mu.Lock()
	_, had := s.services[k]
	delete(s.services, k)
	s.mu.Unlock()
	if had {
		s.notify(k)
	}
	return nil
}

// Replace is a (re)list: the first one marks every Service, later ones
// those that changed or are gone.
func (s serviceSink) Replace(list []any, _ string) error {
	first := !s.svcSynced.Load()
	var changed []types.NamespacedName
	seen := make(map[types.NamespacedName]bool, len(list))
	s.mu.Lock()
	for _, obj := range list {
		k, c, err := toCompactService(obj)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		seen[k] = true
		if s.setService(k, c) && !first {
			changed = append(changed, k)
		}
	}
	for k := range s.services {
		if !seen[k] {
			delete(s.services, k)
			changed = append(changed, k)
		}
	}
	s.mu.Unlock()
	s.svcSynced.Store(true)
	if first {
		s.gen.Add(1)
		s.all()
	}
	s.notify(changed...)
	return nil
}

// sliceSink is the Reflector's store for EndpointSlices.
type sliceSink struct{ *Store }

func (s sliceSink) Add(obj any) error { return s.Update(obj) }
func (s sliceSink) Resync() error     { return nil }
func (s sliceSink) Update(obj any) error {
	k, c, err := toCompactSlice(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	changed := s.setSlice(k, c)
	s.mu.Unlock()
	s.notify(changed...)
	return nil
}

func (s sliceSink) Delete(obj any) error {
	k, ok := objectKey(obj)
	if !ok {
		return fmt.Errorf("compact store: cannot delete %T", obj)
	}
	s.mu.Lock()
	changed := s.deleteSlice(k)
	s.mu.Unlock()
	s.notify(changed...)
	return nil
}

func (s sliceSink) Replace(list []any, _ string) error {
	first := !s.sliceSynced.Load()
	var changed []types.NamespacedName
	seen := make(map[types.NamespacedName]bool, len(list))
	s.mu.Lock()
	for _, obj := range list {
		k, c, err := toCompactSlice(obj)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		seen[k] = true
		changed = append(changed, s.setSlice(k, c)...)
	}
	for k := range s.slices {
		if !seen[k] {
			changed = append(changed, s.deleteSlice(k)...)
		}
	}
	s.mu.Unlock()
	s.sliceSynced.Store(true)
	if first {
		s.gen.Add(1)
		s.all()
		return nil
	}
	s.notify(changed...)
	return nil
}

// Of returns the compact store r reads Services from, if any: a Reader's,
// or what a reader that wraps one (the snapshot's switch) says through
// CompactStore (nil while it serves a snapshot).
func Of(r client.Reader) *Store {
	switch v := r.(type) {
	case interface{ CompactStore() *Store }:
		return v.CompactStore()
	case Reader:
		return v.store
	}
	return nil
}

// NewReader answers Service and EndpointSlice reads from s and every other
// read from next (the informer cache).
func NewReader(next client.Reader, s *Store) Reader { return Reader{Reader: next, store: s} }

// Service is the core's Service for k, read straight from the
// compact form: what convertService gives for the objects Reader
// builds, without building them (addresses to strings and back, one
// EndpointSlice per slice, a field-selector list) on every event.
func (s *Store) Service(k types.NamespacedName) (announce.Service, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.services[k]
	if !ok {
		return announce.Service{}, false
	}
	return c.announce(k, s.readyOf(k)), true
}

// Services is Service for every Service.
func (s *Store) Services() []announce.Service {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]announce.Service, 0, len(s.services))
	for k, c := range s.services {
		out = append(out, c.announce(k, s.readyOf(k)))
	}
	return out
}

// readyOf is readyNodes of the slices of k, in the order the reader lists
// them; called with mu held.
func (s *Store) readyOf(k types.NamespacedName) []string {
	var ready []string
	for _, name := range s.bySvc[k] {
		ready = append(ready, s.slices[types.NamespacedName{Namespace: k.Namespace, Name: name}].ready...)
	}
	return ready
}

// announce is convertService of the materialised Service (the store
// replaces its slices and maps, never changes them, so the core may
// share them).
func (c *compactService) announce(k types.NamespacedName, ready []string) announce.Service {
	out := announce.Service{Key: announce.ServiceKey{Namespace: k.Namespace, Name: k.Name}, Labels: c.labels,
		ExternalIPs: c.externalIPs, LocalTraffic: c.local, ReadyNodes: ready}
	if c.typ == corev1.ServiceTypeLoadBalancer && (c.class == nil || *c.class == mooringv1.LoadBalancerClass) {
		out.IngressIPs = c.ingress
	}
	return out
}

// Reader answers Service and EndpointSlice reads from the compact
// store and every other read from next (the informer cache).
type Reader struct {
	client.Reader
	store *Store
}

func (r Reader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		if _, isSlice := obj.(*discoveryv1.EndpointSlice); isSlice {
			return fmt.Errorf("compact store: getting one EndpointSlice is not supported")
		}
		return r.Reader.Get(ctx, key, obj, opts...)
	}
	r.store.mu.RLock()
	c, found := r.store.services[key]
	r.store.mu.RUnlock()
	if !found {
		return notFound("services", key.Name)
	}
	*svc = *c.service(key)
	return nil
}

func (r Reader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	switch l := list.(type) {
	case *corev1.ServiceList:
		lo, err := listOptions(opts, false)
		if err != nil {
			return err
		}
		r.store.mu.RLock()
		defer r.store.mu.RUnlock()
		l.Items = make([]corev1.Service, 0, len(r.store.services))
		for k, c := range r.store.services {
			if lo.Namespace == "" || k.Namespace == lo.Namespace {
				l.Items = append(l.Items, *c.service(k))
			}
		}
		return nil
	case *discoveryv1.EndpointSliceList:
		lo, err := listOptions(opts, true)
		if err != nil {
			return err
		}
		r.store.mu.RLock()
		defer r.store.mu.RUnlock()
		l.Items = nil
		if lo.service != "" {
			for _, name := range r.store.bySvc[types.NamespacedName{Namespace: lo.Namespace, Name: lo.service}] {
				k := types.NamespacedName{Namespace: lo.Namespace, Name: name}
				c := r.store.slices[k]
				l.Items = append(l.Items, c.slice(k))
			}
			return nil
		}
		for k, c := range r.store.slices {
			if lo.Namespace == "" || k.Namespace == lo.Namespace {
				l.Items = append(l.Items, c.slice(k))
			}
		}
		return nil
	}
	return r.Reader.List(ctx, list, opts...)
}

type compactListOptions struct {
	Namespace string
	service   string // the slice index (IndexSliceService)
}

// listOptions accepts what the agent asks of the store: a namespace, the
// slice index, UnsafeDisableDeepCopy (the store always returns copies).
func listOptions(opts []client.ListOption, slices bool) (compactListOptions, error) {
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	out := compactListOptions{Namespace: lo.Namespace}
	if lo.LabelSelector != nil && !lo.LabelSelector.Empty() || lo.Limit != 0 || lo.Continue != "" {
		return out, fmt.Errorf("compact store: unsupported list options %+v", lo)
	}
	if lo.FieldSelector != nil && !lo.FieldSelector.Empty() {
		name, ok := lo.FieldSelector.RequiresExactMatch(IndexSliceService)
		if !slices || !ok || len(lo.FieldSelector.Requirements()) != 1 || lo.Namespace == "" {
			return out, fmt.Errorf("compact store: unsupported field selector %q", lo.FieldSelector)
		}
		out.service = name
	}
	return out, nil
}

func notFound(resource, name string) error {
	return apierrors.NewNotFound(schema.GroupResource{Resource: resource}, name)
}
