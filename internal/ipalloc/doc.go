// Package ipalloc is the generic, Kubernetes-free address arithmetic under
// Mooring's LB-IPAM: inclusive ranges of netip.Addr, set algebra on them, and
// a used-address set that finds the first free address of a range without
// ever materialising the range. Memory is proportional to the number of USED
// addresses, never to the size of a range, so an IPv6 /64 costs what a /30
// costs.
//
// It imports only the standard library and never reads the clock.
//
//mooring:pure
package ipalloc
