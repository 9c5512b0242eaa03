package store

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// listPage is how many objects one list request brings: the full objects
// of one page are all the store ever holds at once.
const listPage = 500

// Cache watches Services and EndpointSlices into a Store.
type Cache struct {
	store      *Store
	lists      []*pagedListWatch
	reflectors []*toolscache.Reflector
}

// NewCache builds the watches; nothing runs until Run. Protobuf is
// asked for: it decodes with a fraction of JSON's garbage.
func NewCache(restCfg *rest.Config) (*Cache, error) {
	cfg := rest.CopyConfig(restCfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	core := *cfg
	core.GroupVersion, core.APIPath = &corev1.SchemeGroupVersion, "/api"
	coreClient, err := rest.RESTClientFor(&core)
	if err != nil {
		return nil, fmt.Errorf("creating the Service client: %w", err)
	}
	disc := *cfg
	disc.GroupVersion, disc.APIPath = &discoveryv1.SchemeGroupVersion, "/apis"
	discClient, err := rest.RESTClientFor(&disc)
	if err != nil {
		return nil, fmt.Errorf("creating the EndpointSlice client: %w", err)
	}
	store := newStore(func(types.NamespacedName) {}, func() {})
	logger := klog.Background() // bridged to the agent's slog (kube.BridgeLogs)
	c := &Cache{store: store}
	for _, w := range []struct {
		lw   *pagedListWatch
		obj  runtime.Object
		sink toolscache.ReflectorStore
	}{
		{&pagedListWatch{client: coreClient, resource: "services", page: func() runtime.Object { return &corev1.ServiceList{} },
			compact: compactServicePage}, &corev1.Service{}, serviceSink{store}},
		{&pagedListWatch{client: discClient, resource: "endpointslices", page: func() runtime.Object { return &discoveryv1.EndpointSliceList{} },
			compact: compactSlicePage}, &discoveryv1.EndpointSlice{}, sliceSink{store}},
	} {
		c.lists = append(c.lists, w.lw)
		c.reflectors = append(c.reflectors, toolscache.NewReflectorWithOptions(w.lw, w.obj, w.sink, toolscache.ReflectorOptions{
			Name: "mooring-agent-" + w.lw.resource, Logger: &logger}))
	}
	return c, nil
}

// Notify makes every change the store sees call changed with the Service
// whose decision input may have changed, and all after a first list
// (everything may have); call it before Run.
func (c *Cache) Notify(changed func(types.NamespacedName), all func()) {
	c.store.changed, c.store.all = changed, all
}

// Store is the store the cache fills.
func (c *Cache) Store() *Store { return c.store }

// Run runs the watches until ctx ends.
func (c *Cache) Run(ctx context.Context) error {
	done := make(chan struct{})
	for _, r := range c.reflectors {
		go func() {
			defer func() { done <- struct{}{} }()
			r.RunWithContext(ctx)
		}()
	}
	for range c.reflectors {
		<-done
	}
	return nil
}

// WaitForCacheSync waits until both types were listed once; false if ctx
// ended.
func (c *Cache) WaitForCacheSync(ctx context.Context) bool {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !c.store.synced() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// pagedListWatch lists in pages of listPage and converts each page to
// compact objects before asking for the next; watch events pass through
// whole (the store converts them one by one).
type pagedListWatch struct {
	client   rest.Interface
	resource string
	pageSize int64 // listPage if 0
	pages    atomic.Int64
	page     func() runtime.Object
	// compact appends the page's items, converted, to out.
	compact func(page runtime.Object, out *compactList)
}

// compactList is a whole list, converted.
type compactList struct {
	metav1.ListMeta
	Items []runtime.Object
}

func (*compactList) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (l *compactList) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = slices.Clone(l.Items)
	return &c
}

// IsWatchListSemanticsUnSupported keeps the Reflector on List: a WatchList
// stream gathers every full object before handing them over.
func (*pagedListWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (p *pagedListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return p.ListWithContext(context.Background(), opts)
}

func (p *pagedListWatch) Watch(opts metav1.ListOptions) (apiwatch.Interface, error) {
	return p.WatchWithContext(context.Background(), opts)
}

func (p *pagedListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	out := &compactList{}
	size := p.pageSize
	if size == 0 {
		size = listPage
	}
	opts.Limit, opts.Continue = size, ""
	if opts.ResourceVersion == "0" {
		// "Any version" is served whole from the watch cache, limit
		// ignored; the latest version is served in pages.
		opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
	}
	for {
		page := p.page()
		if err := p.client.Get().Resource(p.resource).VersionedParams(&opts, scheme.ParameterCodec).Do(ctx).Into(page); err != nil {
			return nil, err
		}
		p.pages.Add(1)
		p.compact(page, out)
		lm, ok := page.(metav1.ListInterface)
		if !ok {
			return nil, fmt.Errorf("listing %s: %T is not a list", p.resource, page)
		}
		out.ResourceVersion = lm.GetResourceVersion()
		if lm.GetContinue() == "" {
			return out, nil
		}
		// Later pages come from the first one's snapshot.
		opts = metav1.ListOptions{Limit: size, Continue: lm.GetContinue()}
	}
}

func (p *pagedListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (apiwatch.Interface, error) {
	opts.Watch = true
	return p.client.Get().Resource(p.resource).VersionedParams(&opts, scheme.ParameterCodec).Watch(ctx)
}

func compactServicePage(page runtime.Object, out *compactList) {
	p := page.(*corev1.ServiceList)
	for i := range p.Items {
		s := &p.Items[i]
		out.Items = append(out.Items, &compactServiceObject{key: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, c: compactServiceOf(s)})
	}
}

func compactSlicePage(page runtime.Object, out *compactList) {
	p := page.(*discoveryv1.EndpointSliceList)
	for i := range p.Items {
		es := &p.Items[i]
		out.Items = append(out.Items, &compactSliceObject{key: types.NamespacedName{Namespace: es.Namespace, Name: es.Name}, c: compactSliceOf(es)})
	}
}

// AllSynced waits for every cache (the informers and the compact one).
type AllSynced []interface{ WaitForCacheSync(context.Context) bool }

func (s AllSynced) WaitForCacheSync(ctx context.Context) bool {
	for _, c := range s {
		if !c.WaitForCacheSync(ctx) {
			return false
		}
	}
	return true
}
