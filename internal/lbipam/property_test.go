package lbipam

import (
	"flag"
	"fmt"
	"math/rand"
	"net/netip"
	"slices"
	"testing"
	"time"
)

var propSeed = flag.Int64("lbipam.seed", 0, "seed for TestRandomOperations (0: time-based)")

// The property test works in a tiny address space (64 IPv4, 64 IPv6
// addresses) so that it can re-check every reason by enumeration. The IPv4
// space straddles 10.0.0.255 and 10.0.1.0 so avoidBuggyIPs has work to do.
var (
	base4 = netip.MustParseAddr("10.0.0.224")
	base6 = netip.MustParseAddr("2001:db8::")
)

func nth(f Family, i int) netip.Addr {
	a := base4
	if f == IPv6 {
		a = base6
	}
	for ; i > 0; i-- {
		a = a.Next()
	}
	return a
}

type world struct {
	t     *testing.T
	rnd   *rand.Rand
	a     *Allocator
	pools map[string]Pool
	svcs  map[ServiceKey]Service // input without Held
	held  map[ServiceKey][]netip.Addr
	step  int
	seen  map[Reason]int // how often each reason was produced (and re-checked)
}

func TestRandomOperations(t *testing.T) {
	seed := *propSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (rerun with -lbipam.seed=%d)", seed, seed)
	w := &world{t: t, rnd: rand.New(rand.NewSource(seed)), a: NewAllocator(),
		pools: map[string]Pool{}, svcs: map[ServiceKey]Service{}, held: map[ServiceKey][]netip.Addr{}, seen: map[Reason]int{}}
	steps := 20000
	if testing.Short() {
		steps = 500
	}
	for w.step = 0; w.step < steps; w.step++ {
		switch n := w.rnd.Intn(100); {
		case n < 12:
			w.editPool()
		case n < 15:
			w.deletePool()
		case n < 55:
			w.editService()
		case n < 62:
			w.deleteService()
		case n < 97:
			w.reconcile()
		default:
			w.restart()
		}
		w.checkIndex()
		if t.Failed() {
			t.Fatalf("failed at step %d, seed %d", w.step, seed)
		}
	}
	t.Logf("reasons produced and re-checked: %v", w.seen)
	if !testing.Short() && len(w.seen) < 12 {
		t.Errorf("the random walk produced only %d kinds of reason: %v", len(w.seen), w.seen)
	}
}

func (w *world) randBlock(f Family) Block {
	if w.rnd.Intn(2) == 0 {
		bits := 26 + w.rnd.Intn(7) // /26 .. /32
		if f == IPv6 {
			bits += 96
		}
		p, _ := nth(f, w.rnd.Intn(64)).Prefix(bits)
		b, err := ParseCIDRBlock(p.String())
		if err != nil {
			w.t.Fatal(err)
		}
		return b
	}
	i := w.rnd.Intn(64)
	j := min(63, i+w.rnd.Intn(8))
	return Block{First: nth(f, i), Last: nth(f, j)}
}

func (w *world) editPool() {
	p := Pool{Name: fmt.Sprintf("p%d", w.rnd.Intn(6)), Created: epoch.Add(time.Duration(w.rnd.Intn(5)) * time.Minute)}
	if old, ok := w.pools[p.Name]; ok {
		p.Created = old.Created // edits keep the creation time
	}
	if n := w.rnd.Intn(4); n < 3 {
		p.Priority = ptr(int32(n))
	}
	p.Disabled = w.rnd.Intn(6) == 0
	p.AllowFirstLastIPs = w.rnd.Intn(3) == 0
	p.ManualOnly = w.rnd.Intn(5) == 0
	p.AvoidBuggyIPs = w.rnd.Intn(3) == 0
	if w.rnd.Intn(5) == 0 {
		p.Namespaces = []string{fmt.Sprintf("ns%d", w.rnd.Intn(2))}
	}
	if w.rnd.Intn(3) == 0 {
		p.ServiceSelector = labelSel{"team": []string{"a", "b"}[w.rnd.Intn(2)]}
	}
	for n := 1 + w.rnd.Intn(3); n > 0; n-- {
		p.Blocks = append(p.Blocks, w.randBlock([]Family{IPv4, IPv6}[w.rnd.Intn(2)]))
	}
	w.pools[p.Name] = p
	w.setPools()
}

func (w *world) deletePool() {
	delete(w.pools, fmt.Sprintf("p%d", w.rnd.Intn(6)))
	w.setPools()
}

func (w *world) setPools() {
	var ps []Pool
	for _, p := range w.pools {
		ps = append(ps, p)
	}
	w.rnd.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	w.a.SetPools(ps)
}

func (w *world) randKey() ServiceKey {
	return ServiceKey{fmt.Sprintf("ns%d", w.rnd.Intn(2)), fmt.Sprintf("s%d", w.rnd.Intn(12))}
}

func (w *world) editService() {
	s := Service{Key: w.randKey(), RequireAllFamilies: w.rnd.Intn(2) == 0}
	s.Families = [][]Family{{IPv4}, {IPv4}, {IPv6}, {IPv4, IPv6}, {IPv6, IPv4}}[w.rnd.Intn(5)]
	s.Labels = map[string]string{"team": []string{"a", "b"}[w.rnd.Intn(2)]}
	if w.rnd.Intn(4) == 0 {
		s.Requested = append(s.Requested, nth(s.Families[0], w.rnd.Intn(64)))
		if w.rnd.Intn(6) == 0 {
			s.Requested = append(s.Requested, nth([]Family{IPv4, IPv6}[w.rnd.Intn(2)], w.rnd.Intn(64)))
		}
	}
	if w.rnd.Intn(5) == 0 {
		s.Pools = []string{fmt.Sprintf("p%d", w.rnd.Intn(8))}
	}
	if w.rnd.Intn(2) == 0 {
		s.SharingKey = []string{"k1", "k2"}[w.rnd.Intn(2)]
		s.SharingNamespaces = [][]string{nil, {"*"}, {"ns0"}, {"ns1"}}[w.rnd.Intn(4)]
		if w.rnd.Intn(4) == 0 {
			s.SharingBackend = "app=x"
		}
		for _, port := range []int32{80, 443, 53} {
			if w.rnd.Intn(2) == 0 {
				s.Ports = append(s.Ports, Port{"TCP", port})
			}
		}
	}
	w.svcs[s.Key] = s
	w.assign(s.Key)
}

func (w *world) deleteService() {
	k := w.randKey()
	delete(w.svcs, k)
	delete(w.held, k)
	w.a.Release(k)
}

// reconcile re-assigns a Service whose input did not change.
func (w *world) reconcile() {
	keys := w.liveKeys()
	if len(keys) > 0 {
		w.assign(keys[w.rnd.Intn(len(keys))])
	}
}

func (w *world) liveKeys() []ServiceKey {
	var keys []ServiceKey
	for k := range w.svcs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

// restart: a new Allocator learns the pools, imports every Service's held
// addresses, then assigns every Service.
func (w *world) restart() {
	w.a = NewAllocator()
	w.setPools()
	keys := w.liveKeys()
	w.rnd.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	for _, k := range keys {
		in := w.svcs[k]
		in.Held = w.held[k]
		w.a.Import(in)
	}
	for _, k := range keys {
		w.assign(k)
	}
}

func (w *world) assign(k ServiceKey) {
	in := w.svcs[k]
	in.Held = slices.Clone(w.held[k])
	res := w.a.Assign(in)
	for _, p := range append(slices.Clone(res.Pending), res.Warnings...) {
		w.seen[p.Reason]++
	}
	w.checkKept(in, res)
	w.checkGranted(in, res)
	w.checkPending(in, res)
	w.held[k] = res.Addrs
}

// checkKept: a held address survives unless the Service's own input says
// otherwise (family dropped, or another address of it requested AND taken).
func (w *world) checkKept(in Service, res Result) {
	for _, f := range []Family{IPv4, IPv6} {
		before, after := ofFamily(in.Held, f), ofFamily(res.Addrs, f)
		reqs := slices.Compact(ofFamily(in.Requested, f))
		switch {
		case !slices.Contains(in.Families, f):
			if len(after) > 0 {
				w.t.Errorf("%s holds %v of a family it does not ask for", in.Key, after)
			}
		case len(before) == 0:
		case len(reqs) == 1 && slices.Equal(after, reqs):
		case !slices.Equal(before, after):
			w.t.Errorf("%s: held %v changed to %v (requested %v)", in.Key, before, after, reqs)
		}
	}
}

// checkGranted re-derives, by its own code (oracle_test.go), that every
// newly granted address is one the rules allow: see grantProblem.
func (w *world) checkGranted(in Service, res Result) {
	for _, addr := range res.Addrs {
		if slices.Contains(in.Held, addr) {
			continue
		}
		if why := w.grantProblem(in, addr); why != "" {
			w.t.Errorf("%s was given %s wrongly: %s\n%+v", in.Key, addr, why, in)
		}
	}
}

// mayShare is the sharing rule, written independently of compatible().
func mayShare(x, y Service) bool {
	if x.SharingKey == "" || x.SharingKey != y.SharingKey || x.SharingBackend != y.SharingBackend {
		return false
	}
	allows := func(s Service, ns string) bool {
		for _, n := range s.SharingNamespaces {
			if n == "*" || n == ns {
				return true
			}
		}
		return false
	}
	if x.Key.Namespace != y.Key.Namespace && !(allows(x, y.Key.Namespace) && allows(y, x.Key.Namespace)) {
		return false
	}
	for _, p := range x.Ports {
		if slices.Contains(y.Ports, p) {
			return false
		}
	}
	return true
}

// checkIndex: the allocator's holder index equals the model, so no other
// Service's address was changed or dropped behind its back.
func (w *world) checkIndex() {
	want := map[netip.Addr][]ServiceKey{}
	for k, held := range w.held {
		for _, addr := range held {
			want[addr] = append(want[addr], k)
		}
	}
	for addr, keys := range want {
		slices.SortFunc(keys, compareKeys)
		if got := w.a.Holders(addr); !slices.Equal(got, keys) {
			w.t.Errorf("holders of %s = %v, model says %v", addr, got, keys)
		}
	}
	if n := w.a.used.Len(); n != len(want) {
		w.t.Errorf("allocator tracks %d used addresses, model %d", n, len(want))
	}
}
