package bgpagent

import (
	"net/netip"
	"testing"

	"github.com/mooringlb/mooring/internal/announce"
)

// TestSetServicesShares: the backend keeps the pass's *announce.Service
// (the L2 state holds the same), not a copy of each — at 10,000 Services a
// copy was ~1.3 MB of live heap (docs/benchmarks.md) — and a changed
// Service replaces the pointer.
func TestSetServicesShares(t *testing.T) {
	b := &Backend{wake: make(chan struct{}, 1), services: map[announce.ServiceKey]*announce.Service{}}
	web := &announce.Service{Key: announce.ServiceKey{Namespace: "default", Name: "web"},
		IngressIPs: []netip.Addr{netip.MustParseAddr("192.0.2.10")}}
	db := &announce.Service{Key: announce.ServiceKey{Namespace: "default", Name: "db"},
		IngressIPs: []netip.Addr{netip.MustParseAddr("192.0.2.11")}}
	b.SetServices(true, []*announce.Service{web, db}, nil)
	if b.services[web.Key] != web || b.services[db.Key] != db {
		t.Fatalf("the backend copied the pass's Services: %p %p, want %p %p", b.services[web.Key], b.services[db.Key], web, db)
	}
	web2 := &announce.Service{Key: web.Key, IngressIPs: []netip.Addr{netip.MustParseAddr("192.0.2.12")}}
	b.SetServices(false, []*announce.Service{web2}, []announce.ServiceKey{db.Key})
	if b.services[web.Key] != web2 || len(b.services) != 1 {
		t.Fatalf("after a change and a delete: %v, want only web's new Service", b.services)
	}
	if web.IngressIPs[0] != netip.MustParseAddr("192.0.2.10") {
		t.Fatal("the Service the pass handed over before was modified")
	}
	in, _, err := (&Backend{cfg: Config{Node: "n1"}, services: b.services, fromFile: &state{}, d: Deps{Synced: func() bool { return false }}}).input(t.Context())
	if err != nil || len(in.Services) != 1 || in.Services[0] != web2 {
		t.Fatalf("the decision's input: %v %v, want web's new Service itself", in.Services, err)
	}
}
