// Package ipamd is the node agent's pod address allocator: it hands out
// addresses from the blocks the controller gave the node, records every
// allocation in a file-locked, append-only journal on local disk (one line
// per change, compacted now and then) so that an agent restart loses and
// duplicates nothing, and serves the mooring-ipam CNI plugin over
// a unix socket (no API call per pod).
//
// A pod whose sandbox is replaced (a node reboot: DEL of the old sandbox,
// then ADD of a new one) gets back the addresses its old sandbox freed when
// they are still free (lastaddrs.go: an in-memory hint per pod, a
// preference, never a reservation); otherwise the lowest free address.
//
// Reconcile (reconcile.go) decides, from successful lists of the node's
// pods, which allocations lost their pod without a DEL (a runtime that
// forgot the sandbox); it frees nothing on doubt. The agent's adapter
// (internal/podipamctl) lists and calls Allocator.Release.
//
// The allocator reads every stored allocation before it serves (restart
// safety); blocks come from the caller (internal/podipamctl's node side) via
// SetPools, and Usage/MarkReleasing feed podipam.Demand. It imports nothing
// from k8s.io: the pool of a pod is resolved by an injected function.
package ipamd
