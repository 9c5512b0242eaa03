package lab

import (
	"strings"
	"testing"
)

// Exec's errors carry one prefix and say how to call it (issue 8 item 10:
// no "exec: exec:").
func TestExecErrors(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{nil, "lab: no command given: use mooring lab exec <host> -- <command>"},
		{[]string{"/no/such/program"}, "lab: exec: \"/no/such/program\""},
	} {
		err := Exec("/proc/self/ns/net", tc.argv)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "exec: exec:") {
			t.Errorf("Exec(%q) = %v, want %q…", tc.argv, err, tc.want)
		}
	}
}
