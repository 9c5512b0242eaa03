package importer

// MetalLB's pool selection, written here from MetalLB's documentation of
// IPAddressPool.spec.serviceAllocation (never from the importer's code),
// run against Mooring's allocator (internal/lbipam) on the imported pool.

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	klabels "k8s.io/apimachinery/pkg/labels"

	"github.com/mooringlb/mooring/internal/lbipam"
)

// metallbCompatible is MetalLB's rule for whether a pool may serve a
// Service: without a serviceAllocation every Service; with one, the
// namespaces it lists together with those its namespaceSelectors select
// (when it has either), and, when it has serviceSelectors, a Service one
// of them matches.
func metallbCompatible(a *mlbAllocation, ns string, nsLabels, svcLabels map[string]string) bool {
	if a == nil {
		return true
	}
	nsOK := len(a.Namespaces) == 0 && len(a.NamespaceSelectors) == 0
	nsOK = nsOK || slices.Contains(a.Namespaces, ns)
	for i := range a.NamespaceSelectors {
		nsOK = nsOK || selects(&a.NamespaceSelectors[i], nsLabels)
	}
	svcOK := len(a.ServiceSelectors) == 0
	for i := range a.ServiceSelectors {
		svcOK = svcOK || selects(&a.ServiceSelectors[i], svcLabels)
	}
	return nsOK && svcOK
}

func selects(s *metav1.LabelSelector, l map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		panic(err)
	}
	return sel.Matches(klabels.Set(l))
}

// metallbOrder is the order MetalLB tries the pools a Service may take an
// address from automatically: first the pools with a serviceAllocation,
// those with a priority (a positive number) by priority, then those
// without; only then the pools without a serviceAllocation.
func metallbOrder(pools []mlbTestPool, ns string, nsLabels, svcLabels map[string]string) []string {
	var prio, pinned, open []mlbTestPool
	for _, p := range pools {
		switch {
		case !metallbCompatible(p.alloc, ns, nsLabels, svcLabels):
		case p.alloc == nil:
			open = append(open, p)
		case p.alloc.Priority > 0:
			prio = append(prio, p)
		default:
			pinned = append(pinned, p)
		}
	}
	slices.SortStableFunc(prio, func(a, b mlbTestPool) int { return a.alloc.Priority - b.alloc.Priority })
	var out []string
	for _, p := range slices.Concat(prio, pinned, open) {
		out = append(out, p.name)
	}
	return out
}

type mlbTestPool struct {
	name      string
	addresses []string
	alloc     *mlbAllocation
}

// doc is the pool as a MetalLB IPAddressPool object.
func (p mlbTestPool) doc() map[string]any {
	spec := map[string]any{"addresses": p.addresses}
	if p.alloc != nil {
		spec["serviceAllocation"] = p.alloc
	}
	return map[string]any{"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
		"metadata": map[string]any{"name": p.name, "namespace": "metallb-system"}, "spec": spec}
}

func importPools(t *testing.T, pools ...mlbTestPool) *Result {
	t.Helper()
	var in []Input
	for _, p := range pools {
		b, err := json.Marshal(p.doc())
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, Input{Name: p.name + ".json", Data: b})
	}
	res, err := MetalLB(in)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

type klabelSelector struct{ klabels.Selector }

func (s klabelSelector) Matches(l map[string]string) bool { return s.Selector.Matches(klabels.Set(l)) }

func toSel(t *testing.T, s *metav1.LabelSelector) lbipam.Selector {
	if s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0) {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatalf("imported selector %v: %v", s, err)
	}
	return klabelSelector{sel}
}

// selectingPool is lbipamPool with the pool's selectors, namespaces and
// selector terms, converted as the controller converts them.
func selectingPool(t *testing.T, p Pool) lbipam.Pool {
	t.Helper()
	out := lbipamPool(t, p)
	ap := apiPool(t, p)
	out.ServiceSelector = toSel(t, ap.Spec.ServiceSelector)
	out.NamespaceSelector = toSel(t, ap.Spec.NamespaceSelector)
	out.Namespaces = ap.Spec.Namespaces
	for _, term := range ap.Spec.SelectorTerms {
		out.Terms = append(out.Terms, lbipam.Term{Namespaces: term.Namespaces,
			ServiceSelector: toSel(t, term.ServiceSelector), NamespaceSelector: toSel(t, term.NamespaceSelector)})
	}
	return out
}

// The cluster the cases run in: namespaces with labels (each of the
// cases' namespace selectors matches one at least) and Service labels.
var (
	testNamespaces = map[string]map[string]string{
		"a": nil, "b": {"tier": "shop"}, "c": {"env": "prod"}, "d": {"tier": "shop", "env": "prod"}, "e": {"env": "dev"},
	}
	testServiceLabels = []map[string]string{nil, {"role": "front"}, {"role": "api"}, {"app": "x"}, {"role": "back", "app": "y"}}
)

func ls(kv ...string) metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return metav1.LabelSelector{MatchLabels: m}
}

// For every serviceAllocation shape and every Service of the test cluster,
// Mooring's allocator on the imported pool serves exactly the Services
// MetalLB's rule lets the pool serve.
func TestImportedPoolsServeWhatMetalLBServes(t *testing.T) {
	appIn := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"x", "y"}}}}
	for _, tc := range []struct {
		name  string
		alloc *mlbAllocation
	}{
		{"no serviceAllocation", nil},
		{"priority only", &mlbAllocation{Priority: 3}},
		{"namespaces", &mlbAllocation{Namespaces: []string{"a", "c"}}},
		{"one namespace selector", &mlbAllocation{NamespaceSelectors: []metav1.LabelSelector{ls("tier", "shop")}}},
		{"namespaces OR a selector", &mlbAllocation{Namespaces: []string{"a"}, NamespaceSelectors: []metav1.LabelSelector{ls("tier", "shop")}}},
		{"two namespace selectors", &mlbAllocation{NamespaceSelectors: []metav1.LabelSelector{ls("tier", "shop"), ls("env", "prod")}}},
		{"one service selector", &mlbAllocation{ServiceSelectors: []metav1.LabelSelector{ls("role", "front")}}},
		{"two service selectors", &mlbAllocation{ServiceSelectors: []metav1.LabelSelector{ls("role", "front"), appIn}}},
		{"namespace selector AND service selector", &mlbAllocation{NamespaceSelectors: []metav1.LabelSelector{ls("env", "prod")}, ServiceSelectors: []metav1.LabelSelector{ls("role", "api")}}},
		{"everything", &mlbAllocation{Priority: 7, Namespaces: []string{"a", "e"},
			NamespaceSelectors: []metav1.LabelSelector{ls("tier", "shop"), ls("env", "prod")},
			ServiceSelectors:   []metav1.LabelSelector{ls("role", "front"), appIn}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := mlbTestPool{name: "p", addresses: []string{"192.0.2.0/24"}, alloc: tc.alloc}
			res := importPools(t, src)
			for _, e := range res.Report.Entries {
				if e.Outcome != Mapped {
					t.Errorf("report: %s %s is %s: %s", e.Object, e.Field, e.Outcome, e.Detail)
				}
			}
			pool := selectingPool(t, res.Pools[0])
			served := 0
			for ns, nsLabels := range testNamespaces {
				for i, svcLabels := range testServiceLabels {
					want := metallbCompatible(tc.alloc, ns, nsLabels, svcLabels)
					a := lbipam.NewAllocator()
					a.SetPools([]lbipam.Pool{pool})
					svc := lbipam.Service{Key: lbipam.ServiceKey{Namespace: ns, Name: fmt.Sprint("s", i)}, Labels: svcLabels,
						NamespaceLabels: nsLabels, Families: []lbipam.Family{lbipam.IPv4}, RequireAllFamilies: true}
					got := len(a.Assign(svc).Addrs) > 0
					if got != want {
						t.Errorf("Service in namespace %s %v with labels %v: MetalLB serves it: %v, the imported pool: %v", ns, nsLabels, svcLabels, want, got)
					}
					if got {
						served++
					}
				}
			}
			if tc.alloc != nil && tc.alloc.Priority == 0 && served == len(testNamespaces)*len(testServiceLabels) {
				t.Errorf("the case restricts nothing: it tests nothing")
			}
		})
	}
}

// The order MetalLB tries pools in is kept: pools with a serviceAllocation
// by priority, then those with one but no priority, then those without;
// a Service takes its address from the next pool in that order once the
// earlier ones are full.
func TestImportedPoolsKeepMetalLBOrder(t *testing.T) {
	pools := []mlbTestPool{
		{"a-open", []string{"10.0.0.1/32"}, nil},
		{"b-pinned", []string{"10.0.0.2/32"}, &mlbAllocation{Namespaces: []string{"a", "b"}}},
		{"c-prio-9", []string{"10.0.0.3/32"}, &mlbAllocation{Priority: 9}},
		{"d-prio-4", []string{"10.0.0.4/32"}, &mlbAllocation{Priority: 4, ServiceSelectors: []metav1.LabelSelector{ls("role", "front")}}},
	}
	res := importPools(t, pools...)
	var lp []lbipam.Pool
	owner := map[netip.Addr]string{}
	for _, p := range res.Pools {
		pool := selectingPool(t, p)
		lp = append(lp, pool)
		owner[pool.Blocks[0].First] = pool.Name
	}
	for _, svcLabels := range []map[string]string{{"role": "front"}, nil} {
		want := metallbOrder(pools, "a", nil, svcLabels)
		a := lbipam.NewAllocator()
		a.SetPools(lp)
		var got []string
		for i := range len(pools) + 1 {
			r := a.Assign(lbipam.Service{Key: lbipam.ServiceKey{Namespace: "a", Name: fmt.Sprint("s", i)}, Labels: svcLabels,
				Families: []lbipam.Family{lbipam.IPv4}, RequireAllFamilies: true})
			for _, addr := range r.Addrs {
				got = append(got, owner[addr])
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("Services labelled %v take addresses from %v; MetalLB's order is %v", svcLabels, got, want)
		}
	}
}

// Every field of fixtures shaped as MetalLB's own L2 samples is mapped:
// the report names each one, and none changes meaning.
func TestMetalLBSamplesMapEveryField(t *testing.T) {
	for _, tc := range []struct {
		file   string
		fields map[string][]string // object -> fields the report must name
	}{
		{"pool-plain.yaml", map[string][]string{"metallb-system/plain": {"spec.addresses[0]", "spec.addresses[1]", "spec.addresses[2]", "spec.addresses"}}},
		{"pool-allocation.yaml", map[string][]string{"metallb-system/shops": {"spec.addresses[0]", "spec.addresses", "spec.avoidBuggyIPs",
			"spec.serviceAllocation.priority", "spec.serviceAllocation.namespaces", "spec.serviceAllocation.namespaceSelectors[0]",
			"spec.serviceAllocation.serviceSelectors[0]"}}},
		{"pool-and-l2adv.yaml", map[string][]string{"metallb-system/lan": {"spec.addresses[0]", "spec.addresses[1]", "spec.addresses"},
			"metallb-system/all": {""}}},
		{"l2adv-nodes.yaml", map[string][]string{"metallb-system/edge-nodes": {"", "spec.nodeSelectors[0]"}}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			res := importFile(t, MetalLB, "testdata/metallb/samples/"+tc.file)
			for _, e := range res.Report.Entries {
				if e.Outcome != Mapped {
					t.Errorf("%s %s is %s: %s", e.Object, e.Field, e.Outcome, e.Detail)
				}
			}
			for obj, fields := range tc.fields {
				for _, f := range fields {
					if findEntry(&res.Report, Mapped, obj, f) == nil {
						t.Errorf("%s: no mapped entry for %q", obj, f)
					}
				}
			}
		})
	}
}
