package announce

import (
	"maps"
	"reflect"
	"slices"
)

// RankingVersion names the rankings this build computes: Score's hash
// version, then the optional rankings (RankingMetalLB). Agents publish it
// over gossip so that a cluster running two rankings at once (mid-upgrade,
// after a change of hashVersion) is reported (RankingAgrees).
func RankingVersion() string { return hashVersion + metallbVersion }

// Capability is what one live member says it can serve, as its agent
// publishes it over gossip: the interfaces it can answer ARP/NDP on.
type Capability struct {
	// Any marks a member that publishes nothing (an agent older than
	// capabilities): it may serve every policy that selects it, as every
	// agent assumed before, so that old and new agents agree on owners
	// during an upgrade.
	Any bool
	// Interfaces are the member's usable interfaces (up, ARP-capable
	// Ethernet, not enslaved to a bridge or bond): a policy's interfaces
	// expressions are matched against these names.
	Interfaces []string
	// Defaults are the usable interfaces a policy that names none uses: the
	// one carrying the node's InternalIP, else its default route's.
	Defaults []string
}

// Capabilities maps live members to what they can serve. A nil map turns
// the filter off: every live known node may serve every policy that selects
// it. In a non-nil map a member without an entry serves nothing (its agent
// is not ready, or not healthy).
type Capabilities map[string]Capability

// canServe reports whether node has an interface on which it may announce
// under p. Cost: O(I·R) for I published interfaces and R expressions.
func (cs Capabilities) canServe(p *policy, node string) bool {
	if cs == nil {
		return true
	}
	c, ok := cs[node]
	if !ok {
		return false
	}
	if c.Any {
		return true
	}
	for _, name := range c.Interfaces {
		if c.allows(p, name) {
			return true
		}
	}
	return false
}

// allows reports whether p may use the interface called name on a member
// with capability c.
func (c Capability) allows(p *policy, name string) bool {
	if c.Any {
		return true
	}
	if len(p.ifaces) == 0 {
		return slices.Contains(c.Defaults, name)
	}
	if !slices.Contains(c.Interfaces, name) {
		return false
	}
	for _, re := range p.ifaces {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// interfaceMatcher returns how the local node's interfaces are matched to
// a policy: by its published capability when capabilities are on (so the
// local node answers exactly where the others believe it can), else by the
// policy's expressions alone.
func (cs Capabilities) interfaceMatcher(local string) func(*policy, Interface) bool {
	c, ok := cs[local]
	if cs == nil || !ok || c.Any {
		return matchesInterface
	}
	return func(p *policy, ifi Interface) bool { return !ifi.Loopback && c.allows(p, ifi.Name) }
}

// Serves reports whether a member with capability c may announce under p;
// an invalid policy serves nobody. Cost: compiles p's expressions.
func (c Capability) Serves(p Policy) bool {
	pols, _ := compile([]Policy{p})
	if len(pols) == 0 {
		return false
	}
	return Capabilities{"": c}.canServe(pols[0], "")
}

// SetCapabilities replaces what each member can serve (nil: no filter).
// Unless they are equal to the current ones every address is re-decided,
// so the agent keeps a member's last capability while it is away: a member
// leaving or coming back stays a membership change (SetMembers), which
// costs only the addresses it is eligible for. Cost: O(N·I) to compare.
func (s *State) SetCapabilities(caps Capabilities) []Change {
	if reflect.DeepEqual(caps, s.caps) {
		return nil
	}
	s.caps = maps.Clone(caps)
	return s.rebuildAll()
}
