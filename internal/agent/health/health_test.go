package health

import (
	"strings"
	"testing"
)

// Issue 19: an agent gossiping without a key says so in every /readyz
// answer, ready or not, and one with a key never does.
func TestReadyzNamesInsecureGossip(t *testing.T) {
	for _, tc := range []struct {
		insecure, decided bool
	}{{true, true}, {true, false}, {false, true}, {false, false}} {
		st := &State{}
		st.NodeFound.Store(true)
		st.Decided.Store(tc.decided)
		p := Probe{State: st, Node: "n1", GossipPort: 7946, Members: func() []string { return []string{"n1"} }, InsecureGossip: tc.insecure}
		text, err := p.Readyz()
		if got := strings.Contains(text, "WITHOUT a key (--insecure-gossip)"); got != tc.insecure {
			t.Errorf("insecure %v, decided %v: /readyz text %q", tc.insecure, tc.decided, text)
		}
		if (err == nil) != tc.decided {
			t.Errorf("insecure %v, decided %v: error %v", tc.insecure, tc.decided, err)
		}
		if tc.decided && !strings.HasPrefix(text, "serving from the live API state") {
			t.Errorf("decided: text %q, want it to start with where it serves from", text)
		}
	}
}
