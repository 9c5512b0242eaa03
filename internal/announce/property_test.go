package announce

import (
	"fmt"
	"math/rand"
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

// chooser yields small choices from a random source or from fuzz bytes, so
// the permutation test and the fuzz test share one input generator.
type chooser interface{ intn(n int) int }

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int) int { return c.r.Intn(n) }

type byteChooser struct {
	b []byte
	i int
}

func (c *byteChooser) intn(n int) int {
	if c.i >= len(c.b) {
		return 0
	}
	v := int(c.b[c.i])
	c.i++
	return v % n
}

var (
	poolAddrs   = ips("10.213.0.100", "10.213.0.101", "10.213.0.102", "fd00:213::64", "fd00:213::65", "::ffff:10.213.0.100", "127.0.0.1")
	ifaceExprs  = []string{"eth0", "eth.*", "lo", "bond0|eth1", "eth[", "", "(", "e.*0"}
	localIfaces = []Interface{{Name: "lo", Index: 1, Loopback: true}, {Name: "eth0", Index: 2}, {Name: "eth1", Index: 3}, {Name: "bond0", Index: 7}}
)

func pick[T any](c chooser, xs []T) T { return xs[c.intn(len(xs))] }

func subset[T any](c chooser, xs []T) []T {
	var out []T
	for _, x := range xs {
		if c.intn(2) == 1 {
			out = append(out, x)
		}
	}
	return out
}

func genSelector(c chooser) *Selector {
	switch c.intn(5) {
	case 0:
		return nil
	case 1:
		return &Selector{MatchLabels: map[string]string{"zone": pick(c, []string{"a", "b"})}}
	case 2:
		return &Selector{MatchExpressions: []Requirement{{Key: "role", Operator: pick(c, []Operator{OpIn, OpNotIn, OpExists, OpDoesNotExist, "Bogus"}), Values: subset(c, []string{"worker", "cp"})}}}
	case 3:
		return &Selector{MatchLabels: map[string]string{"app": pick(c, []string{"web", "db", "bad value"})}}
	}
	return &Selector{}
}

func genInput(c chooser) Input {
	in := Input{Interfaces: slices.Clone(localIfaces)}
	nn := 1 + c.intn(6)
	var names []string
	for i := 1; i <= nn; i++ {
		n := fmt.Sprintf("node-%d", i)
		names = append(names, n)
		in.Nodes = append(in.Nodes, Node{Name: n, Labels: map[string]string{"role": pick(c, []string{"worker", "cp"}), "zone": pick(c, []string{"a", "b"})}})
	}
	in.Members = subset(c, append(slices.Clone(names), "ghost"))
	in.Local = pick(c, names)
	for i := range 1 + c.intn(3) {
		in.Policies = append(in.Policies, Policy{
			Name: fmt.Sprintf("p%d", i), ServiceSelector: genSelector(c), NodeSelector: genSelector(c),
			Interfaces: subset(c, ifaceExprs), LoadBalancerIPs: c.intn(4) != 0, ExternalIPs: c.intn(2) == 0,
			Ranking: pick(c, []Ranking{RankingMooring, RankingMetalLB}),
		})
	}
	for i := range c.intn(9) {
		in.Services = append(in.Services, Service{
			Key: key(fmt.Sprintf("s%d", i)), Labels: map[string]string{"app": pick(c, []string{"web", "db"})},
			IngressIPs: subset(c, poolAddrs), ExternalIPs: subset(c, poolAddrs[:3]),
			LocalTraffic: c.intn(3) == 0, ReadyNodes: subset(c, append(slices.Clone(names), "gone")),
		})
	}
	return in
}

// shuffled returns a deep copy of in with every order-free slice shuffled
// and some entries duplicated, which must not change the result.
func shuffled(r *rand.Rand, in Input) Input {
	out := in
	sh := func(n int, swap func(i, j int)) { r.Shuffle(n, swap) }
	out.Policies = slices.Clone(in.Policies)
	sh(len(out.Policies), func(i, j int) { out.Policies[i], out.Policies[j] = out.Policies[j], out.Policies[i] })
	out.Nodes = slices.Clone(in.Nodes)
	sh(len(out.Nodes), func(i, j int) { out.Nodes[i], out.Nodes[j] = out.Nodes[j], out.Nodes[i] })
	out.Members = slices.Clone(in.Members)
	if len(out.Members) > 0 {
		out.Members = append(out.Members, out.Members[0])
	}
	sh(len(out.Members), func(i, j int) { out.Members[i], out.Members[j] = out.Members[j], out.Members[i] })
	out.Interfaces = slices.Clone(in.Interfaces)
	sh(len(out.Interfaces), func(i, j int) { out.Interfaces[i], out.Interfaces[j] = out.Interfaces[j], out.Interfaces[i] })
	out.Services = slices.Clone(in.Services)
	for i := range out.Services {
		s := &out.Services[i]
		s.IngressIPs, s.ExternalIPs, s.ReadyNodes = slices.Clone(s.IngressIPs), slices.Clone(s.ExternalIPs), slices.Clone(s.ReadyNodes)
		if len(s.ReadyNodes) > 0 {
			s.ReadyNodes = append(s.ReadyNodes, s.ReadyNodes[0])
		}
		// Under RankingMetalLB the first ingress address is the key
		// (metallbKey): status order is the same for every agent.
		if !slices.ContainsFunc(in.Policies, func(p Policy) bool { return p.Ranking == RankingMetalLB }) {
			sh(len(s.IngressIPs), func(a, b int) { s.IngressIPs[a], s.IngressIPs[b] = s.IngressIPs[b], s.IngressIPs[a] })
		}
		sh(len(s.ExternalIPs), func(a, b int) { s.ExternalIPs[a], s.ExternalIPs[b] = s.ExternalIPs[b], s.ExternalIPs[a] })
		sh(len(s.ReadyNodes), func(a, b int) { s.ReadyNodes[a], s.ReadyNodes[b] = s.ReadyNodes[b], s.ReadyNodes[a] })
	}
	sh(len(out.Services), func(i, j int) { out.Services[i], out.Services[j] = out.Services[j], out.Services[i] })
	return out
}

// The same inputs in any order give the same output: agents build their
// inputs from informer caches whose order differs from node to node.
func TestDecidePermutations(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for i := range 2000 {
		in := genInput(randChooser{r})
		want := Decide(in)
		checkInvariants(t, in, want)
		for range 5 {
			if got := Decide(shuffled(r, in)); !reflect.DeepEqual(got, want) {
				t.Fatalf("input %d: order changed the result\ninput %+v\nwant %+v\ngot  %+v", i, in, want, got)
			}
		}
	}
}

// checkInvariants asserts what must hold for any input.
func checkInvariants(t *testing.T, in Input, r Result) {
	t.Helper()
	live := map[string]bool{}
	for _, m := range in.Members {
		live[m] = true
	}
	known := map[string]bool{}
	for _, n := range in.Nodes {
		known[n.Name] = true
	}
	for i, o := range r.Owners {
		if i > 0 && !r.Owners[i-1].Addr.Less(o.Addr) {
			t.Fatalf("owners not strictly sorted: %v", r.Owners)
		}
		if o.Node != "" && (!live[o.Node] || !known[o.Node]) {
			t.Fatalf("owner %s of %s is not a live known node", o.Node, o.Addr)
		}
		if (o.Node == "") != (o.Eligible == 0) {
			t.Fatalf("owner %+v inconsistent with its eligible count", o)
		}
	}
	for _, e := range r.Local {
		if n, ok := r.OwnerOf(e.Addr); !ok || n != in.Local {
			t.Fatalf("local entry %v for an address owned by %q", e, n)
		}
	}
	// Rendezvous hashing: a member leaving moves only its own addresses.
	for _, gone := range in.Members {
		in2 := in
		in2.Members = slices.DeleteFunc(slices.Clone(in.Members), func(m string) bool { return m == gone })
		r2 := Decide(in2)
		for _, mv := range Moves(r.Owners, r2.Owners) {
			if mv.From != gone || mv.To == gone {
				t.Fatalf("removing %s moved %s from %q to %q", gone, mv.Addr, mv.From, mv.To)
			}
		}
	}
}

func FuzzDecide(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 1, 0, 2, 1, 1, 0, 1, 4, 2, 2, 1, 0, 3, 1, 1, 1, 0, 1, 6, 1, 1, 1, 0, 1})
	f.Add([]byte("a fairly long seed that touches every branch of the generator at least once, hopefully"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := genInput(&byteChooser{b: data})
		r := Decide(in)
		checkInvariants(t, in, r)
		if got := Decide(shuffled(rand.New(rand.NewSource(int64(len(data)))), in)); !reflect.DeepEqual(got, r) {
			t.Fatalf("order changed the result")
		}
	})
}

// Addresses spread evenly, and a node's death moves only its addresses,
// again evenly over the survivors.
func TestSpreadAndMinimalMovement(t *testing.T) {
	const perFamily = 1000
	names := []string{"node-1", "node-2", "node-3", "node-4", "node-5"}
	in := Input{Policies: []Policy{{Name: "all", LoadBalancerIPs: true}}, Nodes: nodes(names...), Members: names}
	base4, base6 := ip("10.96.0.0"), ip("fd00:96::")
	for i := range perFamily {
		base4, base6 = base4.Next(), base6.Next()
		in.Services = append(in.Services, Service{Key: key(fmt.Sprintf("s%d", i)), IngressIPs: []netip.Addr{base4, base6}})
	}
	r := Decide(in)
	for _, fam := range []bool{true, false} {
		count := map[string]int{}
		for _, o := range r.Owners {
			if o.Addr.Is4() == fam {
				count[o.Node]++
			}
		}
		checkEven(t, count, perFamily, len(names), 0.15)
	}

	in.Members = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == "node-3" })
	r2 := Decide(in)
	moved := map[string]int{}
	mvs := Moves(r.Owners, r2.Owners)
	for _, mv := range mvs {
		if mv.From != "node-3" {
			t.Fatalf("%s moved from %s, which is alive", mv.Addr, mv.From)
		}
		moved[mv.To]++
	}
	lost := 0
	for _, o := range r.Owners {
		if o.Node == "node-3" {
			lost++
		}
	}
	if len(mvs) != lost {
		t.Fatalf("%d addresses moved, node-3 owned %d", len(mvs), lost)
	}
	checkEven(t, moved, lost, len(names)-1, 0.30)
	t.Logf("node-3 owned %d of %d addresses; after its death they went %v", lost, 2*perFamily, moved)
}

func checkEven(t *testing.T, count map[string]int, total, nodes int, tolerance float64) {
	t.Helper()
	mean := float64(total) / float64(nodes)
	if len(count) != nodes {
		t.Fatalf("addresses on %d nodes, want %d: %v", len(count), nodes, count)
	}
	for n, c := range count {
		if d := (float64(c) - mean) / mean; d > tolerance || d < -tolerance {
			t.Fatalf("%s owns %d addresses, mean %.0f: off by %.0f%% (> %.0f%%): %v", n, c, mean, 100*d, 100*tolerance, count)
		}
	}
	t.Logf("spread of %d addresses over %d nodes: %v (mean %.0f)", total, nodes, count, mean)
}

// BenchmarkDecide measures one recompute at a large cluster's scale: the
// agent runs it on every relevant change.
func BenchmarkDecide(b *testing.B) {
	for _, sz := range []struct{ services, nodes int }{{1000, 5}, {10000, 100}} {
		b.Run(fmt.Sprintf("services=%d/nodes=%d", sz.services, sz.nodes), func(b *testing.B) {
			var names []string
			for i := range sz.nodes {
				names = append(names, fmt.Sprintf("node-%d", i))
			}
			in := Input{Policies: []Policy{{Name: "all", LoadBalancerIPs: true}}, Nodes: nodes(names...), Members: names, Local: names[0], Interfaces: localIfaces}
			a := ip("10.96.0.0")
			for i := range sz.services {
				a = a.Next()
				in.Services = append(in.Services, Service{Key: key(fmt.Sprintf("s%d", i)), IngressIPs: []netip.Addr{a}})
			}
			b.ResetTimer()
			for b.Loop() {
				Decide(in)
			}
		})
	}
}
