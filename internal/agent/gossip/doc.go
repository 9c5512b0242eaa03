// Package gossip is the agent's side of membership (internal/membership):
// the partition rule (FailSafe: a side that cannot prove it is the
// majority takes the nodes it lost as the members, so it owns nothing and
// computes the majority's owners), the deferrals peers publish in their
// L2Announcers and the release of held nodes that defer (RunReleases),
// and the peers gossip joins, taken from the Nodes (SetPeers). How fast
// each case converges is in partition.go.
//
// It may import client-go's cache (the L2Announcer handler), the API
// types, internal/agent/convert and internal/membership.
package gossip
