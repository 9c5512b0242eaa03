package importer

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	klabels "k8s.io/apimachinery/pkg/labels"
)

// MetalLB source types: only what the importer reads. Field names and
// defaults follow MetalLB's metallb.io/v1beta1 API and its pre-0.13
// ConfigMap.

type mlbAllocation struct {
	Priority           int                    `json:"priority"`
	Namespaces         []string               `json:"namespaces"`
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors"`
	ServiceSelectors   []metav1.LabelSelector `json:"serviceSelectors"`
}

type mlbPoolSpec struct {
	Addresses     []string       `json:"addresses"`
	AutoAssign    *bool          `json:"autoAssign"`
	AvoidBuggyIPs bool           `json:"avoidBuggyIPs"`
	Allocation    *mlbAllocation `json:"serviceAllocation"`
	// v1beta1 AddressPool only:
	Protocol          string `json:"protocol"`
	BGPAdvertisements []any  `json:"bgpAdvertisements"`
}

type mlbPool struct {
	Metadata struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec mlbPoolSpec `json:"spec"`
}

type mlbL2AdvSpec struct {
	IPAddressPools         []string               `json:"ipAddressPools"`
	IPAddressPoolSelectors []metav1.LabelSelector `json:"ipAddressPoolSelectors"`
	NodeSelectors          []metav1.LabelSelector `json:"nodeSelectors"`
	Interfaces             []string               `json:"interfaces"`
	ServiceSelectors       []metav1.LabelSelector `json:"serviceSelectors"`
	PreferredNodeSelectors []any                  `json:"preferredNodeSelectors"`
}

type mlbL2Adv struct {
	Spec mlbL2AdvSpec `json:"spec"`
}

var selectorFields = leaf

var mlbPoolFields = fields{
	"addresses": leaf, "autoAssign": leaf, "avoidBuggyIPs": leaf,
	"serviceAllocation": {"priority": leaf, "namespaces": leaf, "namespaceSelectors": selectorFields, "serviceSelectors": selectorFields},
}

var mlbAddressPoolFields = fields{
	"addresses": leaf, "autoAssign": leaf, "avoidBuggyIPs": leaf, "protocol": leaf, "bgpAdvertisements": leaf,
}

var mlbL2AdvFields = fields{
	"ipAddressPools": leaf, "ipAddressPoolSelectors": selectorFields, "nodeSelectors": selectorFields,
	"interfaces": leaf, "serviceSelectors": selectorFields, "preferredNodeSelectors": leaf,
}

// mlbPoolIn is a pool of any MetalLB generation, normalised, with the
// field paths to name in the report.
type mlbPoolIn struct {
	rec        recorder
	name       string
	labels     map[string]string
	prefix     string // "spec." or "address-pools[2]."
	spec       mlbPoolSpec
	autoKey    string // "autoAssign" or "auto-assign"
	buggyKey   string
	bgpAdvKey  string
	layer2     bool // announced by L2 without an L2Advertisement (ConfigMap, AddressPool protocol layer2)
	bgp        bool // announced by BGP (protocol bgp)
	importedAs string
}

// metallbImporter accumulates one MetalLB import.
type metallbImporter struct {
	res      *Result
	pools    []*mlbPoolIn
	advs     []mlbAdvIn
	names    map[string]string // Mooring object name -> source ref
	bgpState                   // metallb_bgp.go
}

type mlbAdvIn struct {
	rec recorder
	o   *object
	adv mlbL2Adv
}

// MetalLB imports MetalLB's configuration of any generation: the pre-0.13
// ConfigMap (key "config"), v1beta1 AddressPool, IPAddressPool and
// L2Advertisement; BGP kinds are reported as not supported, each by name.
// Objects of other kinds are reported, never silently skipped. A malformed
// object fails the whole import with an *InputError naming the file, the
// object and the field.
func MetalLB(inputs []Input) (*Result, error) {
	objs, err := decodeAll(inputs)
	if err != nil {
		return nil, err
	}
	m := &metallbImporter{res: &Result{}, names: map[string]string{}}
	for _, o := range objs {
		if err := m.object(o); err != nil {
			return nil, err
		}
	}
	for _, p := range m.pools {
		if err := m.pool(p); err != nil {
			return nil, err
		}
	}
	m.pinnedPriorities()
	if err := m.bgp(); err != nil {
		return nil, err
	}
	m.announcements()
	return m.res, nil
}

func (m *metallbImporter) rec(o *object) recorder {
	return recorder{rep: &m.res.Report, src: o.src, kind: o.kind, obj: o.ref()}
}

var mlbBGPKinds = map[string]bool{"BGPPeer": true, "BGPAdvertisement": true, "BFDProfile": true, "Community": true}

func (m *metallbImporter) object(o *object) error {
	rec := m.rec(o)
	switch {
	case o.kind == "ConfigMap" && o.apiVersion == "v1":
		return m.configMap(o, rec)
	case o.group() != "metallb.io":
		rec.notMapped("", "not a MetalLB object (apiVersion %s): not imported", o.apiVersion)
		return nil
	case o.kind == "IPAddressPool":
		var p mlbPool
		if err := o.decodeInto(&p); err != nil {
			return err
		}
		reportUnknown(rec, o, mlbPoolFields)
		m.pools = append(m.pools, &mlbPoolIn{rec: rec, name: o.name, labels: p.Metadata.Labels, prefix: "spec.", spec: p.Spec,
			autoKey: "autoAssign", buggyKey: "avoidBuggyIPs"})
	case o.kind == "AddressPool":
		var p mlbPool
		if err := o.decodeInto(&p); err != nil {
			return err
		}
		reportUnknown(rec, o, mlbAddressPoolFields)
		in := &mlbPoolIn{rec: rec, name: o.name, labels: p.Metadata.Labels, prefix: "spec.", spec: p.Spec,
			autoKey: "autoAssign", buggyKey: "avoidBuggyIPs", bgpAdvKey: "bgpAdvertisements"}
		if err := m.protocol(in, o.src, "spec.protocol", p.Spec.Protocol); err != nil {
			return err
		}
		rec.changed("apiVersion", "", "AddressPool is MetalLB's deprecated kind (removed in 0.14): imported like an IPAddressPool")
		m.pools = append(m.pools, in)
	case o.kind == "L2Advertisement":
		var a mlbL2Adv
		if err := o.decodeInto(&a); err != nil {
			return err
		}
		reportUnknown(rec, o, mlbL2AdvFields)
		m.advs = append(m.advs, mlbAdvIn{rec: rec, o: o, adv: a})
	case mlbBGPKinds[o.kind]:
		m.bgpObject(o, rec)
	default:
		rec.notMapped("", "MetalLB kind %s is not imported (status or internal object)", o.kind)
	}
	return nil
}

// protocol handles the layer2/bgp protocol of a ConfigMap pool or an
// AddressPool.
func (m *metallbImporter) protocol(in *mlbPoolIn, src source, field, proto string) error {
	switch strings.ToLower(strings.TrimSpace(proto)) {
	case "layer2":
		in.layer2 = true
		in.rec.mapped(field, "L2AnnouncementPolicy", "layer2: announced by an imported L2AnnouncementPolicy from every node on every interface")
	case "bgp":
		in.bgp = true
		in.rec.notMapped(field, "protocol bgp: the pool is imported but no BGPAdvertisement is made from this older form; convert MetalLB's configuration to its CRDs (BGPPeer, BGPAdvertisement) and import those, or write a Mooring BGPAdvertisement for the pool (docs/bgp.md)")
	case "":
		return &InputError{File: src.file, Doc: src.doc, Kind: in.rec.kind, Object: in.rec.obj, Field: field, Err: fmt.Errorf("protocol is required: layer2 or bgp")}
	default:
		return &InputError{File: src.file, Doc: src.doc, Kind: in.rec.kind, Object: in.rec.obj, Field: field, Err: fmt.Errorf("protocol %q: want layer2 or bgp", proto)}
	}
	if len(in.spec.BGPAdvertisements) > 0 {
		in.rec.notMapped(in.prefix+in.bgpAdvKey, "BGP advertisements of this older form are not imported: convert them to MetalLB's BGPAdvertisement CRD and import that")
	}
	return nil
}

// claimName gives each Mooring object a unique name: MetalLB objects are
// namespaced, Mooring pools and policies are not.
func (m *metallbImporter) claimName(rec recorder, want string) string {
	name := want
	for i := 2; m.names[name] != ""; i++ {
		name = fmt.Sprintf("%s-%d", want, i)
	}
	if name != want {
		rec.changed("metadata.name", name, "%q is already taken by %s (Mooring pools and policies are cluster-wide): renamed", want, m.names[want])
	}
	m.names[name] = rec.kind + " " + rec.obj
	return name
}

func (m *metallbImporter) pool(in *mlbPoolIn) error {
	rec, s := in.rec, in.spec
	name := m.claimName(rec, in.name)
	in.importedAs = name
	p := newPool(name, fmt.Sprintf("metallb %s %s (%s)", rec.kind, rec.obj, rec.src.file))
	target := "LoadBalancerIPPool " + name
	if len(s.Addresses) == 0 {
		return &InputError{File: rec.src.file, Doc: rec.src.doc, Kind: rec.kind, Object: rec.obj, Field: in.prefix + "addresses", Err: fmt.Errorf("a pool needs at least one address")}
	}
	for i, a := range s.Addresses {
		field := fmt.Sprintf("%saddresses[%d]", in.prefix, i)
		b, note, err := metallbAddress(a)
		if err != nil {
			return &InputError{File: rec.src.file, Doc: rec.src.doc, Kind: rec.kind, Object: rec.obj, Field: field, Err: err}
		}
		p.Spec.Blocks = append(p.Spec.Blocks, b)
		bt := fmt.Sprintf("%s spec.blocks[%d]", target, i)
		// A masked CIDR is the same addresses, as MetalLB reads it.
		rec.mapped(field, bt, "%s", note)
	}
	// MetalLB hands out every address of a CIDR, .0 and .255 included,
	// unless avoidBuggyIPs; Mooring skips a CIDR's first and last by default.
	p.Spec.AllowFirstLastIPs = true
	rec.mapped(in.prefix+"addresses", target+" spec.allowFirstLastIPs",
		"set to true, so the pool hands out what MetalLB does: the first and last address of a CIDR too (Mooring's default skips them)")
	if s.AutoAssign != nil && !*s.AutoAssign {
		p.Spec.AutoAssign = ptr(false)
		rec.mapped(in.prefix+in.autoKey, target+" spec.autoAssign", "false: only Services that request an address or the pool get one")
	} else if s.AutoAssign != nil {
		rec.mapped(in.prefix+in.autoKey, target+" spec.autoAssign", "true (the default)")
	}
	if s.AvoidBuggyIPs {
		p.Spec.AvoidBuggyIPs = true
		rec.mapped(in.prefix+in.buggyKey, target+" spec.avoidBuggyIPs", "no IPv4 address ending in .0 or .255 is handed out or granted on request")
	}
	if a := s.Allocation; a != nil {
		m.allocation(rec, in.prefix+"serviceAllocation", target, a, &p.Spec)
	}
	m.res.Pools = append(m.res.Pools, p)
	return nil
}

// allocation maps serviceAllocation, keeping MetalLB's rule: a Service
// may take the pool when its namespace is listed OR selected by any
// namespaceSelector (when either is given), AND it matches any of the
// serviceSelectors (when given). One namespace rule and one service
// selector fit the pool's own fields; more are written as selectorTerms,
// one per (namespace rule, service selector) pair, which the pool ORs.
func (m *metallbImporter) allocation(rec recorder, prefix, target string, a *mlbAllocation, spec *PoolSpec) {
	if a.Priority > 0 {
		spec.Priority = ptr(int32(min(a.Priority, 1<<31-1)))
		rec.mapped(prefix+".priority", target+" spec.priority",
			"lower number first, pools without a priority after (as MetalLB); among equal priorities the older pool, then the name, goes first (MetalLB leaves that order unspecified)")
	} else if a.Priority < 0 {
		rec.mapped(prefix+".priority", target+" spec.priority",
			"%d: MetalLB treats a priority below 1 as none; left unset", a.Priority)
	}
	nsRules := len(a.NamespaceSelectors)
	if len(a.Namespaces) > 0 {
		nsRules++
	}
	if nsRules <= 1 && len(a.ServiceSelectors) <= 1 {
		m.allocationFields(rec, prefix, target, a, spec)
		return
	}
	type nsRule struct {
		field string
		term  SelectorTerm
	}
	var rules []nsRule
	if len(a.Namespaces) > 0 {
		rules = append(rules, nsRule{prefix + ".namespaces", SelectorTerm{Namespaces: slices.Clone(a.Namespaces)}})
	}
	for i := range a.NamespaceSelectors {
		rules = append(rules, nsRule{fmt.Sprintf("%s.namespaceSelectors[%d]", prefix, i), SelectorTerm{NamespaceSelector: a.NamespaceSelectors[i].DeepCopy()}})
	}
	if len(rules) == 0 {
		rules = []nsRule{{}}
	}
	svcSels := a.ServiceSelectors
	if len(svcSels) == 0 {
		svcSels = []metav1.LabelSelector{{}}
	}
	where := map[string][]int{} // source field -> the terms it is part of
	for _, r := range rules {
		for j := range svcSels {
			t := r.term
			t.ServiceSelector = nonEmpty(svcSels[j])
			if r.field != "" {
				where[r.field] = append(where[r.field], len(spec.SelectorTerms))
			}
			if len(a.ServiceSelectors) > 0 {
				f := fmt.Sprintf("%s.serviceSelectors[%d]", prefix, j)
				where[f] = append(where[f], len(spec.SelectorTerms))
			}
			spec.SelectorTerms = append(spec.SelectorTerms, t)
		}
	}
	fields := make([]string, 0, len(where))
	for f := range where {
		fields = append(fields, f)
	}
	slices.Sort(fields)
	for _, f := range fields {
		rec.mapped(f, fmt.Sprintf("%s spec.selectorTerms%v", target, where[f]),
			"MetalLB's rule kept: namespaces listed OR selected, AND any service selector; the pool serves a Service that matches any of its %d selectorTerms", len(spec.SelectorTerms))
	}
}

// allocationFields maps at most one namespace rule and one service
// selector onto the pool's own fields.
func (m *metallbImporter) allocationFields(rec recorder, prefix, target string, a *mlbAllocation, spec *PoolSpec) {
	switch {
	case len(a.Namespaces) > 0:
		spec.Namespaces = slices.Clone(a.Namespaces)
		rec.mapped(prefix+".namespaces", target+" spec.namespaces", "")
	case len(a.NamespaceSelectors) == 1:
		spec.NamespaceSelector = a.NamespaceSelectors[0].DeepCopy()
		rec.mapped(prefix+".namespaceSelectors[0]", target+" spec.namespaceSelector", "")
	}
	if len(a.ServiceSelectors) == 1 {
		spec.ServiceSelector = a.ServiceSelectors[0].DeepCopy()
		rec.mapped(prefix+".serviceSelectors[0]", target+" spec.serviceSelector", "")
	}
}

// pinnedPriorities keeps MetalLB's pool order: MetalLB tries the pools
// that have a serviceAllocation (by priority, those without one last)
// before any pool without one. Mooring orders pools with a priority
// before those without, so an imported pool with a serviceAllocation but
// no priority gets one just above every explicit priority.
func (m *metallbImporter) pinnedPriorities() {
	top := int32(0)
	for _, p := range m.pools {
		if a := p.spec.Allocation; a != nil && a.Priority > 0 {
			top = max(top, int32(min(a.Priority, 1<<31-2)))
		}
	}
	for i, p := range m.pools {
		if a := p.spec.Allocation; a != nil && a.Priority <= 0 {
			spec := &m.res.Pools[i].Spec
			spec.Priority = ptr(top + 1)
			p.rec.mapped(p.prefix+"serviceAllocation", "LoadBalancerIPPool "+p.importedAs+" spec.priority",
				"%d: MetalLB tries pools with a serviceAllocation before pools without one, and this one after those with a priority", top+1)
		}
	}
}

// announcements turns L2Advertisements (and layer2 pools of the older
// generations) into L2AnnouncementPolicies, and reports every pool whose
// announcement changes.
func (m *metallbImporter) announcements() {
	covered := map[string]bool{}
	for _, p := range m.pools {
		if p.layer2 {
			covered[p.name] = true
		}
	}
	if len(covered) > 0 {
		pol := newPolicy(m.claimName(m.pools[0].rec, "metallb-layer2"), "metallb layer2 pools")
		pol.Spec.LoadBalancerIPs = ptr(true)
		pol.Spec.Ranking = rankingMetalLB
		m.res.Policies = append(m.res.Policies, pol)
		for _, p := range m.pools {
			if p.layer2 {
				p.rec.mapped("", "L2AnnouncementPolicy "+pol.Metadata.Name+" spec.ranking", rankingDetail)
			}
		}
	}
	for _, a := range m.advs {
		for _, p := range m.advPools(a) {
			covered[p] = true
		}
		m.advertisement(a)
	}
	if len(covered) == 0 || len(m.res.Policies) == 0 {
		return
	}
	for _, p := range m.pools {
		if !covered[p.name] {
			p.rec.changed("", "LoadBalancerIPPool "+p.importedAs,
				"no L2Advertisement selects this pool in MetalLB, but Mooring's L2 policies select Services, not pools: Services of this pool that a policy's serviceSelector matches will be announced by L2 too; narrow the policy's serviceSelector if they must not be")
		}
	}
}

// advPools returns the names of the pools an advertisement covers.
func (m *metallbImporter) advPools(a mlbAdvIn) []string {
	s := a.adv.Spec
	var out []string
	all := len(s.IPAddressPools) == 0 && len(s.IPAddressPoolSelectors) == 0
	for _, p := range m.pools {
		if all || slices.Contains(s.IPAddressPools, p.name) || poolSelected(s.IPAddressPoolSelectors, p.labels) {
			out = append(out, p.name)
		}
	}
	return out
}

func poolSelected(sels []metav1.LabelSelector, labels map[string]string) bool {
	for i := range sels {
		sel, err := metav1.LabelSelectorAsSelector(&sels[i])
		if err == nil && sel.Matches(klabels.Set(labels)) {
			return true
		}
	}
	return false
}

func (m *metallbImporter) advertisement(a mlbAdvIn) {
	rec, s := a.rec, a.adv.Spec
	if restricted := len(s.IPAddressPools) > 0 || len(s.IPAddressPoolSelectors) > 0; restricted && len(m.advPools(a)) == 0 {
		// MetalLB announces nothing through it; a Mooring policy selects
		// Services, not pools, and would announce every Service.
		rec.changed(poolFields(s), "",
			"selects none of the imported pools (%s), so MetalLB announces nothing through it: no L2AnnouncementPolicy written (import the pools it names together with it)", poolRestriction(s))
		return
	}
	from := fmt.Sprintf("metallb L2Advertisement %s (%s)", rec.obj, rec.src.file)
	svcSels := s.ServiceSelectors
	if len(svcSels) == 0 {
		svcSels = []metav1.LabelSelector{{}}
	}
	nodeSels := s.NodeSelectors
	if len(nodeSels) == 0 {
		nodeSels = []metav1.LabelSelector{{}}
	}
	var ifaces []string
	for _, name := range s.Interfaces {
		ifaces = append(ifaces, regexp.QuoteMeta(name))
	}
	var names []string
	for i, ss := range svcSels {
		for j, ns := range nodeSels {
			want := a.o.name
			if len(svcSels)*len(nodeSels) > 1 {
				want = fmt.Sprintf("%s-%d", a.o.name, i*len(nodeSels)+j+1)
			}
			pol := newPolicy(m.claimName(rec, want), from)
			pol.Spec.LoadBalancerIPs = ptr(true)
			pol.Spec.ServiceSelector = nonEmpty(ss)
			pol.Spec.NodeSelector = nonEmpty(ns)
			pol.Spec.Interfaces = slices.Clone(ifaces)
			pol.Spec.Ranking = rankingMetalLB
			m.res.Policies = append(m.res.Policies, pol)
			names = append(names, pol.Metadata.Name)
		}
	}
	target := "L2AnnouncementPolicy " + strings.Join(names, ", ")
	if len(names) > 1 {
		rec.mapped("spec", target, "MetalLB ORs the %d serviceSelectors and %d nodeSelectors of one advertisement; Mooring unites the nodes of every policy that matches a Service, so one policy per (serviceSelector, nodeSelector) pair keeps the meaning", len(s.ServiceSelectors), len(s.NodeSelectors))
	}
	rec.mapped("", target+" spec.ranking", rankingDetail)
	for i := range s.ServiceSelectors {
		rec.mapped(fmt.Sprintf("spec.serviceSelectors[%d]", i), target+" spec.serviceSelector", "")
	}
	for i := range s.NodeSelectors {
		rec.mapped(fmt.Sprintf("spec.nodeSelectors[%d]", i), target+" spec.nodeSelector", "")
	}
	if len(s.Interfaces) > 0 {
		rec.mapped("spec.interfaces", target+" spec.interfaces", "interface names written as anchored regular expressions (%s): the same interfaces", strings.Join(ifaces, ", "))
	}
	m.advPoolReport(a, target)
	if len(s.PreferredNodeSelectors) > 0 {
		rec.notMapped("spec.preferredNodeSelectors", "Mooring has no node preference: ranking MetalLB reproduces the speakers' hash order but not preferred nodes, so the announcing node may differ (and move once during the migration); restrict spec.nodeSelector if a node must never announce")
	}
}

// advPoolReport reports ipAddressPools and ipAddressPoolSelectors of an
// advertisement that selects at least one imported pool.
func (m *metallbImporter) advPoolReport(a mlbAdvIn, target string) {
	rec, s := a.rec, a.adv.Spec
	if len(s.IPAddressPools) == 0 && len(s.IPAddressPoolSelectors) == 0 {
		return
	}
	pools := m.advPools(a)
	if len(pools) == len(m.pools) {
		rec.mapped(poolFields(s), target, "selects every imported pool (%s); Mooring policies select Services, not pools, so the meaning is the same here", quoted(pools))
	} else {
		rec.changed(poolFields(s), target, "MetalLB announces only pools %s of the imported %d (%s); Mooring policies select Services, not pools: this policy also announces Services of the other pools that its serviceSelector matches; narrow spec.serviceSelector if that matters",
			quoted(pools), len(m.pools), poolRestriction(s))
	}
	for _, n := range s.IPAddressPools {
		if !slices.ContainsFunc(m.pools, func(p *mlbPoolIn) bool { return p.name == n }) {
			rec.changed("spec.ipAddressPools", target, "names pool %q, which is not among the imported objects", n)
		}
	}
}

// poolFields names the fields that restrict an advertisement to pools.
func poolFields(s mlbL2AdvSpec) string {
	switch {
	case len(s.IPAddressPools) > 0 && len(s.IPAddressPoolSelectors) > 0:
		return "spec.ipAddressPools, spec.ipAddressPoolSelectors"
	case len(s.IPAddressPools) > 0:
		return "spec.ipAddressPools"
	}
	return "spec.ipAddressPoolSelectors"
}

// poolRestriction says in words which pools an advertisement asks for.
func poolRestriction(s mlbL2AdvSpec) string {
	var parts []string
	if len(s.IPAddressPools) > 0 {
		parts = append(parts, "by name: "+quoted(s.IPAddressPools))
	}
	for i := range s.IPAddressPoolSelectors {
		parts = append(parts, "by labels: "+metav1.FormatLabelSelector(&s.IPAddressPoolSelectors[i]))
	}
	return strings.Join(parts, "; ")
}

func quoted(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(x)
	}
	return strings.Join(q, ", ")
}

// Imported policies rank nodes as MetalLB's speakers do, so the hand-over
// moves no address (announce.RankingMetalLB).
const (
	rankingMetalLB = "MetalLB"
	rankingDetail  = "MetalLB: keeps the node MetalLB chose (its speakers' order, the smallest sha256 of node#address), so handing an address over moves it nowhere and resets no connection; set Mooring later to spread by Mooring's own hash (that moves addresses)"
)

// nonEmpty returns nil for a selector that matches everything.
func nonEmpty(s metav1.LabelSelector) *metav1.LabelSelector {
	if len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0 {
		return nil
	}
	return s.DeepCopy()
}
