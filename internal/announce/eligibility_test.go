package announce

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"
)

// A member whose interfaces do not match a policy never owns its
// addresses; the others share all of them.
func TestCapabilitiesNoMatchingInterfaceOwnsNothing(t *testing.T) {
	addrs := []string{"10.213.0.100", "10.213.0.101", "10.213.0.102", "10.213.0.103", "fd00:213::64", "fd00:213::65"}
	for _, local := range []string{"node-1", "node-2", "node-3"} {
		in := lab(local)
		in.Policies = []Policy{{Name: "eth0", LoadBalancerIPs: true, Interfaces: []string{"eth0"}}}
		in.Capabilities = Capabilities{
			"node-1": {Interfaces: []string{"eth0"}, Defaults: []string{"eth0"}},
			"node-2": {Interfaces: []string{"eth0", "eth1"}, Defaults: []string{"eth1"}},
			"node-3": {Interfaces: []string{"eth1"}, Defaults: []string{"eth1"}}, // no eth0
		}
		for i, a := range addrs {
			in.Services = append(in.Services, Service{Key: key(fmt.Sprint("s", i)), IngressIPs: ips(a)})
		}
		res := Decide(in)
		for _, a := range addrs {
			if got, want := mustOwner(t, res, a), ownerAmong(a, "node-1", "node-2"); got != want {
				t.Errorf("%s: %s owns %s, want %s", local, got, a, want)
			}
		}
		for _, e := range res.Local {
			if local == "node-3" || e.IfName != "eth0" {
				t.Errorf("%s answers %s on %s", local, e.Addr, e.IfName)
			}
		}
		if len(res.Problems) != 0 {
			t.Errorf("%s: problems %v", local, res.Problems)
		}
	}
}

// A policy that names no interfaces uses each member's defaults only; a
// member with no entry (not ready) serves nothing; an old agent (Any)
// serves everything, as before capabilities existed.
func TestCapabilitiesDefaultsReadinessAndOldAgents(t *testing.T) {
	in := lab("node-2")
	in.Services = []Service{{Key: key("a"), IngressIPs: ips("10.213.0.100", "10.213.0.101", "10.213.0.102", "fd00:213::64")}}
	in.Capabilities = Capabilities{"node-2": {Interfaces: []string{"eth0", "eth1"}, Defaults: []string{"eth1"}}}
	res := Decide(in)
	for _, o := range res.Owners {
		if o.Node != "node-2" {
			t.Fatalf("%s owned by %q with node-1 and node-3 not ready", o.Addr, o.Node)
		}
	}
	for _, e := range res.Local {
		if e.IfName != "eth1" {
			t.Errorf("default policy answers %s on %s, want only eth1 (the default)", e.Addr, e.IfName)
		}
	}
	if len(res.Local) != 4 {
		t.Errorf("local entries %v", res.Local)
	}

	in.Capabilities["node-1"] = Capability{Any: true}
	in.Capabilities["node-3"] = Capability{Any: true}
	withOld := Decide(in)
	in.Capabilities = nil
	before := Decide(in)
	if !slices.EqualFunc(withOld.Owners, before.Owners, func(a, b Owner) bool { return a.Addr == b.Addr && a.Node == b.Node }) {
		t.Errorf("owners with old agents %v, without capabilities %v", withOld.Owners, before.Owners)
	}
}

// Property: with capabilities, every owner can serve the address, and the
// local table only names interfaces the local capability allows.
func TestCapabilitiesProperty(t *testing.T) {
	for seed := range 2000 {
		c := randChooser{r: rand.New(rand.NewSource(int64(seed)))}
		in := genInput(c)
		names := []string{"lo", "eth0", "eth1", "bond0"}
		in.Capabilities = Capabilities{}
		for _, n := range in.Nodes {
			switch c.intn(4) {
			case 0: // not ready
			case 1:
				in.Capabilities[n.Name] = Capability{Any: true}
			default:
				usable := subset(c, names[1:])
				in.Capabilities[n.Name] = Capability{Interfaces: usable, Defaults: subset(c, usable)}
			}
		}
		res := Decide(in)
		pols, _ := compile(in.Policies)
		for _, o := range res.Owners {
			if o.Node == "" {
				continue
			}
			ok := false
			for _, p := range pols {
				ok = ok || in.Capabilities.canServe(p, o.Node)
			}
			if !ok {
				t.Fatalf("seed %d: %s owns %s but can serve no policy (%+v)", seed, o.Node, o.Addr, in.Capabilities[o.Node])
			}
		}
		lc, ready := in.Capabilities[in.Local]
		for _, e := range res.Local {
			if !ready || (!lc.Any && !slices.Contains(lc.Interfaces, e.IfName)) {
				t.Fatalf("seed %d: local %s answers %s on %s, capability %+v ready=%v", seed, in.Local, e.Addr, e.IfName, lc, ready)
			}
		}
	}
}

// The incremental State with capabilities equals Decide, event by event,
// capability changes among the others.
func TestStateWithCapabilitiesEqualsDecide(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	for seq := range 100 {
		c := randChooser{r}
		start := genInput(c)
		var names []string
		for _, n := range start.Nodes {
			names = append(names, n.Name)
		}
		m := &model{in: start, services: map[ServiceKey]Service{}}
		m.in.Services = nil
		st := NewState(start.Local)
		st.SetNodes(start.Nodes)
		st.SetPolicies(start.Policies)
		st.SetMembers(start.Members)
		st.SetInterfaces(start.Interfaces)
		prev := Decide(m.input())
		for i := range 60 {
			what, changes := "", []Change(nil)
			if c.intn(4) == 0 {
				caps := Capabilities{}
				for _, n := range append(slices.Clone(names), "ghost") {
					switch c.intn(4) {
					case 0:
					case 1:
						caps[n] = Capability{Any: true}
					default:
						usable := subset(c, []string{"eth0", "eth1", "bond0"})
						caps[n] = Capability{Interfaces: usable, Defaults: subset(c, usable)}
					}
				}
				m.in.Capabilities = caps
				what, changes = fmt.Sprintf("capabilities %v", caps), st.SetCapabilities(caps)
			} else {
				what, changes = step(c, m, st, names)
			}
			want := Decide(m.input())
			if got := st.Result(); !reflect.DeepEqual(got, want) {
				t.Fatalf("sequence %d, event %d (%s): differs from Decide\nwant %+v\ngot  %+v", seq, i, what, want, got)
			}
			checkChanges(t, prev, want, changes)
			prev = want
		}
	}
}
