//go:build !linux

// Command mooring-ipam is Mooring's CNI IPAM plugin; it runs on Linux only
// (the CNI library's skel needs its Linux network namespaces).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "mooring-ipam: the CNI plugin runs on Linux only")
	os.Exit(1)
}
