package lab

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/netlab"
)

// The BGP lab with Mooring's agents is TCP-MD5 unless told otherwise;
// with MetalLB (the migration's starting point) it is not.
func TestBGPPassword(t *testing.T) {
	on := BGPConfig{Enabled: true}
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"default", Config{Mooring: true, BGP: on}, DefaultBGPPassword},
		{"given", Config{Mooring: true, BGP: BGPConfig{Enabled: true, Password: "k3y"}}, "k3y"},
		{"none", Config{Mooring: true, BGP: BGPConfig{Enabled: true, NoPassword: true}}, ""},
		{"MetalLB", Config{Mooring: true, MetalLB: "/m", BGP: on}, ""},
		{"L2 lab", Config{Mooring: true}, ""},
	} {
		if got := tt.cfg.bgpPassword(); got != tt.want {
			t.Errorf("%s: password %q, want %q", tt.name, got, tt.want)
		}
	}
	for _, b := range []BGPConfig{
		{Password: "k3y"},
		{Enabled: true, Password: "k3y", NoPassword: true},
		{Enabled: true, Password: "two words"},
		{Enabled: true, Password: strings.Repeat("x", 81)},
	} {
		c := Config{Mooring: true, BGP: b}
		if err := c.validateBGP(); err == nil || !strings.Contains(err.Error(), "password") {
			t.Errorf("%+v: %v, want an error naming the password", b, err)
		}
	}
	for _, b := range []BGPConfig{{Enabled: true, Password: "k3y"}} {
		c := Config{Mooring: true, MetalLB: "/m", BGP: b}
		if err := c.validateBGP(); err == nil || !strings.Contains(err.Error(), "password") {
			t.Errorf("%+v: %v, want an error naming the password", b, err)
		}
	}
}

// The router requires the password from every node (configured
// neighbours) and from the listen range; the lab's BGPPeer names a Secret
// holding it, created before the peer.
func TestBGPPasswordObjects(t *testing.T) {
	router := netip.MustParseAddr("10.213.0.1")
	net := netlab.Config{Subnet4: netip.MustParsePrefix("10.213.0.0/24"), Subnet6: netip.MustParsePrefix("fd00:213::/64")}
	withPW := routerConfig(net, router, []netip.Addr{netip.MustParseAddr("10.213.0.11")}, false, "k3y")
	files, err := withPW.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{" neighbor dynamic password k3y\n", " neighbor 10.213.0.11 password k3y\n"} {
		if !strings.Contains(files["bgpd.conf"], want) {
			t.Errorf("bgpd.conf lacks %q:\n%s", want, files["bgpd.conf"])
		}
	}
	without := routerConfig(net, router, nil, false, "")
	if files, _ := without.Files(); strings.Contains(files["bgpd.conf"], "password") {
		t.Errorf("no password asked, bgpd.conf has one:\n%s", files["bgpd.conf"])
	}

	objs := mooringBGPObjects(labBGP{router: router, password: "k3y"})
	sec, ok := objs[0].obj.(*corev1.Secret)
	if !ok || sec.Namespace != mooringNamespace || sec.StringData[mooringv1.BGPPasswordSecretKey] != "k3y" {
		t.Fatalf("first object %+v, want the password's Secret in %s", objs[0].obj, mooringNamespace)
	}
	for _, o := range objs {
		if p, ok := o.obj.(*mooringv1.BGPPeer); ok && (p.Spec.PasswordSecret == nil || p.Spec.PasswordSecret.Name != sec.Name) {
			t.Errorf("the BGPPeer's passwordSecret is %+v, want %s", p.Spec.PasswordSecret, sec.Name)
		}
	}
	for _, o := range mooringBGPObjects(labBGP{router: router}) {
		if p, ok := o.obj.(*mooringv1.BGPPeer); ok && p.Spec.PasswordSecret != nil {
			t.Errorf("without a password the BGPPeer names Secret %s", p.Spec.PasswordSecret.Name)
		}
		if _, ok := o.obj.(*corev1.Secret); ok {
			t.Error("without a password the lab creates a Secret")
		}
	}
}
