package lbipam

import (
	"math/big"
	"net/netip"
	"time"
)

// Family is an IP family.
type Family uint8

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// FamilyOf returns the family of a.
func FamilyOf(a netip.Addr) Family {
	if a.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

// Selector matches a set of labels; a nil Selector matches everything.
type Selector interface {
	Matches(labels map[string]string) bool
}

// Block is one inclusive range of addresses of a single family, as parsed
// from a CIDR or a start/stop pair by ParseCIDRBlock / ParseRangeBlock.
type Block struct {
	First, Last netip.Addr
	// FromCIDR says the block came from a CIDR, so its network and broadcast
	// addresses are skipped unless the pool allows them (and the prefix is
	// shorter than /31 or /127).
	FromCIDR bool
	Bits     int // prefix length when FromCIDR
	// Index is the block's position in the pool's spec.blocks, for messages.
	Index int
}

// Pool is one LoadBalancerIPPool as the core sees it.
type Pool struct {
	Name    string
	Created time.Time // older pools win overlaps and priority ties
	// Priority: lower first; nil after every pool with one (MetalLB's
	// serviceAllocation.priority).
	Priority          *int32
	Blocks            []Block
	Disabled          bool
	AllowFirstLastIPs bool
	// ManualOnly is autoAssign: false: the pool serves only Services that
	// request one of its addresses or name it.
	ManualOnly bool
	// AvoidBuggyIPs skips IPv4 addresses ending in .0 or .255.
	AvoidBuggyIPs     bool
	ServiceSelector   Selector // nil: every Service
	NamespaceSelector Selector // nil: every namespace
	Namespaces        []string // empty: every namespace
	// Terms, when not empty, also require the Service to match at least
	// one term (MetalLB's serviceAllocation: namespaces listed OR
	// selected, AND any service selector, written as an OR of ANDs).
	Terms []Term
}

// Term is one way a Service may match a pool: every field that is set
// must match (nil or empty: any).
type Term struct {
	ServiceSelector   Selector
	NamespaceSelector Selector
	Namespaces        []string
}

// ServiceKey names a Service.
type ServiceKey struct{ Namespace, Name string }

func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

// Port is one port a Service exposes, for sharing checks.
type Port struct {
	Protocol string // "TCP", "UDP", "SCTP"
	Port     int32
}

// Service is one LoadBalancer Service as the core sees it.
type Service struct {
	Key             ServiceKey
	Labels          map[string]string // the Service's own labels
	NamespaceLabels map[string]string

	// Families the Service asks for, in order (spec.ipFamilies), and whether
	// every one is required (RequireDualStack, SingleStack) or the rest are
	// best effort (PreferDualStack: first family required).
	Families           []Family
	RequireAllFamilies bool

	// Requested addresses (mooring.dev/ips or spec.loadBalancerIP), at most
	// one per family; Pools restricts the choice to pools by name.
	Requested []netip.Addr
	Pools     []string

	// SharingKey lets Services hold one address when their ports do not
	// collide and their SharingBackend is equal. SharingNamespaces lists the
	// other namespaces whose Services may share with this one ("*": any);
	// both sides must list each other's namespace.
	SharingKey        string
	SharingNamespaces []string
	// SharingBackend must be equal between sharers: "" for
	// externalTrafficPolicy Cluster, else the pod selector (MetalLB's and
	// Cilium's rule: eTP Local Services share only with the same endpoints).
	SharingBackend string
	Ports          []Port

	// Held are the addresses the Service holds now (status.loadBalancer.ingress),
	// whoever wrote them. The core never changes or drops a held address
	// while the Service still asks for its family and does not request a
	// different one.
	Held []netip.Addr
}

// Reason says why an address is pending or why a held one deserves a warning.
type Reason string

const (
	ReasonNoPoolMatches        Reason = "NoPoolMatches"
	ReasonPoolNotFound         Reason = "PoolNotFound"
	ReasonPoolExhausted        Reason = "PoolExhausted"
	ReasonRequestedOutside     Reason = "RequestedOutsidePools"
	ReasonRequestedInUse       Reason = "RequestedInUse"
	ReasonRequestedDisabled    Reason = "RequestedInDisabledPool"
	ReasonRequestedConflicting Reason = "RequestedInConflictingPool"
	ReasonRequestedNotAllowed  Reason = "RequestedNotAllowedByPool" // selector or first/last rule excludes it
	ReasonSharingConflict      Reason = "SharingConflict"
	ReasonFamilyUnavailable    Reason = "FamilyUnavailable"
	ReasonInvalidRequest       Reason = "InvalidRequest" // e.g. two requested addresses of one family; nothing new is assigned
	ReasonHeldOutsidePools     Reason = "HeldOutsidePools"
	ReasonHeldDuplicate        Reason = "HeldDuplicate" // held by another Service too (imported that way)
)

// Problem is one reason with a message an operator can act on: it names the
// Service, pool or address involved and the fix.
type Problem struct {
	Family  Family
	Reason  Reason
	Message string
}

// Result is what a Service should hold and why anything is missing.
type Result struct {
	// Addrs is the full set the Service should hold, held addresses first,
	// in the order of Service.Families.
	Addrs []netip.Addr
	// Pending lists each family that has no address, with its reason. A
	// family can be Pending AND have an address: the Service requested a
	// different address that cannot be taken yet; it keeps the old one until
	// the requested one frees up. Requests that make no sense (two addresses
	// of one family, a family not in Families) are Pending as InvalidRequest.
	Pending []Problem
	// Warnings are about addresses the Service keeps (outside every pool,
	// duplicated by an import). They never remove an address.
	Warnings []Problem
	// Pools names the pool of each entry of Addrs ("" when outside every pool).
	Pools []string
}

// Usage counts a pool's addresses of one family.
type Usage struct{ Total, Used, Free *big.Int }

// PoolReport is the status the core computes for one pool.
type PoolReport struct {
	Name string
	// ConflictsWith names older pools that overlap this one. A conflicting
	// pool hands out nothing from the overlap.
	ConflictsWith []string
	// Invalid lists problems the API's admission could not catch (e.g. an
	// IPv6 range whose start is after its stop, or blocks of one pool that
	// overlap each other).
	Invalid    []string
	IPv4, IPv6 Usage
}
