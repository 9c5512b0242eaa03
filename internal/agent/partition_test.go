package agent

import (
	"slices"
	"testing"
)

func TestQuorumMembers(t *testing.T) {
	for _, tc := range []struct {
		live, unreachable, want []string
		majority                bool
	}{
		{[]string{"n1", "n2", "n3"}, nil, []string{"n1", "n2", "n3"}, true},
		{[]string{"n2", "n3"}, []string{"n1"}, []string{"n2", "n3"}, true},        // the majority side
		{[]string{"n1"}, []string{"n2", "n3"}, []string{"n2", "n3"}, false},       // the minority defers
		{[]string{"n1"}, []string{"n2"}, []string{"n1"}, true},                    // a tie: the smallest name
		{[]string{"n2"}, []string{"n1"}, []string{"n1"}, false},                   // ... and its other half
		{[]string{"n3", "n4"}, []string{"n1", "n2"}, []string{"n1", "n2"}, false}, // 2 against 2
		{[]string{"n1"}, nil, []string{"n1"}, true},                               // a lone survivor of real deaths
	} {
		got, majority := quorumMembers(tc.live, tc.unreachable)
		if !slices.Equal(got, tc.want) || majority != tc.majority {
			t.Errorf("live %v unreachable %v: %v majority=%v, want %v %v", tc.live, tc.unreachable, got, majority, tc.want, tc.majority)
		}
	}
}
