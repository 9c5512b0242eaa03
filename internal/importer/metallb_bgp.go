package importer

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MetalLB's BGP kinds (metallb.io BGPPeer v1beta1/v1beta2,
// BGPAdvertisement, Community, BFDProfile) into Mooring's BGPPeer,
// BGPAdvertisement, BGPCommunity and BFDProfile. Where MetalLB's default
// differs from Mooring's (hold time, graceful restart), the MetalLB value
// is written out, so the imported objects behave as MetalLB did, and the
// report says how to take Mooring's default instead.

type mlbBGPPeerSpec struct {
	MyASN          int64                  `json:"myASN"`
	PeerASN        int64                  `json:"peerASN"`
	LocalASN       int64                  `json:"localASN"`
	DynamicASN     string                 `json:"dynamicASN"`
	PeerAddress    string                 `json:"peerAddress"`
	Interface      string                 `json:"interface"`
	SourceAddress  string                 `json:"sourceAddress"`
	PeerPort       int32                  `json:"peerPort"`
	HoldTime       *metav1.Duration       `json:"holdTime"`
	KeepaliveTime  *metav1.Duration       `json:"keepaliveTime"`
	ConnectTime    *metav1.Duration       `json:"connectTime"`
	RouterID       string                 `json:"routerID"`
	NodeSelectors  []metav1.LabelSelector `json:"nodeSelectors"`
	Password       string                 `json:"password"`
	PasswordSecret *struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"passwordSecret"`
	BFDProfile             string `json:"bfdProfile"`
	EnableGracefulRestart  bool   `json:"enableGracefulRestart"`
	EBGPMultiHop           bool   `json:"ebgpMultiHop"`
	VRF                    string `json:"vrf"`
	DisableMP              bool   `json:"disableMP"`
	DualStackAddressFamily bool   `json:"dualStackAddressFamily"`
}

type mlbBGPAdvSpec struct {
	AggregationLength      *int32                 `json:"aggregationLength"`
	AggregationLengthV6    *int32                 `json:"aggregationLengthV6"`
	LocalPref              *int64                 `json:"localPref"`
	Communities            []string               `json:"communities"`
	IPAddressPools         []string               `json:"ipAddressPools"`
	IPAddressPoolSelectors []metav1.LabelSelector `json:"ipAddressPoolSelectors"`
	NodeSelectors          []metav1.LabelSelector `json:"nodeSelectors"`
	Peers                  []string               `json:"peers"`
	ServiceSelectors       []metav1.LabelSelector `json:"serviceSelectors"`
}

type mlbBFDSpec struct {
	ReceiveInterval  *int32 `json:"receiveInterval"`
	TransmitInterval *int32 `json:"transmitInterval"`
	DetectMultiplier *int32 `json:"detectMultiplier"`
	EchoInterval     *int32 `json:"echoInterval"`
	EchoMode         *bool  `json:"echoMode"`
	PassiveMode      *bool  `json:"passiveMode"`
	MinimumTTL       *int32 `json:"minimumTtl"`
}

var mlbBGPPeerFields = fields{
	"myASN": leaf, "peerASN": leaf, "localASN": leaf, "dynamicASN": leaf, "peerAddress": leaf, "interface": leaf,
	"sourceAddress": leaf, "peerPort": leaf, "holdTime": leaf, "keepaliveTime": leaf, "connectTime": leaf,
	"routerID": leaf, "nodeSelectors": selectorFields, "password": leaf, "passwordSecret": leaf, "bfdProfile": leaf,
	"enableGracefulRestart": leaf, "ebgpMultiHop": leaf, "vrf": leaf, "disableMP": leaf, "dualStackAddressFamily": leaf,
}

var mlbBGPAdvFields = fields{
	"aggregationLength": leaf, "aggregationLengthV6": leaf, "localPref": leaf, "communities": leaf,
	"ipAddressPools": leaf, "ipAddressPoolSelectors": selectorFields, "nodeSelectors": selectorFields,
	"peers": leaf, "serviceSelectors": selectorFields,
}

var mlbBFDFields = fields{
	"receiveInterval": leaf, "transmitInterval": leaf, "detectMultiplier": leaf, "echoInterval": leaf,
	"echoMode": leaf, "passiveMode": leaf, "minimumTtl": leaf,
}

var mlbCommunityFields = fields{"communities": leaf}

// bgpState is the BGP part of a MetalLB import.
type bgpState struct {
	bgpIn      []mlbBGPIn
	bgpNames   map[string]map[string]string // kind -> Mooring name -> source ref
	bgpRenamed map[string]string            // kind/source name -> Mooring name
	aliases    map[string]bool              // community alias names imported
	// skippedPeers are the BGPPeers not imported (unnumbered).
	skippedPeers []string
}

// mlbBGPIn is one MetalLB BGP object waiting for the pools to be named.
type mlbBGPIn struct {
	rec recorder
	o   *object
}

// MetalLB's native speaker's hold time when a BGPPeer sets none.
const metallbHoldTime = 90 * time.Second

// bgpObject queues a MetalLB BGP object; bgp maps them after the pools.
func (m *metallbImporter) bgpObject(o *object, rec recorder) {
	m.bgpIn = append(m.bgpIn, mlbBGPIn{rec: rec, o: o})
}

// bgp maps the queued BGP objects: BFD profiles and communities first (peers
// and advertisements name them), then peers, then advertisements.
func (m *metallbImporter) bgp() error {
	m.bgpNames, m.bgpRenamed, m.aliases = map[string]map[string]string{}, map[string]string{}, map[string]bool{}
	for _, kind := range []string{"BFDProfile", "Community", "BGPPeer", "BGPAdvertisement"} {
		for _, in := range m.bgpIn {
			if in.o.kind != kind {
				continue
			}
			var err error
			switch kind {
			case "BFDProfile":
				err = m.bfdProfile(in)
			case "Community":
				err = m.community(in)
			case "BGPPeer":
				err = m.bgpPeer(in)
			case "BGPAdvertisement":
				err = m.bgpAdvertisement(in)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// claimBGPName gives an object a unique cluster-wide name among its kind
// (MetalLB's are namespaced) and remembers the source name's new one.
func (m *metallbImporter) claimBGPName(rec recorder, kind, want string) string {
	names := m.bgpNames[kind]
	if names == nil {
		names = map[string]string{}
		m.bgpNames[kind] = names
	}
	name := want
	for i := 2; names[name] != ""; i++ {
		name = fmt.Sprintf("%s-%d", want, i)
	}
	if name != want {
		rec.changed("metadata.name", kind+" "+name, "%q is already taken by %s (Mooring's %s objects are cluster-wide): renamed", want, names[want], kind)
	}
	names[name] = rec.obj
	m.bgpRenamed[kind+"/"+want] = name
	return name
}

// importedName is the Mooring name of the source object of kind named
// name, or "" when none was imported.
func (m *metallbImporter) importedName(kind, name string) string {
	return m.bgpRenamed[kind+"/"+name]
}

func (m *metallbImporter) bfdProfile(in mlbBGPIn) error {
	var src struct{ Spec mlbBFDSpec }
	if err := in.o.decodeInto(&src); err != nil {
		return err
	}
	reportUnknown(in.rec, in.o, mlbBFDFields)
	rec, s := in.rec, src.Spec
	name := m.claimBGPName(rec, "BFDProfile", in.o.name)
	target := "BFDProfile " + name
	rec.mapped("", target, "MetalLB's defaults (300 ms, 300 ms, 3) are Mooring's")
	p := BFDProfile{APIVersion: APIVersion, Kind: "BFDProfile", Metadata: newMeta(name, m.from(rec))}
	for _, f := range []struct {
		key      string
		src      *int32
		dst      **int32
		min, max int32
	}{
		{"receiveInterval", s.ReceiveInterval, &p.Spec.ReceiveInterval, 10, 60000},
		{"transmitInterval", s.TransmitInterval, &p.Spec.TransmitInterval, 10, 60000},
		{"detectMultiplier", s.DetectMultiplier, &p.Spec.DetectMultiplier, 2, 255},
	} {
		if f.src == nil {
			continue
		}
		if *f.src < f.min || *f.src > f.max {
			return in.o.errorf("spec."+f.key, "%d is out of range %d-%d", *f.src, f.min, f.max)
		}
		*f.dst = ptr(*f.src)
		rec.mapped("spec."+f.key, target+" spec."+f.key, "")
	}
	if s.EchoMode != nil && *s.EchoMode {
		rec.notMapped("spec.echoMode", "Mooring's BFD is asynchronous only: no echo packets; detection relies on the control packets at the profile's intervals")
	} else if s.EchoMode != nil {
		rec.mapped("spec.echoMode", target, "false: Mooring sends no echo packets either")
	}
	if s.EchoInterval != nil {
		rec.notMapped("spec.echoInterval", "no echo mode in Mooring, so no echo interval")
	}
	if s.PassiveMode != nil && *s.PassiveMode {
		rec.notMapped("spec.passiveMode", "Mooring's BFD always sends control packets (active): the router's passive or active setting is unaffected")
	} else if s.PassiveMode != nil {
		rec.mapped("spec.passiveMode", target, "false: Mooring's BFD is active too")
	}
	if s.MinimumTTL != nil {
		rec.notMapped("spec.minimumTtl", "Mooring's BFD is single-hop: packets must arrive with TTL 255 (RFC 5881), so a minimum TTL does not apply")
	}
	m.res.BGP.BFDProfiles = append(m.res.BGP.BFDProfiles, p)
	return nil
}

// communityName is the pattern of a Mooring community alias name.
var communityName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

func (m *metallbImporter) community(in mlbBGPIn) error {
	var src struct {
		Spec struct {
			Communities []struct {
				Name  string `json:"name"`
				Value string `json:"value"`
			} `json:"communities"`
		}
	}
	if err := in.o.decodeInto(&src); err != nil {
		return err
	}
	reportUnknown(in.rec, in.o, mlbCommunityFields)
	rec := in.rec
	name := m.claimBGPName(rec, "BGPCommunity", in.o.name)
	c := BGPCommunity{APIVersion: APIVersion, Kind: "BGPCommunity", Metadata: newMeta(name, m.from(rec))}
	rec.mapped("", "BGPCommunity "+name, "")
	for i, a := range src.Spec.Communities {
		field := fmt.Sprintf("spec.communities[%d]", i)
		if !communityName.MatchString(a.Name) || len(a.Name) > 63 {
			return in.o.errorf(field+".name", "%q: a Mooring alias name is lower-case letters, digits, '-' and '.' (at most 63); rename it in MetalLB's Community and its uses first", a.Name)
		}
		if _, err := parseMLBCommunity(a.Value); err != nil {
			return in.o.errorf(field+".value", "%v", err)
		}
		c.Spec.Communities = append(c.Spec.Communities, CommunityAlias{Name: a.Name, Value: a.Value})
		rec.mapped(field, fmt.Sprintf("BGPCommunity %s spec.communities[%d]", name, i), "")
		m.aliases[a.Name] = true
	}
	m.res.BGP.Communities = append(m.res.BGP.Communities, c)
	return nil
}

// parseMLBCommunity checks a community value as MetalLB writes it:
// "65000:100" or "large:65000:1:2".
func parseMLBCommunity(v string) (string, error) {
	parts := strings.Split(v, ":")
	switch {
	case len(parts) == 2 && isUint(parts[0], 16) && isUint(parts[1], 16):
		return "standard", nil
	case len(parts) == 4 && parts[0] == "large" && isUint(parts[1], 32) && isUint(parts[2], 32) && isUint(parts[3], 32):
		return "large", nil
	}
	return "", fmt.Errorf("community %q: want 65000:100 or large:65000:1:2", v)
}

func isUint(s string, bits int) bool {
	if s == "" || len(s) > 10 {
		return false
	}
	var n uint64
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
		n = n*10 + uint64(r-'0')
	}
	return n < 1<<bits
}

// seconds writes a whole-second duration as Kubernetes users do: "90s".
func seconds(d time.Duration) string { return fmt.Sprintf("%ds", int64(d/time.Second)) }

// from is the imported-from annotation of an object.
func (m *metallbImporter) from(rec recorder) string {
	return fmt.Sprintf("metallb %s %s (%s)", rec.kind, rec.obj, rec.src.file)
}

// validAddr reports whether s is one IP address.
func validAddr(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// selectorsOrNil copies selectors, nil for none.
func selectorsOrNil(in []metav1.LabelSelector) []metav1.LabelSelector {
	if len(in) == 0 {
		return nil
	}
	out := make([]metav1.LabelSelector, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}
