// Package netlab builds throw-away layer-2 labs out of Linux network
// namespaces: one bridge, N "node" hosts and one "client" host, each host
// joined to the bridge by a veth pair whose inside end is eth0. Every L2 test
// and the one-machine lab (internal/lab) stand on it.
//
// Why it looks the way it does (see /work/shared/LAB-NOTES.md):
//
//   - Namespaces are unnamed and held only as file descriptors and by the
//     threads inside them, so a crashed test binary leaks nothing: the
//     namespaces die with their last reference.
//   - Each namespace has one long-lived worker goroutine locked to an OS thread
//     that unshare()d into it and never leaves. Everything that depends on the
//     calling thread's namespace (opening sockets, /proc/sys/net, forking
//     children whose Pdeathsig is tied to the forking thread) runs there via
//     Host.Do. Links and addresses are configured through netlink handles bound
//     to the namespace, which needs no thread of its own.
//   - Only ifindex-based code runs inside namespaces: Go caches interface
//     names process-wide, so "eth0" would resolve to the machine's own eth0.
//   - New returns only after the bridge, every bridge port and every eth0 report
//     OperState up, because frames sent earlier are silently dropped.
//
// Addressing (offsets inside Config.Subnet4 and Config.Subnet6, same offset in
// both families): node-i gets offset 10+i (node-1 = 10.213.0.11 and
// fd00:213::b with the defaults), the client gets offset 250 (10.213.0.250,
// fd00:213::fa). Offsets 1-10 and 100-199 are left free for routers and
// LoadBalancer pools of the tests that use the lab.
//
// The package may import netlink, netns, the mdlayher packet libraries and
// golang.org/x/{sys,net}; it must not import anything from k8s.io or
// sigs.k8s.io, nor any other Mooring package but internal/arpprobe (the
// probe behind Probe). Traffic it sends only ever leaves interfaces of
// namespaces it created itself.
//
// Linux only; on other systems New and Check return ErrUnsupported so that
// dependent packages still build.
package netlab
