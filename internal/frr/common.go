package frr

import (
	"errors"
	"time"
)

// vtyshPath is where Debian's frr package puts vtysh.
const vtyshPath = "/usr/bin/vtysh"

// Sentinel errors.
var (
	// ErrNotInstalled is returned (wrapped, with the missing part) when
	// Debian's frr package is not installed.
	ErrNotInstalled = errors.New("frr: FRR is not installed: run `make deps` (Debian's frr package: zebra, bgpd, bfdd, vtysh)")
	// ErrUnsupported is returned by Start on systems other than Linux.
	ErrUnsupported = errors.New("frr: running FRR needs Linux network namespaces")
)

// How long the daemons get to come up, to stop after SIGTERM, and one
// vtysh call to answer.
const (
	startTimeout = 20 * time.Second
	stopTimeout  = 5 * time.Second
	vtyshTimeout = 10 * time.Second
	pollInterval = 20 * time.Millisecond
)

// daemons in start order; Stop ends them in reverse.
var daemons = []string{"zebra", "bfdd", "bgpd"}
