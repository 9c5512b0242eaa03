package failover

import (
	"context"
	"fmt"
	"net"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NamespaceDialer returns a DialFunc whose connections start in the network
// namespace ns — the lab's client (netlab Host.NS()). Each dial runs on a
// fresh goroutine locked to its own OS thread that enters ns and is never
// unlocked, so the runtime discards the thread afterwards and nothing else
// ever runs in ns by accident (LAB-NOTES: setns is per thread). A dial that
// hangs (nobody answers ARP) therefore holds only its own thread, never a
// shared worker: requests at 10/s with a 1 s timeout do not queue.
// The connection may be used from any goroutine. ns stays the caller's.
func NamespaceDialer(ns netns.NsHandle) DialFunc {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: see above
			if err := netns.Set(ns); err != nil {
				ch <- result{nil, fmt.Errorf("entering the client's network namespace: %w", err)}
				return
			}
			c, err := (&net.Dialer{}).DialContext(ctx, network, address)
			ch <- result{c, err}
		}()
		// The dial honours ctx itself; waiting here keeps the conn from leaking.
		r := <-ch
		return r.c, r.err
	}
}

// NetNSClient is a client in another network namespace, opened by path
// (for example the lab's `/proc/<pid>/task/<tid>/ns/net`, or
// /run/netns/<name>): Dial makes connections from it and Owner reads its
// neighbour table. Close releases both.
type NetNSClient struct {
	Dial  DialFunc
	Owner NeighbourTable
	ns    netns.NsHandle
}

// OpenNetNSClient opens the namespace at path.
func OpenNetNSClient(path string) (*NetNSClient, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", path, err)
	}
	nl, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("netlink in network namespace %s: %w", path, err)
	}
	return &NetNSClient{Dial: NamespaceDialer(ns), Owner: NeighbourTable{Handle: nl}, ns: ns}, nil
}

// Close releases the namespace; dials after Close fail.
func (c *NetNSClient) Close() error {
	c.Owner.Handle.Close()
	return c.ns.Close()
}
