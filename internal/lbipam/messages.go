package lbipam

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Every message is one sentence an operator can act on: it names the
// Service, the pool(s) or address involved, and the fix.

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func svcRef(svc Service) string { return fmt.Sprintf("Service %q", svc.Key.String()) }

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(x)
	}
	return strings.Join(q, ", ")
}

func problem(f Family, r Reason, format string, args ...any) *Problem {
	return &Problem{Family: f, Reason: r, Message: fmt.Sprintf(format, args...)}
}

func poolNotFoundProblem(svc Service, unknown []string) *Problem {
	return problem(0, ReasonPoolNotFound,
		"%s asks for pool(s) %s, which do not exist: create the pool or fix the Service's pools annotation",
		svcRef(svc), quoteList(unknown))
}

func noPoolProblem(svc Service, disabled, manual []string) *Problem {
	if len(manual) > 0 {
		return problem(0, ReasonNoPoolMatches,
			"the pool(s) selecting %s, %s, hand out addresses only on request (autoAssign: false): request one of their addresses, name the pool in the Service's pools annotation, or add a pool that assigns automatically",
			svcRef(svc), quoteList(manual))
	}
	if len(disabled) > 0 {
		return problem(0, ReasonNoPoolMatches,
			"the only pool(s) selecting %s, %s, are disabled: enable one or add a pool that selects it",
			svcRef(svc), quoteList(disabled))
	}
	if len(svc.Pools) > 0 {
		return problem(0, ReasonNoPoolMatches,
			"none of the pool(s) %s named by %s select it: fix their serviceSelector/namespaceSelector or the Service's pools annotation",
			quoteList(svc.Pools), svcRef(svc))
	}
	return problem(0, ReasonNoPoolMatches,
		"no pool selects %s: add a pool whose serviceSelector and namespaceSelector match it",
		svcRef(svc))
}

func familyUnavailableProblem(svc Service, f Family, pools []*pool) *Problem {
	var broken []string
	for _, p := range pools {
		for _, msg := range p.badFamily[f] {
			broken = append(broken, fmt.Sprintf("pool %q %s", p.Name, msg))
		}
	}
	if len(broken) > 0 {
		return problem(f, ReasonFamilyUnavailable,
			"no pool selecting %s has usable IPv%d addresses: its IPv%d block(s) are invalid (%s): fix the block(s) or drop IPv%d from spec.ipFamilies",
			svcRef(svc), f, f, strings.Join(broken, "; "), f)
	}
	return problem(f, ReasonFamilyUnavailable,
		"no pool selecting %s has IPv%d addresses (pools %s): add an IPv%d block to one of them or drop IPv%d from spec.ipFamilies",
		svcRef(svc), f, quoteList(names(pools)), f, f)
}

// alsoDisabled adds to prob the disabled pools that select the Service,
// unless the message names them already.
func alsoDisabled(prob *Problem, disabled []*pool) *Problem {
	var missing []string
	for _, p := range disabled {
		if !strings.Contains(prob.Message, strconv.Quote(p.Name)) {
			missing = append(missing, p.Name)
		}
	}
	if len(missing) > 0 {
		prob.Message += fmt.Sprintf(" (pool(s) %s also select it but are disabled: enabling one would serve it)", quoteList(missing))
	}
	return prob
}

func (a *Allocator) exhaustedProblem(svc Service, f Family, pools []*pool) *Problem {
	parts := make([]string, 0, len(pools))
	for _, p := range pools {
		u := p.usage(&a.used, f)
		parts = append(parts, fmt.Sprintf("%q (%s of %s used)", p.Name, u.Used, u.Total))
	}
	extra := ""
	if n := a.requestedFree(svc.Key, pools, f); n > 0 {
		extra = fmt.Sprintf(" (%d free address(es) are kept for the Services that request them)", n)
	}
	what := "pool " + parts[0] + " has"
	if len(parts) > 1 {
		what = "pools " + strings.Join(parts, ", ") + " have"
	}
	return problem(f, ReasonPoolExhausted,
		"%s: %s no free IPv%d address%s: add a block or delete unused Services",
		svcRef(svc), what, f, extra)
}

// invalidSuffix ends every InvalidRequest message: what happens meanwhile.
const invalidSuffix = " (the Service keeps the addresses it holds; nothing new is assigned until this is fixed)"

func twoRequestsMessage(svc Service, f Family, reqs []netip.Addr) string {
	return fmt.Sprintf("%s requests several IPv%d addresses (%s, %s): request at most one address per family%s",
		svcRef(svc), f, reqs[0], reqs[1], invalidSuffix)
}

func familyNotAskedMessage(svc Service, addr netip.Addr) string {
	f := FamilyOf(addr)
	return fmt.Sprintf("%s requests %s but spec.ipFamilies does not include IPv%d: add the family (ipFamilyPolicy PreferDualStack or RequireDualStack) or request an address of the Service's family%s",
		svcRef(svc), addr, f, invalidSuffix)
}

func zonedRequestMessage(svc Service, addr netip.Addr) string {
	return fmt.Sprintf("%s requests %s, which carries an IPv6 zone: request the address without %%%s%s",
		svcRef(svc), addr, addr.Zone(), invalidSuffix)
}

func requestedBuggyProblem(svc Service, addr netip.Addr, pool string) *Problem {
	return problem(FamilyOf(addr), ReasonRequestedNotAllowed,
		"%s requests %s, which ends in .0 or .255, and pool %q sets avoidBuggyIPs: request another address or unset avoidBuggyIPs",
		svcRef(svc), addr, pool)
}

func sharingKeyConflictProblem(svc Service, f Family, addr netip.Addr, holder ServiceKey, why string) *Problem {
	return problem(f, ReasonSharingConflict,
		"%s has sharing key %q, but Service %q holds the key's IPv%d address %s and %s: give the Services compatible ports (or namespaces, externalTrafficPolicy), use another sharing key, or remove the key to get an address of its own",
		svcRef(svc), svc.SharingKey, holder.String(), f, addr, why)
}

func requestedOutsideProblem(svc Service, addr netip.Addr) *Problem {
	if what := UnusableAddr(addr); what != "" {
		return problem(FamilyOf(addr), ReasonRequestedOutside,
			"%s requests %s, which is %s and can never be a Service address (no pool may hold it): request an address from a pool",
			svcRef(svc), addr, what)
	}
	return problem(FamilyOf(addr), ReasonRequestedOutside,
		"%s requests %s, which is in no pool: add a pool block containing it or request an address from an existing pool",
		svcRef(svc), addr)
}

func requestedDisabledProblem(svc Service, addr netip.Addr, pool string) *Problem {
	return problem(FamilyOf(addr), ReasonRequestedDisabled,
		"%s requests %s from pool %q, which is disabled: enable the pool or request another address",
		svcRef(svc), addr, pool)
}

func requestedConflictingProblem(svc Service, addr netip.Addr, pool string, older []string) *Problem {
	return problem(FamilyOf(addr), ReasonRequestedConflicting,
		"%s requests %s from pool %q, but that part of the pool overlaps older pool(s) %s, which keep it: remove the overlap or make the older pool select the Service",
		svcRef(svc), addr, pool, quoteList(older))
}

func requestedFirstLastProblem(svc Service, addr netip.Addr, pool string) *Problem {
	return problem(FamilyOf(addr), ReasonRequestedNotAllowed,
		"%s requests %s, the first or last address of a CIDR block of pool %q, which does not allow those: set allowFirstLastIPs on the pool or request another address",
		svcRef(svc), addr, pool)
}

func requestedNotSelectedProblem(svc Service, addr netip.Addr, pools []string) *Problem {
	return problem(FamilyOf(addr), ReasonRequestedNotAllowed,
		"%s requests %s from pool(s) %s, which do not select it: fix the pool's serviceSelector/namespaceSelector or the Service's pools annotation",
		svcRef(svc), addr, quoteList(pools))
}

func inUseProblem(svc Service, addr netip.Addr, other ServiceKey, r Reason, why string) *Problem {
	return problem(FamilyOf(addr), r,
		"%s requests %s, which Service %q holds, and %s: request another address or make the two Services compatible",
		svcRef(svc), addr, other.String(), why)
}

func rolledBackProblem(svc Service, f Family, addr netip.Addr, blocking *Problem) *Problem {
	return problem(f, blocking.Reason,
		"%s was not given %s because it requires all its IP families and IPv%d is pending (%s): fix that or switch to PreferDualStack",
		svcRef(svc), addr, blocking.Family, blocking.Reason)
}

func heldOutsideProblem(svc Service, addr netip.Addr) *Problem {
	return problem(FamilyOf(addr), ReasonHeldOutsidePools,
		"%s keeps %s, which is in no pool any more: add a pool block containing it, or request another address to move the Service",
		svcRef(svc), addr)
}

func heldDuplicateProblem(svc Service, addr netip.Addr, other ServiceKey, why string) Problem {
	return *problem(FamilyOf(addr), ReasonHeldDuplicate,
		"%s and Service %q both hold %s although %s: request another address for one of them",
		svcRef(svc), other.String(), addr, why)
}

// requestedFree counts the free addresses of pools that other Services
// request: automatic allocation leaves them alone.
func (a *Allocator) requestedFree(key ServiceKey, pools []*pool, f Family) int {
	n := 0
	for addr, ks := range a.requests {
		if FamilyOf(addr) != f || a.used.Contains(addr) || len(ks) == 0 {
			continue
		}
		if own := a.owner(addr); own != nil && slices.Contains(pools, own) && !own.avoids(addr) && a.requestedByOther(addr, key, own) {
			n++
		}
	}
	return n
}
