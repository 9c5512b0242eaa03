package importer

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func importFile(t *testing.T, imp func([]Input) (*Result, error), path string) *Result {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := imp([]Input{{Name: path, Data: data}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func findEntry(r *Report, o Outcome, object, field string) *Entry {
	for i, e := range r.Entries {
		if e.Outcome == o && e.Object == object && e.Field == field {
			return &r.Entries[i]
		}
	}
	return nil
}

// Every field the fixtures set that Mooring cannot express is reported as
// not mapped, by file, object and field; nothing is silently dropped.
func TestReportNamesEveryUnmappedField(t *testing.T) {
	res := importFile(t, MetalLB, "testdata/metallb/ipaddresspools.yaml")
	for _, w := range []struct{ object, field string }{
		{"metallb-system/v6", "spec.futureField"},
		{"metallb-system/edge-only", "spec.preferredNodeSelectors"},
	} {
		e := findEntry(&res.Report, NotMapped, w.object, w.field)
		if e == nil {
			t.Errorf("no not-mapped entry for %s %s", w.object, w.field)
			continue
		}
		if e.File != "testdata/metallb/ipaddresspools.yaml" || e.Detail == "" {
			t.Errorf("entry %+v: want the file and a reason", *e)
		}
	}
	if e := findEntry(&res.Report, Changed, "metallb-system/edge-only", "spec.ipAddressPools, spec.ipAddressPoolSelectors"); e == nil ||
		!strings.Contains(e.Detail, `MetalLB announces only pools "web", "edge" of the imported 4 (by name: "edge"; by labels: tier=front)`) {
		t.Errorf("restriction of edge-only to pools not reported as a change of meaning: %+v", e)
	}
	legacy := importFile(t, MetalLB, "testdata/metallb/legacy-configmap.yaml")
	for _, f := range []string{"data.config: peers[0]", "data.config: bgp-communities.no-advertise", "data.config: bfd-profiles[0]",
		"data.config: address-pools[2].protocol", "data.config: address-pools[2].bgp-advertisements"} {
		found := false
		for _, e := range legacy.Report.Entries {
			found = found || (e.Outcome == NotMapped && e.Field == f)
		}
		if !found {
			t.Errorf("legacy ConfigMap: %s not reported as not mapped", f)
		}
	}
	cil := importFile(t, Cilium, "testdata/cilium/l2policy.yaml")
	if findEntry(&cil.Report, NotMapped, "bgp", "") == nil {
		t.Error("CiliumBGPClusterConfig not reported")
	}
}

func TestMetalLBMapping(t *testing.T) {
	res := importFile(t, MetalLB, "testdata/metallb/ipaddresspools.yaml")
	pools := map[string]Pool{}
	for _, p := range res.Pools {
		pools[p.Metadata.Name] = p
	}
	// edge: namespaces AND (either of two service selectors): two terms.
	edge := pools["edge"].Spec
	if edge.Priority == nil || *edge.Priority != 10 || !edge.AvoidBuggyIPs || !edge.AllowFirstLastIPs || len(edge.SelectorTerms) != 2 ||
		strings.Join(edge.SelectorTerms[1].Namespaces, ",") != "team-a,team-b" || edge.SelectorTerms[0].ServiceSelector.MatchLabels["exposure"] != "edge" ||
		edge.SelectorTerms[1].ServiceSelector.MatchExpressions[0].Key != "app" {
		t.Errorf("edge: %+v", edge)
	}
	if r := pools["reserved"].Spec; r.AutoAssign == nil || *r.AutoAssign {
		t.Errorf("reserved: autoAssign not false: %+v", r)
	}
	if v6 := pools["v6"].Spec; v6.Blocks[1].CIDR != "10.30.0.0/29" || v6.NamespaceSelector.MatchLabels["lb"] != "v6" {
		t.Errorf("v6: %+v", v6)
	}
	// edge-only: 1 serviceSelector x 2 nodeSelectors = 2 policies.
	var names []string
	for _, p := range res.Policies {
		names = append(names, p.Metadata.Name)
		if strings.HasPrefix(p.Metadata.Name, "edge-only") && strings.Join(p.Spec.Interfaces, ",") != `eth0,bond0\.100` {
			t.Errorf("%s interfaces %v", p.Metadata.Name, p.Spec.Interfaces)
		}
	}
	if strings.Join(names, ",") != "everything,edge-only-1,edge-only-2" {
		t.Errorf("policies %v", names)
	}
}

func TestCiliumMapping(t *testing.T) {
	res := importFile(t, Cilium, "testdata/cilium/pools.yaml")
	pools := map[string]Pool{}
	for _, p := range res.Pools {
		pools[p.Metadata.Name] = p
	}
	if p := pools["closed-ends"].Spec; p.AllowFirstLastIPs || p.ServiceSelector.MatchLabels["mooring.dev/service-namespace"] != "gateway" {
		t.Errorf("closed-ends: %+v", p)
	}
	if p := pools["default-ends"].Spec; !p.AllowFirstLastIPs || p.ServiceSelector.MatchExpressions[0].Key != "mooring.dev/service-name" {
		t.Errorf("default-ends: %+v", p)
	}
	if p := pools["open-ends"].Spec; p.Blocks[2].Start != "10.42.9.1" || p.Blocks[2].Stop != "10.42.9.1" {
		t.Errorf("open-ends: %+v", p)
	}
	pol := importFile(t, Cilium, "testdata/cilium/l2policy.yaml").Policies
	if len(pol) != 2 || strings.Join(pol[0].Spec.Interfaces, " ") != ".*(?:^eth[0-9]+).* .*(?:enp).*" || !pol[0].Spec.ExternalIPs ||
		*pol[1].Spec.LoadBalancerIPs {
		t.Errorf("policies: %+v", pol)
	}
}

// Malformed input fails with the file, the object and the field.
func TestMalformedInputNamesFileObjectField(t *testing.T) {
	for _, tc := range []struct {
		name string
		imp  func([]Input) (*Result, error)
		doc  string
		want []string
	}{
		{"bad range", MetalLB, "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p, namespace: m}\nspec:\n  addresses: [10.0.0.9-10.0.0.1]\n",
			[]string{"in.yaml", `"m/p"`, "spec.addresses[0]", "after"}},
		{"not a cidr", MetalLB, "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p}\nspec:\n  addresses: [10.0.0.1]\n",
			[]string{"in.yaml", `"p"`, "spec.addresses[0]"}},
		{"addresses type", MetalLB, "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p}\nspec:\n  addresses: 10.0.0.0/24\n",
			[]string{"in.yaml", `"p"`, "spec.addresses"}},
		{"no addresses", MetalLB, "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p}\nspec: {}\n",
			[]string{"spec.addresses", "at least one"}},
		{"legacy protocol", MetalLB, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config, namespace: metallb-system}\ndata:\n  config: |\n    address-pools:\n    - name: a\n      protocol: ospf\n      addresses: [10.0.0.0/30]\n",
			[]string{"in.yaml", "address-pools[0].protocol", "ospf"}},
		{"legacy yaml", MetalLB, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config}\ndata:\n  config: \"address-pools: [\"\n",
			[]string{"in.yaml", `"config"`, "data.config"}},
		{"cilium both", Cilium, "apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata: {name: c}\nspec:\n  blocks:\n  - {cidr: 10.0.0.0/30, start: 10.0.0.1}\n",
			[]string{"in.yaml", `"c"`, "spec.blocks[0]"}},
		{"cilium flag", Cilium, "apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nmetadata: {name: c}\nspec:\n  allowFirstLastIPs: maybe\n  blocks: [{cidr: 10.0.0.0/30}]\n",
			[]string{`"c"`, "spec.allowFirstLastIPs"}},
		{"cilium regex", Cilium, "apiVersion: cilium.io/v2alpha1\nkind: CiliumL2AnnouncementPolicy\nmetadata: {name: l}\nspec:\n  interfaces: ['eth[']\n",
			[]string{`"l"`, "spec.interfaces[0]"}},
		{"no kind", Cilium, "metadata: {name: x}\n", []string{"in.yaml", "kind"}},
		{"no name", Cilium, "apiVersion: cilium.io/v2\nkind: CiliumLoadBalancerIPPool\nspec: {}\n", []string{"in.yaml", "metadata.name"}},
		{"second doc", MetalLB, "apiVersion: v1\nkind: List\nitems: []\n---\n: : :\n", []string{"in.yaml", "document 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.imp([]Input{{Name: "in.yaml", Data: []byte(tc.doc)}})
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want an *InputError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func FuzzMetalLB(f *testing.F) {
	for _, p := range []string{"testdata/metallb/ipaddresspools.yaml", "testdata/metallb/legacy-configmap.yaml", "testdata/metallb/list.json"} {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := MetalLB([]Input{{Name: "fuzz", Data: data}})
		checkFuzzResult(t, res, err)
	})
}

func FuzzCilium(f *testing.F) {
	for _, p := range []string{"testdata/cilium/pools.yaml", "testdata/cilium/l2policy.yaml"} {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := Cilium([]Input{{Name: "fuzz", Data: data}})
		checkFuzzResult(t, res, err)
	})
}

// checkFuzzResult: either an error naming the input, or pools Mooring's
// own parsers accept.
func checkFuzzResult(t *testing.T, res *Result, err error) {
	if err != nil {
		if !strings.Contains(err.Error(), "fuzz") {
			t.Fatalf("error does not name the file: %v", err)
		}
		return
	}
	for _, p := range res.Pools {
		if len(p.Spec.Blocks) == 0 {
			t.Fatalf("pool %s imported with no blocks", p.Metadata.Name)
		}
		lbipamPool(t, p)
	}
}

func FuzzMetalLBAddress(f *testing.F) {
	for _, s := range []string{"192.0.2.0/24", "10.0.0.1-10.0.0.9", "fd00::/120", "::ffff:10.0.0.0/120", "1.2.3.4 - 1.2.3.5", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, _, err := metallbAddress(s)
		if err != nil {
			return
		}
		p := Pool{Metadata: Meta{Name: "f"}, Spec: PoolSpec{Blocks: []Block{b}}}
		lbipamPool(t, p)
	})
}

// Every policy imported from MetalLB, of any generation, ranks nodes as
// MetalLB's speakers do (so the hand-over moves no address) and the report
// says so; a Cilium import keeps Mooring's ranking.
func TestMetalLBImportKeepsMetalLBsNode(t *testing.T) {
	for _, f := range []string{"testdata/metallb/ipaddresspools.yaml", "testdata/metallb/legacy-configmap.yaml"} {
		res := importFile(t, MetalLB, f)
		if len(res.Policies) == 0 {
			t.Fatalf("%s: no policies", f)
		}
		for _, p := range res.Policies {
			if p.Spec.Ranking != "MetalLB" {
				t.Errorf("%s: policy %s has ranking %q, want MetalLB", f, p.Metadata.Name, p.Spec.Ranking)
			}
		}
		found := false
		for _, e := range res.Report.Entries {
			found = found || (e.Outcome == Mapped && strings.Contains(e.Target, "spec.ranking") && strings.Contains(e.Detail, "keeps the node MetalLB chose"))
		}
		if !found {
			t.Errorf("%s: ranking not reported as mapped: %+v", f, res.Report.Entries)
		}
	}
	cil := importFile(t, Cilium, "testdata/cilium/l2policy.yaml")
	for _, p := range cil.Policies {
		if p.Spec.Ranking != "" {
			t.Errorf("cilium policy %s has ranking %q", p.Metadata.Name, p.Spec.Ranking)
		}
	}
}
