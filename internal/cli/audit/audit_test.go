package audit

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/netlab"
)

func TestVerdictAndPrint(t *testing.T) {
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	rs := []Result{
		{Addr: netip.MustParseAddr("10.0.0.1")},
		{Addr: netip.MustParseAddr("10.0.0.2"), Responders: []net.HardwareAddr{mac("02:00:00:00:00:01")}},
		{Addr: netip.MustParseAddr("10.0.0.3"), Responders: []net.HardwareAddr{mac("02:00:00:00:00:01"), mac("02:00:00:00:00:02")}},
	}
	var b bytes.Buffer
	if err := Print(&b, rs, nil); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	b.Reset()
	if err := Print(&b, rs[2:], map[string]string{"02:00:00:00:00:01": "node-1", "02:00:00:00:00:02": "node-2"}); err != nil {
		t.Fatal(err)
	}
	if named := b.String(); !strings.Contains(named, "02:00:00:00:00:01 (node-1),02:00:00:00:00:02 (node-2)") || !strings.Contains(named, "on node-1 and node-2, look") {
		t.Errorf("named output:\n%s", named)
	}
	for _, want := range []string{"nobody answers", " ok", "SPLIT: 2 responders", "02:00:00:00:00:01,02:00:00:00:00:02", "arp_ignore"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := parseAddrs([]string{"nope"}); err == nil || !strings.Contains(err.Error(), "such as") {
		t.Errorf("bad address error should name the fix, got %v", err)
	}
}

// TestAuditFindsStaleCopy reproduces the field notes' trap in namespaces: a
// node whose lo holds the address with arp_ignore=0 answers ARP by itself,
// and the audit reports two responders until arp_ignore=1.
func TestAuditFindsStaleCopy(t *testing.T) {
	lab := netlab.NewForTest(t, netlab.Config{Nodes: 2})
	vip := netip.MustParseAddr("10.213.0.150")
	for _, n := range lab.Nodes() {
		if err := n.AddAddr("lo", netip.PrefixFrom(vip, 32)); err != nil {
			t.Fatal(err)
		}
	}
	client := lab.Client()
	ifi, err := client.Interface()
	if err != nil {
		t.Fatal(err)
	}
	probe := func() Result {
		var r Result
		err := client.Do(func() error {
			var err error
			r, err = ProbeOne(context.Background(), ifi, map[bool]netip.Addr{false: client.Addr4}, vip, 500*time.Millisecond)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := probe(); len(r.Responders) != 2 || !strings.HasPrefix(r.Verdict(), "SPLIT") {
		t.Fatalf("want a split with 2 responders, got %d: %s", len(r.Responders), r.Verdict())
	}
	for _, n := range lab.Nodes() {
		if err := n.Sysctl("net.ipv4.conf.all.arp_ignore", "1"); err != nil {
			t.Fatal(err)
		}
	}
	if r := probe(); len(r.Responders) != 0 {
		t.Fatalf("with arp_ignore=1 everywhere nobody should answer, got %d", len(r.Responders))
	}
}
