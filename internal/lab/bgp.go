package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/frr"
	"github.com/mooringlb/mooring/internal/netlab"
)

// The BGP lab (`lab up --bgp`, docs/lab.md): the nodes' segment gets a
// namespace `router` at offset 1 running Debian's FRR (zebra, bgpd, bfdd;
// internal/frr) with a listen range over the segment, so every node may
// peer with it, and zebra installs each Service address as one ECMP route
// over the nodes that advertise it. The client is not on the segment: it
// sits behind the router on a link of its own (10.214.0.0/24,
// fd00:214::/64) and reaches Service addresses only through the router's
// routes. The nodes route the client's subnets back through the router, as
// nodes of a routed fabric do through their ToR.
const (
	// RouterHost names the router's namespace; RouterOffset is its address
	// on the segment (10.213.0.1, fd00:213::1).
	RouterHost   = "router"
	RouterOffset = 1
	// RouterASN is the router's AS; NodeASN the one the lab gives every
	// node's speaker (eBGP, one AS for the cluster, as MetalLB's and
	// Cilium's examples do).
	RouterASN = 64512
	NodeASN   = 64513
	// roleRouter is the router's HostState.Role.
	roleRouter = "router"
)

// The client's link behind the router.
var (
	ClientSubnet4 = netip.MustParsePrefix("10.214.0.0/24")
	ClientSubnet6 = netip.MustParsePrefix("fd00:214::/64")
)

// BGPConfig is the lab's BGP part; the zero value is the L2 lab.
type BGPConfig struct {
	// Enabled builds the router and puts the client behind it.
	Enabled bool
	// HoldTime is the hold time the nodes' speakers propose (0: the
	// speaker's own default, 90 s for MetalLB).
	HoldTime time.Duration
	// BFD runs BFD (BFDInterval × BFDMultiplier) between Mooring's
	// speakers and the router: the BGPPeer gets a BFDProfile, the
	// router's neighbours a BFD profile of the same timers. Ignored with
	// MetalLB, whose native speaker has no BFD.
	BFD bool
	// Password is the TCP-MD5 key (RFC 2385) of every session between
	// Mooring's speakers and the router ("": DefaultBGPPassword): the
	// router's neighbours and listen range get it, the lab a Secret
	// holding it and the BGPPeer names that Secret. NoPassword leaves
	// TCP-MD5 out. Not with MetalLB: its BGPPeer, the migration's input
	// (docs/migration.md), has none.
	Password   string
	NoPassword bool
}

// DefaultBGPPassword is the BGP lab's TCP-MD5 key: the lab shows the setup
// a fabric should run (docs/bgp.md, "In the lab"). It is no secret — the
// lab prints it in the router's configuration — only a key both sides
// must share.
const DefaultBGPPassword = "mooring-lab-md5"

// bgpPasswordSecret is the Secret (in Mooring's namespace, key
// mooringv1.BGPPasswordSecretKey) the lab's BGPPeer names.
const bgpPasswordSecret = RouterHost + "-bgp-password"

// The lab's BFD timers (docs/bgp.md): a dead node is detected after
// three missed packets, 0.9 s.
const (
	BFDInterval    = 300 * time.Millisecond
	BFDMultiplier  = 3
	bfdProfileName = "fast"
)

// bgpBFD reports whether the lab's speakers and router run BFD.
func (c *Config) bgpBFD() bool { return c.BGP.Enabled && c.BGP.BFD && c.MetalLB == "" }

// bgpPassword is the TCP-MD5 key of the lab's sessions, "" for none.
func (c *Config) bgpPassword() string {
	switch {
	case !c.BGP.Enabled || c.BGP.NoPassword || c.MetalLB != "":
		return ""
	case c.BGP.Password == "":
		return DefaultBGPPassword
	}
	return c.BGP.Password
}

// validateBGP checks the BGP settings against the rest of the lab.
func (c *Config) validateBGP() error {
	b := c.BGP
	switch {
	case !b.Enabled && b.HoldTime != 0:
		return errors.New("lab: --bgp-hold-time needs --bgp")
	case !b.Enabled && b.Password != "":
		return errors.New("lab: --bgp-password needs --bgp")
	case b.Password != "" && c.MetalLB != "":
		return errors.New("lab: --bgp-password with --metallb: the lab gives MetalLB's BGPPeer no password (it is the migration's input); leave it out")
	case b.Password != "" && b.NoPassword:
		return errors.New("lab: a BGP password and none at once")
	case len(b.Password) > 80 || strings.ContainsAny(b.Password, " \t\r\n"):
		// The kernel's TCP-MD5 key and FRR's configuration line.
		return errors.New("lab: --bgp-password: up to 80 characters without white space")
	case !b.Enabled:
		return nil
	case b.HoldTime != 0 && (b.HoldTime < 3*time.Second || b.HoldTime%time.Second != 0):
		return fmt.Errorf("lab: --bgp-hold-time %s: use whole seconds, 3s or more (RFC 4271)", b.HoldTime)
	case c.MetalLB == "" && !c.Mooring:
		return errors.New("lab: --bgp needs a BGP speaker: Mooring's agents (leave out --no-mooring) or --metallb")
	}
	return frr.Check()
}

// routerSysctls make the router forward, and spread connections over the
// ECMP next hops by their ports too (a fabric hashes the 5-tuple; the
// default hashes addresses only, which would send every connection of the
// one client to one node).
var routerSysctls = map[string]string{
	"net.ipv4.ip_forward":                "1",
	"net.ipv6.conf.all.forwarding":       "1",
	"net.ipv6.conf.default.forwarding":   "1",
	"net.ipv4.fib_multipath_hash_policy": "1",
	"net.ipv6.fib_multipath_hash_policy": "1",
}

// routerConfig is the lab router's FRR configuration: every node is a
// configured neighbour (eBGP), with BFD when bfd is set; a listen range
// over the segment takes any other speaker (without BFD). With a password
// both the neighbours and the listen range's peer group require TCP-MD5:
// the router's kernel then drops every unsigned SYN from the segment. The speakers'
// hold time wins (FRR proposes 180 s, the lower one is used), and up to
// 64 equal paths make one ECMP route. It sends its peers nothing
// (SendNone), as a ToR should towards Mooring's nodes (docs/bgp.md,
// "Configuring the router").
//
// Configured neighbours, not the listen range, carry BFD. Until session
// 23 they had to: FRR 8.4 re-creates a dynamic neighbour's BFD session (a
// new discriminator) about a second after every establishment, and
// GoBGP 4.8's BFD, which the agents used then, reset BGP for it. The
// agents' own BFD (internal/bfd) takes it, and TestBFDListenRange
// (internal/bgpspeaker) runs BFD over a listen range; the lab keeps the
// neighbours its series were measured with (docs/bgp.md, "BFD against
// FRR").
func routerConfig(net netlab.Config, router netip.Addr, nodes []netip.Addr, bfd bool, password string) frr.Config {
	c := frr.Config{
		Hostname: RouterHost, ASN: RouterASN, RouterID: router,
		ListenRanges: []netip.Prefix{net.Subnet4, net.Subnet6},
		Dynamic:      frr.Peer{RemoteAS: "external", Password: password, SendNone: true},
	}
	for _, a := range nodes {
		n := frr.Neighbor{Addr: a, Peer: frr.Peer{RemoteAS: "external", Password: password, SendNone: true}}
		if bfd {
			n.BFD = &frr.BFD{Interval: BFDInterval, Multiplier: BFDMultiplier}
		}
		c.Neighbors = append(c.Neighbors, n)
	}
	return c
}

// Mooring's BGP objects in the BGP lab: every node peers with the router
// (eBGP, IPv4 and IPv6 over the IPv4 session, the hold time of
// --bgp-hold-time, else Mooring's default, with --bgp-bfd the
// BFDProfile `fast`, BFDInterval × BFDMultiplier, and unless
// --bgp-password="" the TCP-MD5 password of a Secret), and the demo pool
// is advertised to it.
var (
	bgpPeerGVR    = mooringv1.GroupVersion.WithResource("bgppeers")
	bgpAdvGVR     = mooringv1.GroupVersion.WithResource("bgpadvertisements")
	bfdProfileGVR = mooringv1.GroupVersion.WithResource("bfdprofiles")
	secretGVR     = corev1.SchemeGroupVersion.WithResource("secrets")
)

// labBGP is what the lab's Mooring BGP objects are made of; the zero
// value (no router) is the L2 lab.
type labBGP struct {
	router   netip.Addr
	hold     time.Duration
	bfd      bool
	password string
}

// mooringBGPObjects are the BGPPeer (the router), the BGPAdvertisement
// (the demo pool), with bfd the BFDProfile and with a password its Secret
// (in Mooring's namespace, where the agents' --bgp-secret-namespace
// looks) of the BGP lab without MetalLB. What a peer names comes first.
func mooringBGPObjects(b labBGP) []labObject {
	router, hold, bfd := b.router, b.hold, b.bfd
	meta := func(kind, name string) (metav1.TypeMeta, metav1.ObjectMeta) {
		return metav1.TypeMeta{APIVersion: mooringv1.GroupVersion.String(), Kind: kind}, metav1.ObjectMeta{Name: name}
	}
	peer := &mooringv1.BGPPeer{Spec: mooringv1.BGPPeerSpec{
		MyASN: NodeASN, PeerASN: ptr.To[int64](RouterASN), PeerAddress: router.String(),
		AddressFamilies: []mooringv1.BGPAddressFamily{mooringv1.BGPFamilyIPv4, mooringv1.BGPFamilyIPv6}}}
	peer.TypeMeta, peer.ObjectMeta = meta("BGPPeer", RouterHost)
	if hold != 0 {
		peer.Spec.HoldTime = &metav1.Duration{Duration: hold}
	}
	adv := &mooringv1.BGPAdvertisement{Spec: mooringv1.BGPAdvertisementSpec{Pools: []string{demoName}}}
	adv.TypeMeta, adv.ObjectMeta = meta("BGPAdvertisement", demoName)
	objs := []labObject{{bgpPeerGVR, peer}, {bgpAdvGVR, adv}}
	if bfd {
		ms := int32(BFDInterval / time.Millisecond)
		prof := &mooringv1.BFDProfile{Spec: mooringv1.BFDProfileSpec{
			ReceiveInterval: ptr.To(ms), TransmitInterval: ptr.To(ms), DetectMultiplier: ptr.To[int32](BFDMultiplier)}}
		prof.TypeMeta, prof.ObjectMeta = meta("BFDProfile", bfdProfileName)
		peer.Spec.BFDProfile = bfdProfileName
		objs = append([]labObject{{bfdProfileGVR, prof}}, objs...)
	}
	if b.password != "" {
		sec := &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: bgpPasswordSecret, Namespace: mooringNamespace},
			StringData: map[string]string{mooringv1.BGPPasswordSecretKey: b.password},
		}
		peer.Spec.PasswordSecret = &mooringv1.SecretName{Name: bgpPasswordSecret}
		objs = append([]labObject{{secretGVR, sec}}, objs...)
	}
	return objs
}

// MetalLB's BGP kinds (native mode: IPv4 only, no BFD).
var (
	metallbBGPPeerGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta2", Resource: "bgppeers"}
	metallbBGPAdvGVR  = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "bgpadvertisements"}
)

// metallbGVR is the resource of a MetalLB object the lab creates.
func metallbGVR(kind string) schema.GroupVersionResource {
	switch kind {
	case "L2Advertisement":
		return metallbL2GVR
	case "BGPPeer":
		return metallbBGPPeerGVR
	case "BGPAdvertisement":
		return metallbBGPAdvGVR
	}
	return metallbPoolGVR
}

// metallbBGPConfig is MetalLB's configuration for the BGP lab: the pool's
// IPv4 range only (its native speaker refuses a pool with IPv6 that a
// BGPAdvertisement selects), one BGPPeer, the router, for every node,
// and a BGPAdvertisement of the pool.
func metallbBGPConfig(router netip.Addr, hold time.Duration) []*unstructured.Unstructured {
	pool := metallbConfig()[0]
	_ = unstructured.SetNestedStringSlice(pool.Object, []string{PoolRange4[0].String() + "-" + PoolRange4[1].String()}, "spec", "addresses")
	spec := map[string]any{"myASN": int64(NodeASN), "peerASN": int64(RouterASN), "peerAddress": router.String()}
	if hold != 0 {
		spec["holdTime"] = hold.String()
	}
	peer := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta2", "kind": "BGPPeer",
		"metadata": map[string]any{"name": RouterHost, "namespace": MetalLBNamespace},
		"spec":     spec,
	}}
	adv := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "BGPAdvertisement",
		"metadata": map[string]any{"name": MetalLBAdvertisement, "namespace": MetalLBNamespace},
		"spec":     map[string]any{"ipAddressPools": []any{MetalLBPool}},
	}}
	return []*unstructured.Unstructured{pool, peer, adv}
}

// RouterArgv returns argv to run in host hs: vtysh aimed at the router's
// daemons when hs is the router and argv runs vtysh without its own
// --vty_socket (the router's sockets are in a folder of the lab's, not in
// /run/frr), argv unchanged otherwise.
func RouterArgv(hs HostState, argv []string) []string {
	if hs.Role != roleRouter || hs.VtySocket == "" || len(argv) == 0 || filepath.Base(argv[0]) != "vtysh" ||
		slices.ContainsFunc(argv, func(a string) bool { return strings.HasPrefix(a, "--vty_socket") }) {
		return argv
	}
	return append([]string{argv[0], "--vty_socket", hs.VtySocket}, argv[1:]...)
}
