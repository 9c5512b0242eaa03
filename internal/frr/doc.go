// Package frr runs Debian's FRR 8.4 routing daemons (zebra, bgpd, bfdd from
// the `frr` package) as a BGP router inside a network namespace that a test
// or the lab created (an internal/netlab Host), and reads the router's view
// back through vtysh's JSON output.
//
// It owns three things:
//
//   - the configuration (config.go): a typed Config — own ASN, listen ranges
//     with the settings of their dynamic peers, explicit neighbours, BFD,
//     graceful restart, ECMP (maximum-paths), originated prefixes — rendered
//     into zebra.conf, bgpd.conf and bfdd.conf. Rendering is pure and
//     validated so that no field can inject configuration lines;
//   - the daemons (frr_linux.go): Start runs the three daemons in the host's
//     namespace with every path (configs, pid files, vty sockets, the zserv
//     socket, the bfdd control socket, logs) inside one folder of its own, so
//     any number of routers run side by side and none touches /etc/frr or
//     /run/frr; Stop ends them and leaves nothing behind;
//   - the queries (query.go): the zebra RIB (what the kernel got, with every
//     ECMP next hop), the BGP RIB, neighbours with uptime and message
//     counters, and BFD peers, parsed from `vtysh -c '... json'` into netip
//     types.
//
// A router is a real FRR, never a stand-in: tests that need a BGP peer use
// it, and `mooring lab up --bgp` runs its `router` namespace with it.
//
// It may import internal/netlab and golang.org/x/sys; it must not import
// anything from k8s.io or sigs.k8s.io nor other Mooring packages. Linux
// only: elsewhere Start reports ErrUnsupported, while the configuration and
// parsing code builds and is tested everywhere.
package frr
