package agent

import (
	"slices"
	"testing"
)

func TestQuorumMembers(t *testing.T) {
	for _, tc := range []struct {
		live, held, unreachable, want []string
		majority                      bool
	}{
		{[]string{"n1", "n2", "n3"}, nil, nil, []string{"n1", "n2", "n3"}, true},
		{[]string{"n2", "n3"}, nil, []string{"n1"}, []string{"n2", "n3"}, true},        // the majority side
		{[]string{"n1"}, nil, []string{"n2", "n3"}, []string{"n2", "n3"}, false},       // the minority defers
		{[]string{"n1"}, nil, []string{"n2"}, []string{"n1"}, true},                    // a tie: the smallest name
		{[]string{"n2"}, nil, []string{"n1"}, []string{"n1"}, false},                   // ... and its other half
		{[]string{"n3", "n4"}, nil, []string{"n1", "n2"}, []string{"n1", "n2"}, false}, // 2 against 2
		{[]string{"n1"}, nil, nil, []string{"n1"}, true},                               // a lone survivor of real deaths
		// Held nodes (gossip lost, kernel answers) stay members of the
		// majority until released or unreachable...
		{[]string{"n1", "n2", "n3"}, []string{"n1"}, nil, []string{"n1", "n2", "n3"}, true},
		// ... while a strict minority counting them defers at once,
		{[]string{"n1", "n2", "n3"}, []string{"n2", "n3"}, nil, []string{"n2", "n3"}, false},
		{[]string{"n1", "n3"}, []string{"n3"}, []string{"n2"}, []string{"n2", "n3"}, false},
		// but a tie with held nodes waits (in two nodes, a stalled peer
		// must not make the other defer).
		{[]string{"n1", "n2"}, []string{"n1"}, nil, []string{"n1", "n2"}, true},
		{[]string{"n1", "n2"}, []string{"n2"}, nil, []string{"n1", "n2"}, true},
	} {
		got, majority := quorumMembers(tc.live, tc.held, tc.unreachable)
		if !slices.Equal(got, tc.want) || majority != tc.majority {
			t.Errorf("live %v held %v unreachable %v: %v majority=%v, want %v %v", tc.live, tc.held, tc.unreachable, got, majority, tc.want, tc.majority)
		}
	}
}
