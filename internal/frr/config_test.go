package frr

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func validConfig() Config {
	return Config{
		Hostname: "router", ASN: 64500, RouterID: netip.MustParseAddr("10.213.0.1"),
		ListenRanges: []netip.Prefix{netip.MustParsePrefix("10.213.0.0/24"), netip.MustParsePrefix("fd00:213::/64")},
		Dynamic: Peer{RemoteAS: "external", Password: "s3cret", Keepalive: time.Second, Hold: 3 * time.Second,
			BFD: &BFD{Interval: 300 * time.Millisecond, Multiplier: 3}, SendNone: true},
		Neighbors: []Neighbor{{Addr: netip.MustParseAddr("10.214.0.2"), Peer: Peer{RemoteAS: "64512", Multihop: 2,
			Port: 1790, ConnectRetry: 5 * time.Second, IPv4Only: true, SendNone: true,
			BFD: &BFD{Interval: 300 * time.Millisecond, Multiplier: 3}}},
			{Addr: netip.MustParseAddr("10.214.0.3"), Peer: Peer{RemoteAS: "internal", Passive: true,
				BFD: &BFD{Interval: 50 * time.Millisecond, Multiplier: 5, Passive: true}}}},
		MaximumPaths: 8, GracefulRestart: GRFull, StalePathTime: 30 * time.Second,
		Originate: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")},
		Extra:     []string{"bgp log-neighbor-changes"},
	}
}

func TestFilesRendersEverySetting(t *testing.T) {
	cfg := validConfig()
	files, err := cfg.Files()
	if err != nil {
		t.Fatal(err)
	}
	bgpd := files["bgpd.conf"]
	for _, want := range []string{
		"hostname router\nroute-map send-none deny 10\nexit\nrouter bgp 64500\n bgp router-id 10.213.0.1\n no bgp ebgp-requires-policy\n",
		" bgp bestpath as-path multipath-relax\n",
		" bgp graceful-restart\n bgp graceful-restart stalepath-time 30\n",
		" neighbor dynamic peer-group\n neighbor dynamic remote-as external\n neighbor dynamic password s3cret\n" +
			" neighbor dynamic timers 1 3\n neighbor dynamic bfd profile t300x3\n",
		" bgp listen range 10.213.0.0/24 peer-group dynamic\n bgp listen range fd00:213::/64 peer-group dynamic\n",
		" neighbor 10.214.0.2 remote-as 64512\n neighbor 10.214.0.2 port 1790\n neighbor 10.214.0.2 timers connect 5\n" +
			" neighbor 10.214.0.2 ebgp-multihop 2\n neighbor 10.214.0.2 bfd profile t300x3\n",
		" address-family ipv4 unicast\n  maximum-paths 8\n  maximum-paths ibgp 8\n  network 0.0.0.0/0\n" +
			"  neighbor dynamic route-map send-none out\n  neighbor 10.214.0.2 route-map send-none out\n exit-address-family\n",
		" address-family ipv6 unicast\n  maximum-paths 8\n  maximum-paths ibgp 8\n  network ::/0\n  neighbor dynamic activate\n" +
			"  neighbor 10.214.0.3 activate\n  neighbor dynamic route-map send-none out\n exit-address-family\n",
		" bgp log-neighbor-changes\nexit\n",
	} {
		if !strings.Contains(bgpd, want) {
			t.Errorf("bgpd.conf lacks\n%s\n--- bgpd.conf:\n%s", want, bgpd)
		}
	}
	if strings.Contains(bgpd, "neighbor 10.214.0.2 activate") {
		t.Error("an IPv4-only neighbour was activated for IPv6")
	}
	if !strings.Contains(bgpd, " neighbor 10.214.0.3 remote-as internal\n neighbor 10.214.0.3 passive\n neighbor 10.214.0.3 bfd profile t50x5p\n") {
		t.Errorf("bgpd.conf lacks the passive neighbour:\n%s", bgpd)
	}
	// One profile for the two equal BFD settings, one for the passive one.
	if bfdd := files["bfdd.conf"]; strings.Count(bfdd, "profile ") != 2 ||
		!strings.Contains(bfdd, " profile t300x3\n  detect-multiplier 3\n  receive-interval 300\n  transmit-interval 300\n exit\n") ||
		!strings.Contains(bfdd, " profile t50x5p\n  detect-multiplier 5\n  receive-interval 50\n  transmit-interval 50\n  passive-mode\n exit\n") {
		t.Errorf("bfdd.conf:\n%s", bfdd)
	}
	if z := files["zebra.conf"]; !strings.Contains(z, "ip forwarding\nipv6 forwarding\n") {
		t.Errorf("zebra.conf does not forward:\n%s", z)
	}
}

func TestFilesDefaults(t *testing.T) {
	cfg := Config{ASN: 64500, RouterID: netip.MustParseAddr("10.0.0.1")}
	files, err := cfg.Files()
	if err != nil {
		t.Fatal(err)
	}
	bgpd := files["bgpd.conf"]
	if !strings.HasPrefix(bgpd, "hostname frr\n") || !strings.Contains(bgpd, "  maximum-paths 64\n") ||
		strings.Contains(bgpd, "graceful-restart") || strings.Contains(bgpd, "peer-group") || strings.Contains(bgpd, "route-map") {
		t.Errorf("defaults:\n%s", bgpd)
	}
	cfg.GracefulRestart = GRDisabled
	files, _ = cfg.Files()
	if !strings.Contains(files["bgpd.conf"], " bgp graceful-restart-disable\n") {
		t.Errorf("GRDisabled:\n%s", files["bgpd.conf"])
	}
}

func TestValidateNamesEveryBadField(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"no ASN":           {func(c *Config) { c.ASN = 0 }, "ASN 0"},
		"IPv6 router ID":   {func(c *Config) { c.RouterID = netip.MustParseAddr("fd00::1") }, "router ID"},
		"hostname":         {func(c *Config) { c.Hostname = "a b" }, "hostname"},
		"unmasked range":   {func(c *Config) { c.ListenRanges[0] = netip.MustParsePrefix("10.213.0.5/24") }, "listen range"},
		"remote AS":        {func(c *Config) { c.Dynamic.RemoteAS = "any" }, "remote AS"},
		"empty remote AS":  {func(c *Config) { c.Neighbors[0].RemoteAS = "" }, "neighbor 10.214.0.2: remote AS"},
		"password newline": {func(c *Config) { c.Dynamic.Password = "a\n neighbor x" }, "password"},
		"BFD interval":     {func(c *Config) { c.Dynamic.BFD = &BFD{Interval: 5 * time.Millisecond, Multiplier: 3} }, "BFD"},
		"BFD multiplier":   {func(c *Config) { c.Dynamic.BFD = &BFD{Interval: 300 * time.Millisecond, Multiplier: 1} }, "BFD"},
		"hold only":        {func(c *Config) { c.Dynamic.Keepalive = 0 }, "timers"},
		"hold below 3s":    {func(c *Config) { c.Dynamic.Hold = 2 * time.Second }, "timers"},
		"fractional hold":  {func(c *Config) { c.Dynamic.Hold = 3500 * time.Millisecond }, "timers"},
		"repeated peer":    {func(c *Config) { c.Neighbors = append(c.Neighbors, c.Neighbors[0]) }, "repeated"},
		"bad originate":    {func(c *Config) { c.Originate[0] = netip.MustParsePrefix("10.0.0.1/8") }, "originated"},
		"extra newline":    {func(c *Config) { c.Extra = []string{"a\nb"} }, "extra line"},
		"maximum-paths":    {func(c *Config) { c.MaximumPaths = 300 }, "maximum-paths"},
		"stale path time":  {func(c *Config) { c.StalePathTime = 1500 * time.Millisecond }, "stale path"},
	} {
		cfg := validConfig()
		cfg.Neighbors = append([]Neighbor(nil), cfg.Neighbors...)
		tc.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error naming %q", name, err, tc.want)
		}
		if _, ferr := cfg.Files(); ferr == nil {
			t.Errorf("%s: Files rendered an invalid config", name)
		}
	}
	cfg := validConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
}
