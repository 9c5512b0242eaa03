package lab

import (
	"fmt"
	"strings"
	"time"

	"github.com/mooringlb/mooring/internal/netlab"
)

// Fault is a data-plane fault `lab up --fault` injects, so the operator's
// checks can be shown to catch it.
type Fault struct {
	// SlowNewPods: new pods on Node are unreachable from other nodes for
	// this long after the kubelet starts them, while they report Ready
	// (seed 004: every component Ready, every NEW pod unreachable for
	// 15-42 s). Pods running when the fault starts are not affected.
	SlowNewPods time.Duration
	// Node is the affected node; empty means the last node.
	Node string
}

// validate checks the fault against the lab's other settings: its node
// must be one of the lab's (node-1..node-N), and it needs the lab's static
// pod addresses.
func (f Fault) validate(c *Config) error {
	if f.SlowNewPods <= 0 {
		return nil
	}
	if c.usesPodIPAM() {
		return fmt.Errorf("lab: --fault works with the lab's static pod addresses only: drop --pod-ipam=%s or --fault", c.PodIPAM)
	}
	if f.Node == "" {
		return nil
	}
	for i := 1; i <= c.Nodes; i++ {
		if f.Node == netlab.NodeName(i) {
			return nil
		}
	}
	return fmt.Errorf("lab: --fault %s: no node %q in this lab (its nodes are %s..%s)", f, f.Node, netlab.NodeName(1), netlab.NodeName(c.Nodes))
}

// String is the fault as --fault takes it.
func (f Fault) String() string {
	s := "slow-new-pods=" + f.SlowNewPods.String()
	if f.Node != "" {
		s += "@" + f.Node
	}
	return s
}

// ParseFault reads "slow-new-pods=20s" or "slow-new-pods=20s@node-2".
func ParseFault(s string) (Fault, error) {
	name, val, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok || name != "slow-new-pods" {
		return Fault{}, fmt.Errorf("--fault %q: the only fault is slow-new-pods=DURATION[@NODE], e.g. slow-new-pods=20s", s)
	}
	d, node, _ := strings.Cut(val, "@")
	dur, err := time.ParseDuration(d)
	if err != nil || dur <= 0 {
		return Fault{}, fmt.Errorf("--fault %q: %q is not a positive duration such as 20s", s, d)
	}
	return Fault{SlowNewPods: dur, Node: node}, nil
}
