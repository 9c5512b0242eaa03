package netlab

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
)

// Lab is a built lab. Close it when done; it is safe for concurrent use.
type Lab struct {
	cfg    Config
	bridge *Host   // the bridge namespace; no eth0, not handed out
	hosts  []*Host // nodes in order, then the client (unless NoClient)

	closeOnce sync.Once
	closeErr  error
}

// defaultReadyTimeout bounds New when ctx has no deadline: a lab that is not
// up within this time never will be.
const defaultReadyTimeout = 10 * time.Second

// pollInterval is how often readiness is re-checked; links come up in well
// under a millisecond each, so a short interval keeps New fast.
const pollInterval = time.Millisecond

// New builds the lab described by cfg and returns once every link is
// operationally up. On error nothing is left behind. ctx bounds the build;
// without a deadline New gives up after 10 s.
func New(ctx context.Context, cfg Config) (*Lab, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultReadyTimeout)
		defer cancel()
	}
	l := &Lab{cfg: cfg}
	if err := l.build(ctx); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	return l, nil
}

func (l *Lab) build(ctx context.Context) error {
	// The bridge namespace does no layer 3: IPv6 off keeps its ports from
	// sending router solicitations and MLD reports into every probe.
	br, err := newNamespace("bridge", map[string]string{
		"net.ipv6.conf.default.disable_ipv6": "1",
		"net.ipv6.conf.all.disable_ipv6":     "1",
	})
	if err != nil {
		return err
	}
	l.bridge = br
	snooping := false
	bridge := &netlink.Bridge{
		LinkAttrs: netlink.LinkAttrs{Name: l.cfg.Bridge},
		// Without a multicast querier in the lab, snooping would make the
		// delivery of neighbour solicitations depend on MLD report timing.
		MulticastSnooping: &snooping,
	}
	if err := br.nl.LinkAdd(bridge); err != nil {
		return fmt.Errorf("netlab: creating bridge %s: %w", l.cfg.Bridge, err)
	}
	if err := br.nl.LinkSetUp(bridge); err != nil {
		return fmt.Errorf("netlab: setting bridge %s up: %w", l.cfg.Bridge, err)
	}
	for _, spec := range l.cfg.plan() {
		h, err := l.addHost(spec, bridge.Attrs().Index, hostMAC(spec))
		if h != nil {
			l.hosts = append(l.hosts, h)
		}
		if err != nil {
			return err
		}
	}
	return l.waitUp(ctx)
}

// hostMAC is locally administered and readable: the last byte is the host's
// address offset (0b for node-1, fa for the client).
func hostMAC(spec hostSpec) net.HardwareAddr {
	b := spec.addr4.As4()
	return net.HardwareAddr{0x02, 0x6d, 0x00, 0x00, 0x00, b[3]}
}

// newNamespace starts a worker in a new namespace, writes sysctls there
// before any link exists (accept_dad must be off before a veth appears, or
// its link-local address stays tentative and NDP sockets fail to bind), binds
// a netlink handle to it and brings loopback up.
func newNamespace(name string, sysctls map[string]string) (*Host, error) {
	w, err := newWorker()
	if err != nil {
		return nil, err
	}
	h := &Host{Name: name, w: w}
	err = w.do(func() error {
		if err := writeSysctl("net.ipv6.conf.default.accept_dad", "0"); err != nil {
			return err
		}
		if err := writeSysctl("net.ipv6.conf.all.accept_dad", "0"); err != nil {
			return err
		}
		for _, k := range slices.Sorted(maps.Keys(sysctls)) {
			if err := writeSysctl(k, sysctls[k]); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		h.nl, err = netlink.NewHandleAt(w.ns)
	}
	if err == nil {
		err = h.SetLinkUp("lo")
	}
	if err != nil {
		return h, errors.Join(fmt.Errorf("netlab: preparing namespace %s: %w", name, err), h.close())
	}
	return h, nil
}

// addHost creates the host namespace and its veth pair: the bridge end,
// named after the host, is created in the bridge namespace and enslaved to
// the bridge; the peer is created directly inside the host namespace as
// eth0, so no two "eth0" ever share a namespace.
func (l *Lab) addHost(spec hostSpec, bridgeIndex int, mac net.HardwareAddr) (*Host, error) {
	h, err := newNamespace(spec.name, spec.sysctls)
	if err != nil {
		return nil, err
	}
	h.Addr4, h.Addr6, h.MAC = spec.addr4, spec.addr6, mac
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: spec.name, MasterIndex: bridgeIndex},
		PeerName:         "eth0",
		PeerHardwareAddr: mac,
		PeerNamespace:    netlink.NsFd(h.w.ns),
	}
	if err := l.bridge.nl.LinkAdd(veth); err != nil {
		return h, fmt.Errorf("netlab: %s: creating veth pair: %w", spec.name, err)
	}
	if err := l.bridge.nl.LinkSetUp(veth); err != nil {
		return h, fmt.Errorf("netlab: %s: setting bridge port up: %w", spec.name, err)
	}
	eth0, err := h.nl.LinkByName("eth0")
	if err != nil {
		return h, fmt.Errorf("netlab: %s: finding eth0: %w", spec.name, err)
	}
	h.IfIndex = eth0.Attrs().Index
	for _, p := range []netip.Prefix{
		netip.PrefixFrom(spec.addr4, l.cfg.Subnet4.Bits()),
		netip.PrefixFrom(spec.addr6, l.cfg.Subnet6.Bits()),
	} {
		if err := h.nl.AddrAdd(eth0, nlAddr(p)); err != nil {
			return h, fmt.Errorf("netlab: %s: adding %s to eth0: %w", spec.name, p, err)
		}
	}
	if err := h.nl.LinkSetUp(eth0); err != nil {
		return h, fmt.Errorf("netlab: %s: setting eth0 up: %w", spec.name, err)
	}
	return h, nil
}

// waitUp polls until the bridge, every bridge port and every eth0 report
// OperState up: until then the kernel drops frames (the readiness race in
// LAB-NOTES).
func (l *Lab) waitUp(ctx context.Context) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		pending, err := l.notUp()
		if err != nil {
			return err
		}
		if pending == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("netlab: %s not operationally up: %w", pending, ctx.Err())
		case <-t.C:
		}
	}
}

// notUp names the first link that is not yet up, or returns "".
func (l *Lab) notUp() (string, error) {
	check := func(link netlink.Link, err error, what string) (string, error) {
		if err != nil {
			return "", fmt.Errorf("netlab: reading %s: %w", what, err)
		}
		if link.Attrs().OperState != netlink.OperUp {
			return fmt.Sprintf("%s (%s)", what, link.Attrs().OperState), nil
		}
		return "", nil
	}
	link, err := l.bridge.nl.LinkByName(l.cfg.Bridge)
	if s, err := check(link, err, "bridge "+l.cfg.Bridge); s != "" || err != nil {
		return s, err
	}
	for _, h := range l.hosts {
		link, err := l.bridge.nl.LinkByName(h.Name)
		if s, err := check(link, err, "bridge port "+h.Name); s != "" || err != nil {
			return s, err
		}
		link, err = h.nl.LinkByIndex(h.IfIndex)
		if s, err := check(link, err, h.Name+" eth0"); s != "" || err != nil {
			return s, err
		}
	}
	return "", nil
}

// Nodes returns the node hosts in order (node-1 first).
func (l *Lab) Nodes() []*Host { return slices.Clone(l.hosts[:l.cfg.Nodes]) }

// Client returns the client host, nil with Config.NoClient.
func (l *Lab) Client() *Host {
	if l.cfg.NoClient {
		return nil
	}
	return l.hosts[l.cfg.Nodes]
}

// Host returns the host with the given name, or nil.
func (l *Lab) Host(name string) *Host {
	for _, h := range l.hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// Config returns the lab's configuration with defaults filled in.
func (l *Lab) Config() Config { return l.cfg }

// Close kills every process started in the lab (SIGKILL to each process
// group, then reaps it), ends the worker threads and releases the
// namespaces; the kernel then removes every link. It is idempotent and safe
// to call concurrently; later calls return the first call's result.
func (l *Lab) Close() error {
	l.closeOnce.Do(func() {
		var errs []error
		for _, h := range l.hosts {
			errs = append(errs, h.stopProcesses())
		}
		for _, h := range l.hosts {
			errs = append(errs, h.close())
		}
		if l.bridge != nil {
			errs = append(errs, l.bridge.close())
		}
		l.closeErr = errors.Join(errs...)
	})
	return l.closeErr
}

// close releases the host's thread, netlink handle and namespace handle.
func (h *Host) close() error {
	h.nlMu.Lock()
	if h.nl != nil {
		h.nl.Close()
		h.nl = nil
	}
	h.nlMu.Unlock()
	return h.w.close()
}
