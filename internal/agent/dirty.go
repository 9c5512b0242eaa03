package agent

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/mooringlb/mooring/internal/agent/mailbox"
)

// dirty is what changed since the last decision: informer handlers mark
// it, the decision loop takes it. Services are named one by one; Nodes,
// policies and interfaces are few, so they are re-read whole.
type dirty struct {
	mu sync.Mutex
	changed
	kick chan struct{}
}

// changed names what to re-read.
type changed struct {
	services map[types.NamespacedName]struct{}
	all      bool // every Service (start-up)
	nodes    bool
	policies bool
	links    bool
}

func newDirty() *dirty {
	return &dirty{changed: changed{services: map[types.NamespacedName]struct{}{}, all: true, nodes: true, policies: true, links: true},
		kick: make(chan struct{}, 1)}
}

func (d *dirty) mark(fn func(c *changed)) {
	d.mu.Lock()
	fn(&d.changed)
	d.mu.Unlock()
	mailbox.Poke(d.kick)
}

func (d *dirty) service(k types.NamespacedName) {
	d.mark(func(c *changed) { c.services[k] = struct{}{} })
}

// take returns what is dirty and resets it.
func (d *dirty) take() changed {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.changed
	d.changed = changed{services: map[types.NamespacedName]struct{}{}}
	return out
}

// merge adds o's marks to d (a failed decision gives them back).
func (d *changed) merge(o changed) {
	for k := range o.services {
		d.services[k] = struct{}{}
	}
	d.all, d.nodes, d.policies, d.links = d.all || o.all, d.nodes || o.nodes, d.policies || o.policies, d.links || o.links
}

// flagHandler returns an informer handler that marks d with flag. Service
// and EndpointSlice events reach d through the compact store
// (internal/agent/store), which marks only what the decision reads.
func (d *dirty) flagHandler(flag func(c *changed)) toolscache.ResourceEventHandlerFuncs {
	mark := func(any) { d.mark(flag) }
	return toolscache.ResourceEventHandlerFuncs{AddFunc: mark, UpdateFunc: func(_, n any) { mark(n) }, DeleteFunc: mark}
}
