package bgpspeaker

import (
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// SetNow replaces the backend's clock (before Start).
func SetNow(g *GoBGP, now func() time.Time) { g.now = now }

// CountAdvertisedEvery is countAdvertisedEvery, for the tests.
const CountAdvertisedEvery = countAdvertisedEvery

// GlobalPaths counts the paths in g's global table of family f (the VPN
// families hold every VRF's routes).
func GlobalPaths(g *GoBGP, f bgp.Family) int {
	n := 0
	_ = g.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: f}, func(_ bgp.NLRI, ps []*apiutil.Path) {
		n += len(ps)
	})
	return n
}

// AdjInPaths counts what g keeps of the routes the router at addr sent
// (the session's Adj-RIB-In, both unicast families).
func AdjInPaths(g *GoBGP, addr string) int {
	n := 0
	for _, f := range []bgp.Family{bgp.RF_IPv4_UC, bgp.RF_IPv6_UC} {
		_ = g.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_ADJ_IN, Name: addr, Family: f}, func(_ bgp.NLRI, ps []*apiutil.Path) {
			n += len(ps)
		})
	}
	return n
}

// PrefixLimitBackoff is prefixLimitBackoff, for the tests.
func PrefixLimitBackoff(hits int) time.Duration { return prefixLimitBackoff(hits) }
