package failover

import (
	"net/netip"
	"strings"
	"testing"
)

func FuzzParseAnnouncedBy(f *testing.F) {
	for _, s := range []string{"", "node-b/eth0", "10.213.0.100=node-3/eth0,fd00:213::64=node-1/eth0", "=/", ",,;; =x", "a=b=c/d"} {
		f.Add(s, "10.213.0.100")
	}
	f.Fuzz(func(t *testing.T, value, addr string) {
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return
		}
		node := ParseAnnouncedBy(value, a)
		if node != "" && (!strings.Contains(value, node) || strings.ContainsAny(node, "/, ;")) {
			t.Errorf("ParseAnnouncedBy(%q, %s) = %q", value, a, node)
		}
	})
}

func FuzzParseNodeMAC(f *testing.F) {
	for _, s := range []string{"node-a=02:00:00:00:00:0a", "x=", "=", "a=b=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseNodeMAC(s)
		if err == nil && (m.Node == "" || len(m.MAC) == 0) {
			t.Errorf("ParseNodeMAC(%q) = %+v with no error", s, m)
		}
	})
}
