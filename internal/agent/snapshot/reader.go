package snapshot

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/store"
)

// SwitchReader is the agent's Reader: the informer cache, or a snapshot
// until the cache syncs (snapshot.go).
type SwitchReader struct {
	live client.Reader
	over atomic.Pointer[Reader] // nil: live
}

// NewSwitchReader serves from live until Set.
func NewSwitchReader(live client.Reader) *SwitchReader { return &SwitchReader{live: live} }

// Set serves from s; nil serves from the live cache.
func (r *SwitchReader) Set(s *Reader) { r.over.Store(s) }

// Serving reports whether it serves a snapshot now.
func (r *SwitchReader) Serving() bool { return r.over.Load() != nil }

// CompactStore is the compact store of the live cache while it is served
// (store.Of), nil while a snapshot is.
func (r *SwitchReader) CompactStore() *store.Store {
	if r.Serving() {
		return nil
	}
	return store.Of(r.live)
}

func (r *SwitchReader) current() client.Reader {
	if s := r.over.Load(); s != nil {
		return s
	}
	return r.live
}

func (r *SwitchReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return r.current().Get(ctx, key, obj, opts...)
}

func (r *SwitchReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.current().List(ctx, list, opts...)
}

// Reader answers the decision's reads from a snapshot, as the informer
// cache would: namespaces, label selectors and the EndpointSlice index are
// honoured. Objects are deep-copied out, so callers may keep or change
// them.
type Reader struct{ s *File }

// NewReader reads s.
func NewReader(s *File) *Reader { return &Reader{s: s} }

func (r *Reader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	var found bool
	switch o := obj.(type) {
	case *corev1.Service:
		found = getFrom(r.s.Services, key, o)
	case *corev1.Node:
		found = getFrom(r.s.Nodes, key, o)
	case *discoveryv1.EndpointSlice:
		found = getFrom(r.s.Slices, key, o)
	case *mooringv1.L2AnnouncementPolicy:
		found = getFrom(r.s.Policies, key, o)
	default:
		return fmt.Errorf("the local snapshot holds no %T", obj)
	}
	if !found {
		return apierrors.NewNotFound(schema.GroupResource{Resource: fmt.Sprintf("%T", obj)}, key.Name)
	}
	return nil
}

// getFrom copies the item named key into out.
func getFrom[T any, P interface {
	*T
	client.Object
}](items []T, key client.ObjectKey, out P) bool {
	for i := range items {
		if o := P(&items[i]); o.GetName() == key.Name && o.GetNamespace() == key.Namespace {
			*out = *o.DeepCopyObject().(P)
			return true
		}
	}
	return false
}

func (r *Reader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	switch l := list.(type) {
	case *corev1.ServiceList:
		l.Items = listFrom(r.s.Services, lo)
	case *corev1.NodeList:
		l.Items = listFrom(r.s.Nodes, lo)
	case *discoveryv1.EndpointSliceList:
		l.Items = listFrom(r.s.Slices, lo)
	case *mooringv1.L2AnnouncementPolicyList:
		l.Items = listFrom(r.s.Policies, lo)
	default:
		return fmt.Errorf("the local snapshot holds no %T", list)
	}
	return nil
}

// listFrom copies the items lo selects. The only field selector the agent
// uses is the EndpointSlice index (store.IndexSliceService).
func listFrom[T any, P interface {
	*T
	client.Object
}](items []T, lo *client.ListOptions) []T {
	var out []T
	for i := range items {
		o := P(&items[i])
		if lo.Namespace != "" && o.GetNamespace() != lo.Namespace {
			continue
		}
		if lo.LabelSelector != nil && !lo.LabelSelector.Matches(labels.Set(o.GetLabels())) {
			continue
		}
		if lo.FieldSelector != nil {
			if v, ok := lo.FieldSelector.RequiresExactMatch(store.IndexSliceService); ok && !slices.Contains(store.SliceService(o), v) {
				continue
			}
		}
		out = append(out, *o.DeepCopyObject().(P))
	}
	return out
}
