package bgpspeaker

import "time"

// SetNow replaces the backend's clock (before Start).
func SetNow(g *GoBGP, now func() time.Time) { g.now = now }

// CountAdvertisedEvery is countAdvertisedEvery, for the tests.
const CountAdvertisedEvery = countAdvertisedEvery
