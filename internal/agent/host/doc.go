// Package host is the agent's view of its own node: the interfaces, their
// addresses and prefixes and their changes (netlink), the arp_ignore
// sysctls (/proc/sys), the split-brain probe and the kernel check (one
// ARP request or neighbour solicitation over AF_PACKET, internal/arpprobe)
// that tells a dead node from a stalled agent. Each is a small type the
// agent's rooms see through an interface of their own, so they test
// without privileges.
//
// Linux-only code sits in _linux.go files with a stub beside it. It may
// import netlink, golang.org/x/sys, internal/arpprobe, internal/announce
// and internal/membership (for the NodeCheck type); nothing of the
// Kubernetes API.
package host
