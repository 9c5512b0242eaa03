package importer

// The round-trip property: for every fixture, the addresses each source pool
// hands out (automatically, and on request) are computed twice: once from
// the SOURCE semantics by an oracle written here from MetalLB's and Cilium's
// documented behaviour (never from the importer's code), once by running
// Mooring's own allocator (internal/lbipam) on the imported pool. The sets
// must be identical.

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/mooringlb/mooring/internal/lbipam"
)

// addrSets are a pool's addresses as its allocator would hand them out.
type addrSets struct {
	auto      []netip.Addr // given to Services that ask for nothing in particular
	requested []netip.Addr // granted when a Service asks for exactly that address
}

func span(first, last netip.Addr) []netip.Addr {
	var out []netip.Addr
	for a := first; ; a = a.Next() {
		out = append(out, a)
		if a == last {
			return out
		}
	}
}

func cidrSpan(s string) []netip.Addr {
	_, n, err := net.ParseCIDR(strings.TrimSpace(s)) // masks host bits, as MetalLB does
	if err != nil {
		panic(err)
	}
	first, _ := netip.AddrFromSlice(n.IP)
	first = first.Unmap()
	ones, bits := n.Mask.Size()
	last := first
	for i := 0; i < bits-ones; i++ {
		b := last.AsSlice()
		b[len(b)-1-i/8] |= 1 << (i % 8)
		last, _ = netip.AddrFromSlice(b)
	}
	return span(first, last)
}

// metallbOracle: a CIDR hands out every address (.0 and .255 too); a-b is
// inclusive; avoidBuggyIPs drops every IPv4 address ending in .0 or .255;
// autoAssign false hands out only on request.
func metallbOracle(addresses []string, autoAssign *bool, avoidBuggy bool) (addrSets, []netip.Addr) {
	var all, universe []netip.Addr
	for _, a := range addresses {
		var s []netip.Addr
		if x, y, ok := strings.Cut(a, "-"); ok {
			s = span(netip.MustParseAddr(strings.TrimSpace(x)), netip.MustParseAddr(strings.TrimSpace(y)))
		} else {
			s = cidrSpan(a)
		}
		universe = append(universe, s...)
		for _, ip := range s {
			if avoidBuggy && ip.Is4() && (ip.As4()[3] == 0 || ip.As4()[3] == 255) {
				continue
			}
			all = append(all, ip)
		}
	}
	out := addrSets{requested: all}
	if autoAssign == nil || *autoAssign {
		out.auto = all
	}
	return out, universe
}

// ciliumOracle: blocks and the older cidrs are one list; a CIDR loses its
// first and last address only with allowFirstLastIPs "No" and only when it
// holds more than two; start without stop is one address; a disabled pool
// hands out nothing, not even on request.
func ciliumOracle(blocks []map[string]string, allowFirstLast string, disabled bool) (addrSets, []netip.Addr) {
	var all, universe []netip.Addr
	for _, b := range blocks {
		var s []netip.Addr
		fromCIDR := b["cidr"] != ""
		switch {
		case fromCIDR:
			p := netip.MustParsePrefix(b["cidr"]).Masked()
			s = cidrSpan(p.String())
		case b["stop"] == "":
			s = []netip.Addr{netip.MustParseAddr(b["start"])}
		default:
			s = span(netip.MustParseAddr(b["start"]), netip.MustParseAddr(b["stop"]))
		}
		universe = append(universe, s...)
		if fromCIDR && allowFirstLast == "No" && len(s) > 2 {
			s = s[1 : len(s)-1]
		}
		all = append(all, s...)
	}
	if disabled {
		return addrSets{}, universe
	}
	return addrSets{auto: all, requested: all}, universe
}

// sourcePools reads every pool of a fixture with the oracle's own minimal
// decoding, keyed by name.
func sourcePools(t *testing.T, path string) map[string]func() (addrSets, []netip.Addr) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]func() (addrSets, []netip.Addr){}
	var docs []map[string]any
	if strings.HasSuffix(path, ".json") {
		var list struct{ Items []map[string]any }
		if err := json.Unmarshal(data, &list); err != nil {
			t.Fatal(err)
		}
		docs = list.Items
	} else {
		for _, d := range strings.Split(string(data), "\n---") {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(d), &m); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			docs = append(docs, m)
		}
	}
	for _, m := range docs {
		kind, _ := m["kind"].(string)
		name, _ := m["metadata"].(map[string]any)["name"].(string)
		spec, _ := m["spec"].(map[string]any)
		switch kind {
		case "IPAddressPool", "AddressPool":
			var s struct {
				Addresses     []string
				AutoAssign    *bool
				AvoidBuggyIPs bool
			}
			remarshal(t, spec, &s)
			out[name] = func() (addrSets, []netip.Addr) { return metallbOracle(s.Addresses, s.AutoAssign, s.AvoidBuggyIPs) }
		case "ConfigMap":
			var cfg struct {
				Pools []struct {
					Name       string
					Addresses  []string
					AutoAssign *bool `json:"auto-assign"`
					Avoid      bool  `json:"avoid-buggy-ips"`
				} `json:"address-pools"`
			}
			if err := yaml.Unmarshal([]byte(m["data"].(map[string]any)["config"].(string)), &cfg); err != nil {
				t.Fatal(err)
			}
			for _, p := range cfg.Pools {
				out[p.Name] = func() (addrSets, []netip.Addr) { return metallbOracle(p.Addresses, p.AutoAssign, p.Avoid) }
			}
		case "CiliumLoadBalancerIPPool":
			var s struct {
				Blocks, CIDRs     []map[string]string
				AllowFirstLastIPs string
				Disabled          bool
			}
			remarshal(t, spec, &s)
			out[name] = func() (addrSets, []netip.Addr) {
				return ciliumOracle(append(s.CIDRs, s.Blocks...), s.AllowFirstLastIPs, s.Disabled)
			}
		}
	}
	return out
}

func remarshal(t *testing.T, in, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

// mooringSets runs Mooring's allocator on one imported pool alone: Services
// asking for nothing until it is exhausted, then one Service per candidate
// address asking for exactly that address.
func mooringSets(t *testing.T, p Pool, universe []netip.Addr) addrSets {
	t.Helper()
	lp := lbipamPool(t, p)
	var out addrSets
	for _, fam := range []lbipam.Family{lbipam.IPv4, lbipam.IPv6} {
		a := lbipam.NewAllocator()
		a.SetPools([]lbipam.Pool{lp})
		for i := 0; i <= len(universe); i++ {
			res := a.Assign(lbipam.Service{Key: lbipam.ServiceKey{Namespace: "auto", Name: "svc" + strconv.Itoa(i)}, Families: []lbipam.Family{fam}})
			if len(res.Addrs) == 0 {
				break
			}
			out.auto = append(out.auto, res.Addrs...)
		}
	}
	candidates := slices.Clone(universe)
	for _, u := range universe { // the neighbours outside every block, too
		if u.IsValid() {
			candidates = append(candidates, u.Prev(), u.Next())
		}
	}
	slices.SortFunc(candidates, netip.Addr.Compare)
	candidates = slices.Compact(candidates)
	a := lbipam.NewAllocator()
	a.SetPools([]lbipam.Pool{lp})
	for _, c := range candidates {
		if !c.IsValid() {
			continue
		}
		key := lbipam.ServiceKey{Namespace: "req", Name: c.String()}
		res := a.Assign(lbipam.Service{Key: key, Families: []lbipam.Family{lbipam.FamilyOf(c)}, Requested: []netip.Addr{c}})
		if slices.Contains(res.Addrs, c) {
			out.requested = append(out.requested, c)
		}
		a.Release(key)
	}
	return out
}

func sortedSet(xs []netip.Addr) []netip.Addr {
	out := slices.Clone(xs)
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

func TestRoundTripAssignableAddresses(t *testing.T) {
	for _, tc := range []struct {
		glob string
		imp  func([]Input) (*Result, error)
	}{
		{"testdata/metallb/*.*", MetalLB},
		{"testdata/metallb/samples/*.yaml", MetalLB},
		{"testdata/cilium/*", Cilium},
	} {
		files, _ := filepath.Glob(tc.glob)
		if len(files) == 0 {
			t.Fatalf("no fixtures match %s", tc.glob)
		}
		for _, f := range files {
			t.Run(f, func(t *testing.T) {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				res, err := tc.imp([]Input{{Name: f, Data: data}})
				if err != nil {
					t.Fatal(err)
				}
				src := sourcePools(t, f)
				if len(src) != len(res.Pools) {
					t.Fatalf("%d source pools, %d imported", len(src), len(res.Pools))
				}
				for _, p := range res.Pools {
					oracle, ok := src[p.Metadata.Name]
					if !ok {
						t.Fatalf("imported pool %q has no source pool", p.Metadata.Name)
					}
					want, universe := oracle()
					got := mooringSets(t, p, universe)
					if !slices.Equal(sortedSet(want.auto), sortedSet(got.auto)) {
						t.Errorf("pool %s: automatic addresses differ\n source: %v\nmooring: %v", p.Metadata.Name, sortedSet(want.auto), sortedSet(got.auto))
					}
					if !slices.Equal(sortedSet(want.requested), sortedSet(got.requested)) {
						t.Errorf("pool %s: addresses granted on request differ\n source: %v\nmooring: %v", p.Metadata.Name, sortedSet(want.requested), sortedSet(got.requested))
					}
				}
			})
		}
	}
}
