package announce

import (
	"fmt"
	"maps"
	"math/rand"
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

// model is the test's own copy of the input, changed event by event
// beside a State; Decide over it is the oracle.
type model struct {
	in       Input
	services map[ServiceKey]Service
}

func (m *model) input() Input {
	in := m.in
	in.Services = nil
	for _, k := range slices.SortedFunc(maps.Keys(m.services), compareKeys) {
		in.Services = append(in.Services, m.services[k])
	}
	return in
}

// step applies one random event to m and st and returns st's changes.
func step(c chooser, m *model, st *State, names []string) (string, []Change) {
	base := genInput(c) // a fresh random input to draw values from
	switch c.intn(10) {
	case 0, 1, 2:
		if len(base.Services) == 0 {
			return "no-op", nil
		}
		svc := pick(c, base.Services)
		m.services[svc.Key] = svc
		return "service " + svc.Key.String(), st.SetService(&svc)
	case 3:
		k := key(fmt.Sprintf("s%d", c.intn(9)))
		delete(m.services, k)
		return "delete " + k.String(), st.DeleteService(k)
	case 4, 5:
		m.in.Members = subset(c, append(slices.Clone(names), "ghost"))
		return fmt.Sprintf("members %v", m.in.Members), st.SetMembers(m.in.Members)
	case 6:
		var ns []Node
		for _, n := range names {
			if c.intn(5) != 0 {
				ns = append(ns, Node{Name: n, Labels: map[string]string{"role": pick(c, []string{"worker", "cp"}), "zone": pick(c, []string{"a", "b"})}})
			}
		}
		m.in.Nodes = ns
		return fmt.Sprintf("nodes %v", ns), st.SetNodes(ns)
	case 7:
		// The same nodes, only relabelled where a label is not selected on.
		ns := slices.Clone(m.in.Nodes)
		for i := range ns {
			ns[i].Labels = maps.Clone(ns[i].Labels)
			ns[i].Labels["unrelated"] = fmt.Sprint(c.intn(3))
		}
		m.in.Nodes = ns
		return "relabel", st.SetNodes(ns)
	case 8:
		m.in.Policies = base.Policies
		return fmt.Sprintf("policies %+v", base.Policies), st.SetPolicies(base.Policies)
	default:
		m.in.Interfaces = subset(c, localIfaces)
		return fmt.Sprintf("interfaces %v", m.in.Interfaces), st.SetInterfaces(m.in.Interfaces)
	}
}

// checkChanges asserts every address whose owner, Services or local entries
// differ between before and after is reported, with the right owners.
func checkChanges(t *testing.T, before, after Result, got []Change) {
	t.Helper()
	type view struct {
		owner    string
		services []ServiceKey
		local    []Entry
	}
	views := func(r Result) map[netip.Addr]view {
		out := map[netip.Addr]view{}
		for _, o := range r.Owners {
			out[o.Addr] = view{owner: o.Node, services: o.Services}
		}
		for _, e := range r.Local {
			v := out[e.Addr]
			v.local = append(v.local, e)
			out[e.Addr] = v
		}
		return out
	}
	b, a := views(before), views(after)
	reported := map[netip.Addr]Change{}
	for _, ch := range got {
		if _, dup := reported[ch.Addr]; dup {
			t.Fatalf("%s reported twice: %v", ch.Addr, got)
		}
		reported[ch.Addr] = ch
	}
	for _, addr := range slices.Collect(maps.Keys(b)) {
		if _, ok := a[addr]; !ok {
			a[addr] = view{}
		}
	}
	for addr, av := range a {
		bv := b[addr]
		ch, ok := reported[addr]
		if !reflect.DeepEqual(av, bv) && !ok {
			t.Fatalf("%s changed (%+v -> %+v) but was not reported: %v", addr, bv, av, got)
		}
		if ok && (ch.From != bv.owner || ch.To != av.owner) {
			t.Fatalf("%s reported %q -> %q, oracle %q -> %q", addr, ch.From, ch.To, bv.owner, av.owner)
		}
	}
}

// The incremental decision equals the full recompute after every event of
// random sequences, and reports every address whose outcome changed.
func TestStateEqualsDecide(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for seq := range 150 {
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
		if got := st.Result(); !reflect.DeepEqual(got, prev) {
			t.Fatalf("sequence %d: initial state differs\nwant %+v\ngot  %+v", seq, prev, got)
		}
		for i := range 60 {
			what, changes := step(c, m, st, names)
			want := Decide(m.input())
			if got := st.Result(); !reflect.DeepEqual(got, want) {
				t.Fatalf("sequence %d, event %d (%s): differs from Decide\ninput %+v\nwant %+v\ngot  %+v", seq, i, what, m.input(), want, got)
			}
			checkChanges(t, prev, want, changes)
			if !reflect.DeepEqual(st.Input(), m.input()) && !sameInput(st.Input(), m.input()) {
				t.Fatalf("sequence %d, event %d: Input() differs", seq, i)
			}
			prev = want
		}
	}
}

// sameInput compares inputs as sets where Decide treats them as sets.
func sameInput(a, b Input) bool {
	return reflect.DeepEqual(Decide(a), Decide(b))
}

// A Service event re-decides that Service's addresses; a member leaving
// moves only what it owned.
func TestStateMemberLeaveMovesOnlyItsAddresses(t *testing.T) {
	in := lab("node-1")
	st := NewState("node-1")
	st.SetNodes(in.Nodes)
	st.SetPolicies(in.Policies)
	st.SetMembers(in.Members)
	st.SetInterfaces(in.Interfaces)
	a := ip("10.0.0.0")
	for i := range 300 {
		a = a.Next()
		if ch := st.SetService(&Service{Key: key(fmt.Sprintf("s%d", i)), IngressIPs: []netip.Addr{a}}); len(ch) != 1 || ch[0].From != "" || ch[0].To == "" {
			t.Fatalf("new Service %d: changes %v, want one new owner", i, ch)
		}
	}
	owned := 0
	for _, o := range st.Result().Owners {
		if o.Node == "node-3" {
			owned++
		}
	}
	ch := st.SetMembers([]string{"node-1", "node-2"})
	if len(ch) != owned {
		t.Fatalf("node-3 owned %d addresses, %d changed", owned, len(ch))
	}
	for _, c := range ch {
		if c.From != "node-3" || c.To == "node-3" || c.To == "" {
			t.Fatalf("unexpected move %+v", c)
		}
	}
	if ch := st.SetService(&Service{Key: key("s0"), IngressIPs: []netip.Addr{ip("10.0.0.1")}, Labels: map[string]string{"x": "y"}}); len(ch) != 0 {
		t.Fatalf("a label change no policy reads changed %v", ch)
	}
}

// benchState builds a State of services Services (one address each) over
// nodes live nodes.
func benchState(b *testing.B, services, nodeCount int) (*State, []string) {
	b.Helper()
	var names []string
	for i := range nodeCount {
		names = append(names, fmt.Sprintf("node-%d", i))
	}
	st := NewState(names[0])
	st.SetNodes(nodes(names...))
	st.SetPolicies([]Policy{{Name: "all", LoadBalancerIPs: true}})
	st.SetMembers(names)
	st.SetInterfaces(localIfaces)
	a := ip("10.96.0.0")
	for i := range services {
		a = a.Next()
		st.SetService(&Service{Key: key(fmt.Sprintf("s%d", i)), IngressIPs: []netip.Addr{a}})
	}
	return st, names
}

// BenchmarkStateServiceEvent is one Service event (its address changes) in
// a cluster of 10,000 Services on 100 nodes.
func BenchmarkStateServiceEvent(b *testing.B) {
	st, _ := benchState(b, 10000, 100)
	addrs := []netip.Addr{ip("10.200.0.1"), ip("10.200.0.2")}
	i := 0
	b.ResetTimer()
	for b.Loop() {
		i++
		st.SetService(&Service{Key: key("s42"), IngressIPs: addrs[i%2 : i%2+1]})
	}
}

// BenchmarkStateMemberLeave is one member leaving (and, untimed, coming
// back) in a cluster of 10,000 Services on 100 nodes.
func BenchmarkStateMemberLeave(b *testing.B) {
	st, names := benchState(b, 10000, 100)
	without := names[:len(names)-1]
	b.ResetTimer()
	for b.Loop() {
		st.SetMembers(without)
		b.StopTimer()
		st.SetMembers(names)
		b.StartTimer()
	}
}

// OwnerInterfaces names, for the local node's addresses, exactly the
// interfaces Decide puts in Result.Local.
func TestOwnerInterfacesMatchDecide(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for i := range 2000 {
		in := genInput(randChooser{r})
		res := Decide(in)
		got := OwnerInterfaces(in, res.Owners, map[string][]Interface{in.Local: in.Interfaces})
		want := map[netip.Addr][]string{}
		for _, e := range res.Local {
			want[e.Addr] = append(want[e.Addr], e.IfName)
		}
		for a, names := range got {
			if n, _ := res.OwnerOf(a); n != in.Local {
				t.Fatalf("input %d: interfaces %v for %s owned by %q, not the local node", i, names, a, n)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("input %d: got %v, want %v\ninput %+v", i, got, want, in)
		}
	}
}

// BenchmarkStateResult materialises the whole decision (what the agent
// publishes to its status writer and safety checks) at 10,000 Services.
func BenchmarkStateResult(b *testing.B) {
	st, _ := benchState(b, 10000, 3)
	b.ResetTimer()
	for b.Loop() {
		st.Result()
	}
}

// TestStateKeepsTheService: the state holds the caller's *Service (the
// agent shares it with the BGP backend: one struct per Service, not one
// per consumer) and a rebuild keeps it.
func TestStateKeepsTheService(t *testing.T) {
	st := NewState("node-1")
	st.SetPolicies([]Policy{{Name: "all"}})
	svc := &Service{Key: key("web"), IngressIPs: []netip.Addr{ip("10.0.0.1")}}
	st.SetService(svc)
	if st.services[svc.Key].svc != svc {
		t.Fatal("the state copied the Service")
	}
	st.SetPolicies([]Policy{{Name: "other"}}) // a rebuild of every claim
	if st.services[svc.Key].svc != svc {
		t.Fatal("a rebuild replaced the Service")
	}
	if in := st.Input(); len(in.Services) != 1 || in.Services[0].Key != svc.Key {
		t.Fatalf("Input: %v", in.Services)
	}
}
