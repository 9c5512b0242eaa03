package agent

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// The announced-by annotation maps each address of a Service to who
// announces it: "10.0.0.7=node-2/eth0,2001:db8::7=node-1/eth0+eth1", sorted
// by address. Each owner writes its own entries, so a move costs exactly one
// patch (by the new owner) and nothing is written while nothing moves.

// parseAnnouncedBy reads the annotation, skipping malformed entries (it is
// user-editable; a typo must not stop the agent).
func parseAnnouncedBy(s string) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, e := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(e), "=")
		if !ok || v == "" {
			continue
		}
		if a, err := netip.ParseAddr(k); err == nil {
			out[a.Unmap()] = v
		}
	}
	return out
}

func formatAnnouncedBy(m map[netip.Addr]string) string {
	var b strings.Builder
	for _, a := range slices.SortedFunc(maps.Keys(m), netip.Addr.Compare) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(a.String())
		b.WriteByte('=')
		b.WriteString(m[a])
	}
	return b.String()
}

// announcer is one entry's value: "node/if1+if2".
func announcer(node string, ifaces []string) string {
	return node + "/" + strings.Join(ifaces, "+")
}

// announcerNode is the node part of an entry's value.
func announcerNode(v string) string {
	n, _, _ := strings.Cut(v, "/")
	return n
}
