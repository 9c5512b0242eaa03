package health

import (
	"errors"
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

// Seed 004's /readyz said "responder: responder: NDP socket ...": the
// responder's own errors carry its name, so it is said once; an error
// without it gets it.
func TestServingNamesTheResponderOnce(t *testing.T) {
	st := &State{}
	st.NodeFound.Store(true)
	st.Decided.Store(true)
	for _, tc := range []struct{ err, want string }{
		{"responder: NDP socket on eth0 (2): setsockopt: cannot allocate memory", "responder: NDP socket on eth0 (2): setsockopt: cannot allocate memory"},
		{"link not ready", "responder: link not ready"},
	} {
		p := Probe{State: st, Node: "n1", Members: func() []string { return []string{"n1"} },
			Responder: func() error { return errors.New(tc.err) }}
		if err := p.Serving(); err == nil || err.Error() != tc.want {
			t.Errorf("responder error %q: Serving %v, want %q", tc.err, err, tc.want)
		}
	}
}
