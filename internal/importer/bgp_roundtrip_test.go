package importer

// The BGP round trip: for every MetalLB BGP object of the fixtures, the
// settings it takes effect with are computed twice — once from MetalLB's
// documented semantics by an oracle written here (native speaker's
// defaults), once from the imported Mooring object decoded strictly into
// api/v1alpha1 with Mooring's documented defaults — and compared setting
// by setting. A setting that differs must be named by a changed or
// not-mapped report entry; every field a source object sets must have an
// entry.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
)

// setting is one effective value of one object: key names it ("hold"),
// field is the source field whose entry must explain a difference.
type setting struct {
	key, field, value string
}

func strict[T any](t *testing.T, in any) *T {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("%T does not decode into the API type: %v\n%s", out, err, b)
	}
	return &out
}

func dur(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

func sels(s []metav1.LabelSelector) string {
	b, _ := json.Marshal(s)
	if len(s) == 0 {
		return "any"
	}
	return string(b)
}

// metallbPeerOracle is a MetalLB BGPPeer as its native speaker and the
// MetalLB docs define it.
func metallbPeerOracle(spec map[string]any, bfd map[string]map[string]any) []setting {
	var s mlbBGPPeerSpec
	b, _ := json.Marshal(spec)
	_ = json.Unmarshal(b, &s)
	peerAS := "any"
	switch {
	case s.PeerASN > 0:
		peerAS = fmt.Sprint(s.PeerASN)
	case s.DynamicASN != "":
		peerAS = s.DynamicASN
	}
	hold, ka := 90*time.Second, 30*time.Second
	switch {
	case s.HoldTime != nil && s.KeepaliveTime != nil:
		hold, ka = s.HoldTime.Duration, s.KeepaliveTime.Duration
	case s.HoldTime != nil:
		hold, ka = s.HoldTime.Duration, s.HoldTime.Duration/3
	case s.KeepaliveTime != nil:
		hold, ka = 3*s.KeepaliveTime.Duration, s.KeepaliveTime.Duration
	}
	port := int32(179)
	if s.PeerPort != 0 {
		port = s.PeerPort
	}
	ttl, fams := 1, familyOf(s.PeerAddress)
	if s.EBGPMultiHop {
		ttl = 255
	}
	if s.DualStackAddressFamily {
		fams = "IPv4,IPv6"
	}
	out := []setting{
		{"myASN", "spec.myASN", fmt.Sprint(s.MyASN)}, {"peerAS", "spec.peerASN", peerAS},
		{"localAS", "spec.localASN", fmt.Sprint(max(s.LocalASN, s.MyASN))},
		{"address", "spec.peerAddress", s.PeerAddress}, {"port", "spec.peerPort", fmt.Sprint(port)},
		{"source", "spec.sourceAddress", s.SourceAddress}, {"routerID", "spec.routerID", s.RouterID},
		{"hold", "spec.holdTime", hold.String()}, {"keepalive", "spec.keepaliveTime", ka.String()},
		{"nodes", "spec.nodeSelectors", sels(s.NodeSelectors)}, {"gr", "spec.enableGracefulRestart", fmt.Sprint(s.EnableGracefulRestart)},
		{"ttl", "spec.ebgpMultiHop", fmt.Sprint(ttl)}, {"families", "spec.dualStackAddressFamily", fams},
		{"vrf", "spec.vrf", s.VRF},
	}
	if s.HoldTime != nil && s.HoldTime.Duration == 0 {
		out[7].value, out[8].value, out[8].field = "none", "none", "spec.holdTime"
	}
	if s.ConnectTime != nil {
		out = append(out, setting{"connect", "spec.connectTime", s.ConnectTime.Duration.String()})
	}
	auth := "none"
	switch {
	case s.Password != "":
		auth = "literal"
	case s.PasswordSecret != nil:
		auth = "secret " + s.PasswordSecret.Name
	}
	out = append(out, setting{"auth", authField(s), auth})
	return append(out, setting{"bfd", "spec.bfdProfile", bfdOracle(s.BFDProfile, bfd)})
}

func authField(s mlbBGPPeerSpec) string {
	if s.Password != "" {
		return "spec.password"
	}
	return "spec.passwordSecret"
}

func familyOf(a string) string {
	if netip.MustParseAddr(a).Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// bfdOracle is a MetalLB BFD profile's timers (defaults 300, 300, 3), "off"
// without a profile, "unknown" for a profile not in the input.
func bfdOracle(name string, bfd map[string]map[string]any) string {
	if name == "" {
		return "off"
	}
	spec, ok := bfd[name]
	if !ok {
		return "unknown " + name
	}
	get := func(k string, def float64) float64 {
		if v, ok := spec[k].(float64); ok {
			return v
		}
		return def
	}
	return fmt.Sprintf("rx %v tx %v ×%v", get("receiveInterval", 300), get("transmitInterval", 300), get("detectMultiplier", 3))
}

// mooringPeer is an imported BGPPeer with Mooring's documented defaults.
func mooringPeer(t *testing.T, p BGPPeer, profiles map[string]*mooringv1.BFDProfile) []setting {
	a := strict[mooringv1.BGPPeer](t, p).Spec
	peerAS := "any"
	switch {
	case a.PeerASN != nil && *a.PeerASN > 0:
		peerAS = fmt.Sprint(*a.PeerASN)
	case a.DynamicASN != "":
		peerAS = string(a.DynamicASN)
	}
	def := func(s string) time.Duration { d, _ := time.ParseDuration(s); return d }
	hold := dur(a.HoldTime, def(mooringv1.DefaultBGPHoldTime))
	ka := dur(a.KeepaliveTime, hold/3)
	port, ttl := a.PeerPort, int32(1)
	if port == 0 {
		port = 179
	}
	if a.EBGPMultihop != nil {
		ttl = *a.EBGPMultihop
	}
	fams := familyOf(a.PeerAddress)
	if len(a.AddressFamilies) > 0 {
		var fs []string
		for _, f := range a.AddressFamilies {
			fs = append(fs, string(f))
		}
		slices.Sort(fs)
		fams = strings.Join(fs, ",")
	}
	gr := a.GracefulRestart == nil || a.GracefulRestart.Enabled == nil || *a.GracefulRestart.Enabled
	out := []setting{
		{"myASN", "", fmt.Sprint(a.MyASN)}, {"peerAS", "", peerAS}, {"localAS", "", fmt.Sprint(a.MyASN)},
		{"address", "", a.PeerAddress}, {"port", "", fmt.Sprint(port)}, {"source", "", a.SourceAddress},
		{"routerID", "", a.RouterID}, {"hold", "", hold.String()}, {"keepalive", "", ka.String()},
		{"nodes", "", sels(a.NodeSelectors)}, {"gr", "", fmt.Sprint(gr)}, {"ttl", "", fmt.Sprint(ttl)},
		{"families", "", fams}, {"vrf", "", ""},
	}
	if a.ConnectTime != nil {
		out = append(out, setting{"connect", "", a.ConnectTime.Duration.String()})
	}
	auth := "none"
	if a.PasswordSecret != nil {
		auth = "secret " + a.PasswordSecret.Name
	}
	out = append(out, setting{"auth", "", auth})
	bfd := "off"
	if a.BFDProfile != "" {
		bfd = "unknown " + a.BFDProfile
		if pr, ok := profiles[a.BFDProfile]; ok {
			s := pr.Spec
			v := func(p *int32, d int32) int32 {
				if p == nil {
					return d
				}
				return *p
			}
			bfd = fmt.Sprintf("rx %d tx %d ×%d", v(s.ReceiveInterval, 300), v(s.TransmitInterval, 300), v(s.DetectMultiplier, 3))
		}
	}
	return append(out, setting{"bfd", "", bfd})
}

// sourceObjects reads a fixture's MetalLB objects by kind and name.
func sourceObjects(t *testing.T, path string) map[string]map[string]map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]map[string]any{}
	for _, d := range strings.Split(string(data), "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatal(err)
		}
		kind, _ := m["kind"].(string)
		if kind == "" {
			continue
		}
		name := m["metadata"].(map[string]any)["name"].(string)
		spec, _ := m["spec"].(map[string]any)
		if spec == nil {
			spec = map[string]any{}
		}
		if out[kind] == nil {
			out[kind] = map[string]map[string]any{}
		}
		out[kind][name] = spec
	}
	return out
}

// explained reports whether the report has a changed or not-mapped entry
// for field (or one of its elements) of object.
func explained(r *Report, object, field string) bool {
	return slices.ContainsFunc(r.Entries, func(e Entry) bool {
		return e.Object == object && e.Outcome != Mapped && e.Detail != "" && (e.Field == field ||
			field != "" && (strings.HasPrefix(e.Field, field+"[") || strings.HasPrefix(e.Field, field+".")))
	})
}

// everyFieldReported checks each field a source object sets has an entry
// (a whole object not imported covers them all).
func everyFieldReported(t *testing.T, r *Report, object string, spec map[string]any) {
	t.Helper()
	if slices.ContainsFunc(r.Entries, func(e Entry) bool { return e.Object == object && e.Field == "" && e.Outcome == NotMapped }) {
		return
	}
	for k := range spec {
		f := "spec." + k
		if !slices.ContainsFunc(r.Entries, func(e Entry) bool {
			return e.Object == object && (e.Field == f || strings.HasPrefix(e.Field, f+"[") || strings.HasPrefix(e.Field, f+"."))
		}) {
			t.Errorf("%s: field %s has no report entry", object, f)
		}
	}
}

func TestRoundTripBGPPeers(t *testing.T) {
	const path = "testdata/metallb/bgp-every-field.yaml"
	res := importFile(t, MetalLB, path)
	src := sourceObjects(t, path)
	profiles := map[string]*mooringv1.BFDProfile{}
	for _, p := range res.BGP.BFDProfiles {
		profiles[p.Metadata.Name] = strict[mooringv1.BFDProfile](t, p)
	}
	imported := map[string]BGPPeer{}
	for _, p := range res.BGP.Peers {
		imported[p.Metadata.Name] = p
	}
	for name, spec := range src["BGPPeer"] {
		obj := "metallb-system/" + name
		everyFieldReported(t, &res.Report, obj, spec)
		p, ok := imported[name]
		if !ok {
			if !explained(&res.Report, obj, "") {
				t.Errorf("%s not imported and not explained", obj)
			}
			continue
		}
		want, got := metallbPeerOracle(spec, src["BFDProfile"]), mooringPeer(t, p, profiles)
		for _, w := range want {
			i := slices.IndexFunc(got, func(g setting) bool { return g.key == w.key })
			g := "(absent)"
			if i >= 0 {
				g = got[i].value
			}
			if g != w.value && !explained(&res.Report, obj, w.field) {
				t.Errorf("%s: %s is %q in MetalLB, %q in Mooring, and the report does not name %s", obj, w.key, w.value, g, w.field)
			}
		}
	}
}

func TestRoundTripBFDAndCommunities(t *testing.T) {
	const path = "testdata/metallb/bgp-every-field.yaml"
	res := importFile(t, MetalLB, path)
	src := sourceObjects(t, path)
	for name, spec := range src["BFDProfile"] {
		everyFieldReported(t, &res.Report, "metallb-system/"+name, spec)
	}
	for _, p := range res.BGP.BFDProfiles {
		want := bfdOracle(p.Metadata.Name, src["BFDProfile"])
		got := mooringPeer(t, BGPPeer{Spec: BGPPeerSpec{MyASN: 1, PeerAddress: "10.0.0.1", BFDProfile: p.Metadata.Name}},
			map[string]*mooringv1.BFDProfile{p.Metadata.Name: strict[mooringv1.BFDProfile](t, p)})
		if g := got[len(got)-1].value; g != want {
			t.Errorf("BFDProfile %s: %s in MetalLB, %s in Mooring", p.Metadata.Name, want, g)
		}
	}
	values := map[string]string{}
	for _, c := range res.BGP.Communities {
		for _, a := range strict[mooringv1.BGPCommunity](t, c).Spec.Communities {
			values[a.Name] = a.Value
		}
	}
	for name, spec := range src["Community"] {
		everyFieldReported(t, &res.Report, "metallb-system/"+name, spec)
		for _, a := range spec["communities"].([]any) {
			m := a.(map[string]any)
			if values[m["name"].(string)] != m["value"].(string) {
				t.Errorf("community alias %v: Mooring has %q", m, values[m["name"].(string)])
			}
		}
	}
}

// metallbAdvOracle is what a MetalLB BGPAdvertisement selects and sends.
func metallbAdvOracle(spec map[string]any, src map[string]map[string]map[string]any) []setting {
	var s mlbBGPAdvSpec
	b, _ := json.Marshal(spec)
	_ = json.Unmarshal(b, &s)
	var pools []string
	for name, p := range src["IPAddressPool"] {
		var labels map[string]string
		if md, ok := p["_labels"].(map[string]string); ok {
			labels = md
		}
		all := len(s.IPAddressPools) == 0 && len(s.IPAddressPoolSelectors) == 0
		if all || slices.Contains(s.IPAddressPools, name) || poolSelected(s.IPAddressPoolSelectors, labels) {
			pools = append(pools, name)
		}
	}
	for _, n := range s.IPAddressPools {
		if src["IPAddressPool"][n] == nil {
			pools = append(pools, n) // named but absent: selects nothing, in both
		}
	}
	peers := s.Peers
	if len(peers) == 0 {
		for name := range src["BGPPeer"] {
			peers = append(peers, name)
		}
	}
	aliases := map[string]string{}
	for _, c := range src["Community"] {
		for _, a := range c["communities"].([]any) {
			m := a.(map[string]any)
			aliases[m["name"].(string)] = m["value"].(string)
		}
	}
	agg, agg6 := int32(32), int32(128)
	if s.AggregationLength != nil {
		agg = *s.AggregationLength
	}
	if s.AggregationLengthV6 != nil {
		agg6 = *s.AggregationLengthV6
	}
	lp := "none"
	if s.LocalPref != nil {
		lp = fmt.Sprint(*s.LocalPref)
	}
	return []setting{
		{"pools", "spec.ipAddressPools", sortedJoin(pools)}, {"peers", "spec.peers", sortedJoin(peers)},
		{"nodes", "spec.nodeSelectors", sels(s.NodeSelectors)}, {"services", "spec.serviceSelectors", sels(s.ServiceSelectors)},
		{"agg", "spec.aggregationLength", fmt.Sprint(agg)}, {"agg6", "spec.aggregationLengthV6", fmt.Sprint(agg6)},
		{"localPref", "spec.localPref", lp}, {"communities", "spec.communities", resolveAll(s.Communities, aliases)},
	}
}

// mooringAdv is an imported BGPAdvertisement with Mooring's defaults.
func mooringAdv(t *testing.T, a BGPAdvertisement, res *Result) []setting {
	s := strict[mooringv1.BGPAdvertisement](t, a).Spec
	var pools []string
	all := len(s.Pools) == 0 && len(s.PoolSelectors) == 0
	for _, p := range res.Pools {
		if all || slices.Contains(s.Pools, p.Metadata.Name) || poolSelected(s.PoolSelectors, p.Metadata.Labels) {
			pools = append(pools, p.Metadata.Name)
		}
	}
	for _, n := range s.Pools {
		if !slices.ContainsFunc(res.Pools, func(p Pool) bool { return p.Metadata.Name == n }) {
			pools = append(pools, n)
		}
	}
	peers := s.Peers
	if len(peers) == 0 {
		for _, p := range res.BGP.Peers {
			peers = append(peers, p.Metadata.Name)
		}
	}
	aliases := map[string]string{}
	for _, c := range res.BGP.Communities {
		for _, a := range c.Spec.Communities {
			aliases[a.Name] = a.Value
		}
	}
	agg, agg6 := int32(32), int32(128)
	if s.AggregationLength != nil {
		agg = *s.AggregationLength
	}
	if s.AggregationLengthV6 != nil {
		agg6 = *s.AggregationLengthV6
	}
	lp := "none"
	if s.LocalPref != nil {
		lp = fmt.Sprint(*s.LocalPref)
	}
	return []setting{
		{"pools", "", sortedJoin(pools)}, {"peers", "", sortedJoin(peers)},
		{"nodes", "", sels(s.NodeSelectors)}, {"services", "", sels(s.ServiceSelectors)},
		{"agg", "", fmt.Sprint(agg)}, {"agg6", "", fmt.Sprint(agg6)},
		{"localPref", "", lp}, {"communities", "", resolveAll(s.Communities, aliases)},
	}
}

func sortedJoin(xs []string) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), ",")
}

// resolveAll turns community values and alias names into values.
func resolveAll(cs []string, aliases map[string]string) string {
	var out []string
	for _, c := range cs {
		if v, ok := aliases[c]; ok {
			c = v
		}
		out = append(out, c)
	}
	return sortedJoin(out)
}

func TestRoundTripBGPAdvertisements(t *testing.T) {
	const path = "testdata/metallb/bgp-every-field.yaml"
	res := importFile(t, MetalLB, path)
	src := sourceObjects(t, path)
	labelled := map[string]map[string]string{"blue": {"color": "blue"}, "green": {"color": "green"}} // as the fixture
	for name, p := range src["IPAddressPool"] {
		p["_labels"] = labelled[name]
	}
	imported := map[string]BGPAdvertisement{}
	for _, a := range res.BGP.Advertisements {
		imported[a.Metadata.Name] = a
	}
	if len(imported) != len(src["BGPAdvertisement"]) {
		t.Fatalf("%d advertisements imported of %d", len(imported), len(src["BGPAdvertisement"]))
	}
	for name, spec := range src["BGPAdvertisement"] {
		obj := "metallb-system/" + name
		everyFieldReported(t, &res.Report, obj, spec)
		want, got := metallbAdvOracle(spec, src), mooringAdv(t, imported[name], res)
		for i, w := range want {
			if got[i].value != w.value && !explained(&res.Report, obj, w.field) {
				t.Errorf("%s: %s is %q in MetalLB, %q in Mooring, and the report does not name %s", obj, w.key, w.value, got[i].value, w.field)
			}
			if got[i].value != w.value {
				t.Logf("%s: %s differs, reported: %q vs %q", obj, w.key, w.value, got[i].value)
			}
		}
	}
}
