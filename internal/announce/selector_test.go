package announce

import (
	"strings"
	"testing"
)

func TestSelector(t *testing.T) {
	labels := map[string]string{"role": "worker", "zone": "a"}
	tests := []struct {
		name    string
		sel     *Selector
		match   bool
		invalid string // substring of the validation error
	}{
		{name: "nil matches all", sel: nil, match: true},
		{name: "empty matches all", sel: &Selector{}, match: true},
		{name: "matchLabels hit", sel: &Selector{MatchLabels: map[string]string{"role": "worker"}}, match: true},
		{name: "matchLabels miss", sel: &Selector{MatchLabels: map[string]string{"role": "cp"}}},
		{name: "In", sel: &Selector{MatchExpressions: []Requirement{{Key: "zone", Operator: OpIn, Values: []string{"a", "b"}}}}, match: true},
		{name: "NotIn", sel: &Selector{MatchExpressions: []Requirement{{Key: "zone", Operator: OpNotIn, Values: []string{"a"}}}}},
		{name: "NotIn absent key", sel: &Selector{MatchExpressions: []Requirement{{Key: "gpu", Operator: OpNotIn, Values: []string{"x"}}}}, match: true},
		{name: "Exists", sel: &Selector{MatchExpressions: []Requirement{{Key: "role", Operator: OpExists}}}, match: true},
		{name: "DoesNotExist", sel: &Selector{MatchExpressions: []Requirement{{Key: "role", Operator: OpDoesNotExist}}}},
		{name: "prefixed key", sel: &Selector{MatchLabels: map[string]string{"node-role.kubernetes.io/worker": ""}}},
		{name: "unknown operator", sel: &Selector{MatchExpressions: []Requirement{{Key: "zone", Operator: "Equals", Values: []string{"a"}}}}, invalid: "unknown operator"},
		{name: "In without values", sel: &Selector{MatchExpressions: []Requirement{{Key: "zone", Operator: OpIn}}}, invalid: "at least one value"},
		{name: "Exists with values", sel: &Selector{MatchExpressions: []Requirement{{Key: "zone", Operator: OpExists, Values: []string{"a"}}}}, invalid: "no values"},
		{name: "bad key", sel: &Selector{MatchLabels: map[string]string{"-role": "x"}}, invalid: "label key"},
		{name: "bad prefix", sel: &Selector{MatchLabels: map[string]string{"Bad_Prefix/role": "x"}}, invalid: "prefix"},
		{name: "bad value", sel: &Selector{MatchLabels: map[string]string{"role": "a b"}}, invalid: "label value"},
		{name: "long value", sel: &Selector{MatchExpressions: []Requirement{{Key: "z", Operator: OpIn, Values: []string{strings.Repeat("a", 64)}}}}, invalid: "label value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.sel.Validate()
			if tt.invalid != "" {
				if err == nil || !strings.Contains(err.Error(), tt.invalid) {
					t.Fatalf("Validate() = %v, want an error containing %q", err, tt.invalid)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			if got := tt.sel.Matches(labels); got != tt.match {
				t.Fatalf("Matches = %v, want %v", got, tt.match)
			}
		})
	}
}
