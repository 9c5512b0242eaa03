// Package importer turns another load balancer's configuration (MetalLB of
// every generation, Cilium LB-IPAM and L2 announcements) into Mooring
// objects, and says what it did with every field: mapped as is, mapped with
// a change of meaning (explained), or not mapped (explained, with what to do
// instead). Nothing is dropped silently.
//
// It is pure: documents (YAML or JSON bytes, each named by where it came
// from) go in, Mooring objects and a Report come out. It reads no files and
// talks to no API server; the CLI (internal/cli/importcmd) gathers the input
// from files or, read-only, from a cluster. It imports only the API types
// and apimachinery's label-selector type.
package importer
