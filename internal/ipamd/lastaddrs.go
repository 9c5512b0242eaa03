package ipamd

import "net/netip"

// maxLastAddrs bounds the pods whose last addresses an allocator
// remembers: a node runs at most a few hundred pods, and a hint is dropped
// once its pod got an address again.
const maxLastAddrs = 4096

// podKey names one interface of a pod across its sandboxes (container IDs).
type podKey struct{ network, namespace, pod, ifName string }

func podOf(al Allocation) podKey {
	return podKey{network: al.Network, namespace: al.Namespace, pod: al.Pod, ifName: al.IfName}
}

// lastAddrs remembers, per pod interface, the addresses its last freed
// allocation held (in memory only: an agent restart forgets them, and the
// pod then gets the lowest free address as before). At most max pods; the
// oldest hint goes first. Not safe for concurrent use: the Allocator's
// lock guards it.
type lastAddrs struct {
	max   int
	seq   uint64
	hints map[podKey]lastHint
	order []lastEntry // put order, oldest first; stale entries are skipped
}

type lastHint struct {
	addrs []netip.Addr
	seq   uint64
}

type lastEntry struct {
	pod podKey
	seq uint64
}

func newLastAddrs(max int) lastAddrs { return lastAddrs{max: max, hints: map[podKey]lastHint{}} }

// put remembers al's addresses for its pod (an allocation without a pod
// name, from an old plugin, is not remembered). Cost: O(1) amortized.
func (l *lastAddrs) put(al Allocation) {
	if al.Pod == "" || len(al.IPs) == 0 {
		return
	}
	addrs := make([]netip.Addr, len(al.IPs))
	for i, ip := range al.IPs {
		addrs[i] = ip.Address.Addr()
	}
	l.seq++
	k := podOf(al)
	l.hints[k] = lastHint{addrs: addrs, seq: l.seq}
	l.order = append(l.order, lastEntry{pod: k, seq: l.seq})
	for len(l.hints) > l.max {
		e := l.order[0]
		l.order = l.order[1:]
		if h, ok := l.hints[e.pod]; ok && h.seq == e.seq {
			delete(l.hints, e.pod)
		}
	}
	if len(l.order) > 2*l.max { // only stale entries beyond the live ones
		l.order = compactOrder(l.order, l.hints)
	}
}

// compactOrder keeps the entries that are still each pod's latest hint.
func compactOrder(order []lastEntry, hints map[podKey]lastHint) []lastEntry {
	out := make([]lastEntry, 0, len(hints))
	for _, e := range order {
		if h, ok := hints[e.pod]; ok && h.seq == e.seq {
			out = append(out, e)
		}
	}
	return out
}

func (l *lastAddrs) get(k podKey) []netip.Addr {
	if k.pod == "" {
		return nil
	}
	return l.hints[k].addrs
}

func (l *lastAddrs) drop(k podKey) { delete(l.hints, k) }
