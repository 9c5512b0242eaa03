package lab

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The faults `lab up --fault` injects once the lab is ready, so that the
// operator's checks (`mooring probe new-pod`, `mooring doctor`, `mooring
// status`) can be shown to catch them.
const (
	// FaultSlowNewPods: new pods on the node are unreachable from other
	// nodes for a while after they start, although they report Ready
	// (seed 004: every component Ready, every NEW pod unreachable for
	// 15-42 s).
	FaultSlowNewPods = "slow-new-pods"
	// FaultResponderOpen: the node's Mooring agent cannot open its
	// ARP/NDP sockets and retries in a loop while its process stays up
	// (seed 004's other half: a warning-level retry loop on one node).
	// The node's net.core.optmem_max (per network namespace) is set so low
	// that attaching the responder's socket filter fails with ENOMEM, and
	// the agent is restarted, as after an upgrade, so that it opens its
	// sockets again under the fault.
	FaultResponderOpen = "responder-open"
)

// faultOptmemMax is the node's net.core.optmem_max under
// FaultResponderOpen: below the size of the responder's BPF filter, above
// zero (which some kernels read as "no limit").
const faultOptmemMax = "8"

// Fault is one injected fault.
type Fault struct {
	// Kind is FaultSlowNewPods or FaultResponderOpen; "" is no fault.
	Kind string
	// SlowNewPods is how long new pods stay unreachable (FaultSlowNewPods).
	// Pods running when the fault starts are not affected.
	SlowNewPods time.Duration
	// Node is the affected node; empty means the default: the last node
	// for FaultSlowNewPods, the node answering ARP for the demo Service's
	// address for FaultResponderOpen.
	Node string
}

// String is the fault as --fault takes it.
func (f Fault) String() string {
	s := f.Kind
	if f.Kind == FaultSlowNewPods {
		s += "=" + f.SlowNewPods.String()
	}
	if f.Node != "" {
		s += "@" + f.Node
	}
	return s
}

// faultUsage is the accepted syntax, for error messages and --help.
const faultUsage = "slow-new-pods=DURATION[@NODE] (e.g. slow-new-pods=20s@node-2) or responder-open[@NODE]"

// ParseFault reads "slow-new-pods=20s", "slow-new-pods=20s@node-2",
// "responder-open" or "responder-open@node-2". It checks the syntax only:
// Validate checks the node against the lab.
func ParseFault(s string) (Fault, error) {
	s = strings.TrimSpace(s)
	spec, node, hasNode := strings.Cut(s, "@")
	if hasNode && node == "" {
		return Fault{}, fmt.Errorf("--fault %q: nothing after @: name a node, e.g. @node-2, or leave @ out", s)
	}
	name, val, hasVal := strings.Cut(spec, "=")
	switch name {
	case FaultSlowNewPods:
		dur, err := time.ParseDuration(val)
		if !hasVal || err != nil || dur <= 0 {
			return Fault{}, fmt.Errorf("--fault %q: %q is not a positive duration such as 20s", s, val)
		}
		return Fault{Kind: FaultSlowNewPods, SlowNewPods: dur, Node: node}, nil
	case FaultResponderOpen:
		if hasVal {
			return Fault{}, fmt.Errorf("--fault %q: %s takes no value: use %s[@NODE]", s, FaultResponderOpen, FaultResponderOpen)
		}
		return Fault{Kind: FaultResponderOpen, Node: node}, nil
	}
	return Fault{}, fmt.Errorf("--fault %q: unknown fault; the faults are %s", s, faultUsage)
}

// Validate checks f against the lab c will build: the node exists, and
// the fault fits the lab (static pod addresses for slow-new-pods; Mooring's
// agents as lab processes for responder-open). Every error is the user's
// to fix (`lab up` exits 2).
func (f Fault) Validate(c *Config) error {
	if f.Kind == "" {
		return nil
	}
	if f.Node != "" && !validNodeName(f.Node, c.Nodes) {
		return fmt.Errorf("--fault %s@%s: the lab has no node %q: its nodes are node-1..node-%d", f.Kind, f.Node, f.Node, c.Nodes)
	}
	switch f.Kind {
	case FaultSlowNewPods:
		if c.usesPodIPAM() {
			return fmt.Errorf("--fault %s works with the lab's static pod addresses only: drop --pod-ipam=%s or --fault", f.Kind, c.PodIPAM)
		}
	case FaultResponderOpen:
		switch {
		case !c.Mooring:
			return errors.New("--fault " + f.Kind + " makes a Mooring agent fail: it cannot go with --no-mooring")
		case c.Install != "":
			return fmt.Errorf("--fault %s restarts the node's agent as a lab process: it cannot go with --install=%s", f.Kind, c.Install)
		}
	default:
		return fmt.Errorf("--fault: unknown fault %q; the faults are %s", f.Kind, faultUsage)
	}
	return nil
}

// validNodeName: the lab's nodes are node-1..node-n.
func validNodeName(name string, n int) bool {
	for i := 1; i <= n; i++ {
		if name == fmt.Sprintf("node-%d", i) {
			return true
		}
	}
	return false
}
