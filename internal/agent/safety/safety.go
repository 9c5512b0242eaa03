package safety

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/mailbox"
	"github.com/mooringlb/mooring/internal/agent/status"
	"github.com/mooringlb/mooring/internal/announce"
)

// Sysctls reads the kernel settings the stale-address check needs; a seam
// so the check is testable without /proc.
type Sysctls interface {
	// ArpIgnore returns net.ipv4.conf.<iface>.arp_ignore ("all" included).
	ArpIgnore(iface string) (int, error)
}

// Prober asks who answers for addrs on an interface and returns, per
// address, the MACs other than this interface's own that answered.
type Prober interface {
	Probe(ctx context.Context, ifindex int, addrs []netip.Addr, wait time.Duration) (map[netip.Addr][]net.HardwareAddr, error)
}

// Config paces the checks.
type Config struct {
	Node string
	// SafetyInterval paces the stale-local-address check (it also runs on
	// every address change); ProbeInterval paces the split-brain probe (0
	// disables it), which waits ProbeWait for answers.
	SafetyInterval, ProbeInterval, ProbeWait time.Duration
}

// Deps are what the checks read and whom they tell.
type Deps struct {
	Reader   client.Reader // the Services to record Events on
	Addrs    func() ([]announce.LocalAddr, error)
	Sysctls  Sysctls
	Prober   Prober // nil: no split-brain probe
	Recorder *status.Recorder
	// Reannounce sends an address's gratuitous series again; nil: never.
	Reannounce func(ifindex int, addr netip.Addr)
	// Stalled reports that the decision is stale (a stall not acted on
	// yet, or a returning node's hold-down): the probe stands still.
	Stalled func() bool
	Clock   clock.WithTicker
	Log     *slog.Logger
}

// Metrics are the checks' gauges and counter.
type Metrics struct {
	Stale, SplitBrain prometheus.Gauge
	SplitBrainTotal   prometheus.Counter
}

// NewMetrics builds them on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) Metrics {
	f := promauto.With(reg)
	return Metrics{
		Stale: f.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_stale_local_addresses",
			Help: "Announced addresses configured on this node where its kernel answers ARP/NDP by itself (arp_ignore=0): a second responder.",
		}),
		SplitBrain: f.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_split_brain_addresses",
			Help: "Addresses this node announces for which another MAC also answered at the last probe.",
		}),
		SplitBrainTotal: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_split_brain_detections_total",
			Help: "Times a probe found another MAC answering for an address this node announces.",
		}),
	}
}

// Checks runs the stale-local-address check and the split-brain probe.
type Checks struct {
	cfg  Config
	deps Deps
	met  Metrics
}

// New builds the checks; nothing runs until RunStale and RunProbe.
func New(cfg Config, deps Deps, met Metrics) *Checks {
	return &Checks{cfg: cfg, deps: deps, met: met}
}

// maxProbesPerRound bounds one split-brain round, so its cost stays flat
// however many addresses a node owns; larger tables are covered in turns.
const maxProbesPerRound = 128

// RunStale runs the stale-local-address check on a timer and after every
// published decision (in; address changes trigger a decision) until ctx
// ends.
func (a *Checks) RunStale(ctx context.Context, in *mailbox.Box[announce.Result]) error {
	tick := a.deps.Clock.NewTicker(a.cfg.SafetyInterval)
	defer tick.Stop()
	known := map[announce.Stale]bool{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		case <-in.Ready():
		}
		res, ok := in.Get()
		if !ok {
			continue
		}
		stale, err := a.checkStale(res)
		if err != nil {
			a.deps.Log.Warn("checking for stale local addresses", "err", err)
			continue
		}
		a.met.Stale.Set(float64(len(stale)))
		next := map[announce.Stale]bool{}
		for _, s := range stale {
			next[s] = true
			if !known[s] {
				a.reportStale(ctx, res, s)
			}
		}
		known = next
	}
}

// probeTarget is one announced address on one interface.
type probeTarget struct {
	ifindex int
	addr    netip.Addr
}

// splitChanges updates split (the targets where another MAC answered in
// their last probe) from a round that probed batch and found found, forgets
// targets no longer in local, and returns the probed targets whose state
// changed: a split that began (clients may have learned the other MAC) or
// one that ended (clients that learned it are still pointed at it, and
// nothing but an announcement corrects them).
func splitChanges(split map[probeTarget]bool, local, batch []announce.Entry, found map[string]conflict) []probeTarget {
	now := map[probeTarget]bool{}
	for _, c := range found {
		now[probeTarget{c.ifindex, c.addr}] = true
	}
	var changed []probeTarget
	for _, e := range batch {
		t := probeTarget{e.IfIndex, e.Addr}
		if now[t] != split[t] {
			changed = append(changed, t)
		}
		if now[t] {
			split[t] = true
		} else {
			delete(split, t)
		}
	}
	keep := map[probeTarget]bool{}
	for _, e := range local {
		keep[probeTarget{e.IfIndex, e.Addr}] = true
	}
	maps.DeleteFunc(split, func(t probeTarget, _ bool) bool { return !keep[t] })
	return changed
}

// reannounce asks the responder to send t's gratuitous series again, when
// it can (internal/responder.Manager.Reannounce).
func (a *Checks) reannounce(t probeTarget) {
	if a.deps.Reannounce == nil {
		return
	}
	a.deps.Log.Info("split brain changed: re-announcing", "addr", t.addr, "ifindex", t.ifindex)
	a.deps.Reannounce(t.ifindex, t.addr)
}

// checkStale reads the node's addresses and arp_ignore settings and asks
// the core which announced addresses this kernel would answer for itself.
func (a *Checks) checkStale(res announce.Result) ([]announce.Stale, error) {
	addrs, err := a.deps.Addrs()
	if err != nil {
		return nil, err
	}
	arp := map[string]int{}
	for _, name := range append([]string{announce.ArpIgnoreAll}, ifaceNames(res.Listen)...) {
		v, err := a.deps.Sysctls.ArpIgnore(name)
		if err != nil {
			return nil, err
		}
		arp[name] = v
	}
	return announce.StaleLocal(res.Owners, addrs, res.Listen, arp), nil
}

func ifaceNames(ifs []announce.Interface) []string {
	out := make([]string, len(ifs))
	for i, ifi := range ifs {
		out[i] = ifi.Name
	}
	return out
}

func (a *Checks) reportStale(ctx context.Context, res announce.Result, s announce.Stale) {
	owner, _ := res.OwnerOf(s.Addr)
	msg := fmt.Sprintf("node %s has %s configured on %s and its kernel answers ARP/NDP for it on %s by itself, beside the announcing node %s: "+
		"remove the address (a leftover kube-ipvs0?) or set net.ipv4.conf.all.arp_ignore=1 on %s",
		a.cfg.Node, s.Addr, s.On, s.Via, owner, a.cfg.Node)
	a.deps.Log.Warn("stale local address: a second ARP responder", "addr", s.Addr, "on", s.On, "via", s.Via, "owner", owner)
	a.recordOnServices(ctx, res, s.Addr, status.Event{Type: corev1.EventTypeWarning, Reason: mooringv1.EventReasonStaleLocalAddress, Message: msg})
}

// recordOnServices records ev on every Service holding addr.
func (a *Checks) recordOnServices(ctx context.Context, res announce.Result, addr netip.Addr, ev status.Event) {
	i, ok := slices.BinarySearchFunc(res.Owners, addr, func(o announce.Owner, a netip.Addr) int { return o.Addr.Compare(a) })
	if !ok {
		return
	}
	for _, k := range res.Owners[i].Services {
		var svc corev1.Service
		if err := a.deps.Reader.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: k.Name}, &svc); err != nil {
			continue // gone meanwhile
		}
		a.deps.Recorder.Record(ctx, &svc, ev)
	}
}

// RunProbe is the split-brain check: every ProbeInterval the owner asks
// for each address the latest decision (in) announces here (at most
// maxProbesPerRound, in turns) and reports any other MAC that answers. It
// returns at once without a Prober or with ProbeInterval 0.
func (a *Checks) RunProbe(ctx context.Context, in *mailbox.Box[announce.Result]) error {
	if a.deps.Prober == nil || a.cfg.ProbeInterval <= 0 {
		return nil
	}
	tick := a.deps.Clock.NewTicker(a.cfg.ProbeInterval)
	defer tick.Stop()
	known := map[string]bool{}
	split := map[probeTarget]bool{}
	offset := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		}
		res, ok := in.Get()
		// After a stall the decision is stale until the decision loop
		// has dropped it, and a returning agent answers nothing: another
		// MAC answering is no split brain then (internal/agent/handoff).
		if !ok || len(res.Local) == 0 || a.deps.Stalled() {
			a.met.SplitBrain.Set(0)
			clear(split)
			continue
		}
		batch := rotate(res.Local, offset, maxProbesPerRound)
		offset += len(batch)
		found := a.probeRound(ctx, batch)
		a.met.SplitBrain.Set(float64(len(found)))
		next := map[string]bool{}
		for k, c := range found {
			next[k] = true
			if !known[k] {
				a.met.SplitBrainTotal.Inc()
				a.reportSplitBrain(ctx, res, c)
			}
		}
		known = next
		changed := splitChanges(split, res.Local, batch, found)
		if a.deps.Stalled() {
			continue // stalled during the round (see above)
		}
		for _, t := range changed {
			a.reannounce(t)
		}
	}
}

// rotate returns up to n entries starting at offset (wrapping), so that
// rounds cover every entry in turn.
func rotate(es []announce.Entry, offset, n int) []announce.Entry {
	if len(es) <= n {
		return es
	}
	out := make([]announce.Entry, 0, n)
	for i := range n {
		out = append(out, es[(offset+i)%len(es)])
	}
	return out
}

type conflict struct {
	addr    netip.Addr
	ifindex int
	ifname  string
	macs    []net.HardwareAddr
}

func (a *Checks) probeRound(ctx context.Context, batch []announce.Entry) map[string]conflict {
	byIf := map[int][]netip.Addr{}
	names := map[int]string{}
	for _, e := range batch {
		byIf[e.IfIndex] = append(byIf[e.IfIndex], e.Addr)
		names[e.IfIndex] = e.IfName
	}
	found := map[string]conflict{}
	for ifindex, addrs := range byIf {
		got, err := a.deps.Prober.Probe(ctx, ifindex, addrs, a.cfg.ProbeWait)
		if err != nil {
			a.deps.Log.Warn("split-brain probe failed", "interface", names[ifindex], "err", err)
			continue
		}
		for addr, macs := range got {
			if len(macs) == 0 {
				continue
			}
			c := conflict{addr: addr, ifindex: ifindex, ifname: names[ifindex], macs: macs}
			found[c.key()] = c
		}
	}
	return found
}

func (c conflict) key() string {
	var b strings.Builder
	b.WriteString(c.addr.String() + "/" + c.ifname)
	ms := slices.Clone(c.macs)
	slices.SortFunc(ms, func(x, y net.HardwareAddr) int { return bytes.Compare(x, y) })
	for _, m := range ms {
		b.WriteString("/" + m.String())
	}
	return b.String()
}

func (a *Checks) reportSplitBrain(ctx context.Context, res announce.Result, c conflict) {
	var macs []string
	for _, m := range c.macs {
		macs = append(macs, m.String())
	}
	msg := fmt.Sprintf("split brain: %s is announced by %s on %s, but %s also answered for it: clients may reach either; "+
		"look for a stale copy of the address (kube-ipvs0, arp_ignore=0) or another announcer (MetalLB, kube-vip) on the segment",
		c.addr, a.cfg.Node, c.ifname, strings.Join(macs, ", "))
	a.deps.Log.Warn("split brain: another MAC answers for an announced address", "addr", c.addr, "interface", c.ifname, "macs", macs)
	a.recordOnServices(ctx, res, c.addr, status.Event{Type: corev1.EventTypeWarning, Reason: mooringv1.EventReasonSplitBrain, Message: msg})
}
