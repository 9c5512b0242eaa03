package failover

import (
	"testing"
)

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
