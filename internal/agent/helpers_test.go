package agent

import "net/netip"

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }
