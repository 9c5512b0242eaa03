package netlab

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Host is one namespace of the lab (a node or the client) with its eth0.
// The exported fields are fixed when the lab is built; do not change them.
type Host struct {
	Name    string           // "node-1".."node-N" or "client"
	Addr4   netip.Addr       // eth0's IPv4 address
	Addr6   netip.Addr       // eth0's global IPv6 address
	MAC     net.HardwareAddr // eth0's MAC, 02:6d:00:00:00:<address offset>
	IfIndex int              // eth0's ifindex inside the namespace

	w *worker

	// nl is bound to the namespace. Once closed, a netlink.Handle silently
	// falls back to the calling thread's namespace — the machine's own —
	// so every use goes through withNL, which refuses after Close.
	nlMu sync.RWMutex
	nl   *netlink.Handle

	mu     sync.Mutex // guards procs and closed
	procs  []*Process
	closed bool
}

// withNL runs fn with the host's netlink handle, or returns ErrClosed.
func (h *Host) withNL(fn func(nl *netlink.Handle) error) error {
	h.nlMu.RLock()
	defer h.nlMu.RUnlock()
	if h.nl == nil {
		return ErrClosed
	}
	return fn(h.nl)
}

// NS returns the handle of the host's network namespace, valid until
// Lab.Close. It stays owned by the lab: do not close it.
func (h *Host) NS() netns.NsHandle { return h.w.ns }

// NetlinkHandle returns a new netlink handle bound to the host's namespace,
// for configuration the helpers below do not cover. The caller owns it and
// must Close it; it keeps working (and keeps the namespace alive) until
// then, even after Lab.Close.
func (h *Host) NetlinkHandle() (*netlink.Handle, error) {
	var nl *netlink.Handle
	err := h.withNL(func(*netlink.Handle) error {
		var err error
		nl, err = netlink.NewHandleAt(h.w.ns)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netlab: %s: netlink handle: %w", h.Name, err)
	}
	return nl, nil
}

// Do runs fn on the host's long-lived worker thread, which is inside the
// host's namespace. Sockets opened in fn belong to the namespace and may be
// used from any goroutine afterwards. fn must not call
// runtime.UnlockOSThread or switch namespaces, and should not block for long:
// it holds the only thread of the host.
func (h *Host) Do(fn func() error) error { return h.w.do(fn) }

// Interface describes eth0 as a net.Interface built from netlink, never from
// Go's process-wide interface-name cache (which would answer for the
// machine's own eth0). Pass it only to ifindex-based code: libraries that
// resolve Name (IPv6 zones, net.InterfaceByName) reach the wrong interface.
func (h *Host) Interface() (*net.Interface, error) {
	var link netlink.Link
	err := h.withNL(func(nl *netlink.Handle) error {
		var err error
		link, err = nl.LinkByIndex(h.IfIndex)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netlab: %s: reading eth0: %w", h.Name, err)
	}
	a := link.Attrs()
	return &net.Interface{
		Index:        a.Index,
		MTU:          a.MTU,
		Name:         a.Name,
		HardwareAddr: slices.Clone(a.HardwareAddr),
		Flags:        a.Flags,
	}, nil
}

// AddAddr adds p (address and prefix length, e.g. 10.213.0.100/32) to the
// named link. IPv6 addresses skip duplicate address detection so they are
// usable at once.
func (h *Host) AddAddr(link string, p netip.Prefix) error {
	return h.onLink(link, "adding "+p.String()+" to", func(nl *netlink.Handle, l netlink.Link) error {
		if !p.IsValid() {
			return errors.New("invalid prefix")
		}
		return nl.AddrAdd(l, nlAddr(p))
	})
}

// DelAddr removes p from the named link.
func (h *Host) DelAddr(link string, p netip.Prefix) error {
	return h.onLink(link, "removing "+p.String()+" from", func(nl *netlink.Handle, l netlink.Link) error {
		if !p.IsValid() {
			return errors.New("invalid prefix")
		}
		return nl.AddrDel(l, nlAddr(p))
	})
}

// onLink finds the named link through the namespace's netlink handle (never
// by Go's name cache) and applies fn to it; what describes fn for errors.
func (h *Host) onLink(name, what string, fn func(*netlink.Handle, netlink.Link) error) error {
	err := h.withNL(func(nl *netlink.Handle) error {
		l, err := nl.LinkByName(name)
		if err != nil {
			return err
		}
		return fn(nl, l)
	})
	if err != nil {
		return fmt.Errorf("netlab: %s: %s %s: %w", h.Name, what, name, err)
	}
	return nil
}

// nlAddr converts p to netlink's form; IPv6 gets IFA_F_NODAD (see the DAD
// pitfall in LAB-NOTES).
func nlAddr(p netip.Prefix) *netlink.Addr {
	a := p.Addr().Unmap()
	addr := &netlink.Addr{IPNet: &net.IPNet{
		IP:   a.AsSlice(),
		Mask: net.CIDRMask(p.Bits(), a.BitLen()),
	}}
	if a.Is6() {
		addr.Flags = unix.IFA_F_NODAD
	}
	return addr
}

// SetLinkUp sets the named link administratively up.
func (h *Host) SetLinkUp(name string) error {
	return h.onLink(name, "setting up", (*netlink.Handle).LinkSetUp)
}

// SetLinkDown sets the named link administratively down. On eth0 this is a
// pulled cable: the bridge port loses carrier too.
func (h *Host) SetLinkDown(name string) error {
	return h.onLink(name, "setting down", (*netlink.Handle).LinkSetDown)
}

// Sysctl writes value to a key under net., given as
// "net.ipv4.conf.eth0.arp_ignore" or "net/ipv4/conf/eth0/arp_ignore". It
// runs on the worker thread because /proc/sys/net shows the namespace of the
// thread that opens it.
func (h *Host) Sysctl(key, value string) error {
	return h.Do(func() error { return writeSysctl(key, value) })
}

// writeSysctl must run on a thread inside the target namespace.
func writeSysctl(key, value string) error {
	path, err := sysctlPath(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("netlab: sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// NeighState is a neighbour-table entry state (the kernel's NUD_* bits).
type NeighState int

// String names the state as `ip neigh` does.
func (s NeighState) String() string {
	names := []struct {
		bit  int
		name string
	}{
		{netlink.NUD_INCOMPLETE, "INCOMPLETE"}, {netlink.NUD_REACHABLE, "REACHABLE"},
		{netlink.NUD_STALE, "STALE"}, {netlink.NUD_DELAY, "DELAY"},
		{netlink.NUD_PROBE, "PROBE"}, {netlink.NUD_FAILED, "FAILED"},
		{netlink.NUD_NOARP, "NOARP"}, {netlink.NUD_PERMANENT, "PERMANENT"},
	}
	for _, n := range names {
		if int(s)&n.bit != 0 {
			return n.name
		}
	}
	return "NONE"
}

// Neighbor reads eth0's neighbour-table entry for addr: the MAC this host
// currently believes owns addr (nil while INCOMPLETE or FAILED) and the
// entry's state. It returns ErrNoNeighbor when there is no entry.
func (h *Host) Neighbor(addr netip.Addr) (net.HardwareAddr, NeighState, error) {
	addr = addr.Unmap()
	family := netlink.FAMILY_V4
	if addr.Is6() {
		family = netlink.FAMILY_V6
	}
	var neighs []netlink.Neigh
	err := h.withNL(func(nl *netlink.Handle) error {
		var err error
		neighs, err = nl.NeighList(h.IfIndex, family)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("netlab: %s: listing neighbours: %w", h.Name, err)
	}
	for _, n := range neighs {
		if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr {
			return slices.Clone(n.HardwareAddr), NeighState(n.State), nil
		}
	}
	return nil, 0, fmt.Errorf("%w for %s on %s", ErrNoNeighbor, addr, h.Name)
}

// reapTimeout bounds how long Close waits for a SIGKILLed child; only a
// process stuck in uninterruptible sleep takes longer.
const reapTimeout = 5 * time.Second

// Process is a child process started inside a host's namespace.
type Process struct {
	PID int // also its process group ID

	done chan struct{}
	err  error
}

// Start starts cmd inside the host's namespace. The fork happens on the
// host's worker thread, which lives as long as the lab, because Pdeathsig is
// delivered when the forking thread exits: a child forked from a short-lived
// thread would die at once. Start sets Pdeathsig=SIGKILL (the child dies with
// the test binary) and Setpgid (Kill reaches the whole group); other
// SysProcAttr fields are kept. The lab reaps the child; use Wait, not
// cmd.Wait. Close kills every process still running.
func (h *Host) Start(cmd *exec.Cmd) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pgid = 0

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if err := h.Do(cmd.Start); err != nil {
		return nil, fmt.Errorf("netlab: %s: starting %s: %w", h.Name, cmd.Path, err)
	}
	p := &Process{PID: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	h.procs = append(h.procs, p)
	return p, nil
}

// Nft runs `nft -f -` with script in the host's network namespace (a
// firewall rule a test puts in the way); the error carries what nft said.
func (h *Host) Nft(script string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	p, err := h.Start(cmd)
	if err != nil {
		return err
	}
	if err := p.Wait(); err != nil {
		return fmt.Errorf("netlab: nft in %s: %w: %s", h.Name, err, out.String())
	}
	return nil
}

// Kill sends SIGKILL to the process's whole group: how a test kills a node.
// Killing a process that has already exited is not an error.
func (p *Process) Kill() error {
	if err := unix.Kill(-p.PID, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("netlab: killing process group %d: %w", p.PID, err)
	}
	return nil
}

// Wait waits for the process to exit and returns what exec.Cmd.Wait
// returned (an *exec.ExitError saying "signal: killed" after Kill).
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Done is closed when the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// stopProcesses kills every process of the host and waits for each to be
// reaped, so Close leaves none behind. Later Starts fail with ErrClosed.
func (h *Host) stopProcesses() error {
	h.mu.Lock()
	h.closed = true
	procs := h.procs
	h.procs = nil
	h.mu.Unlock()

	var errs []error
	for _, p := range procs {
		select {
		case <-p.done:
			continue
		default:
		}
		if err := p.Kill(); err != nil {
			errs = append(errs, err)
			continue
		}
		select {
		case <-p.done:
		case <-time.After(reapTimeout):
			errs = append(errs, fmt.Errorf("netlab: %s: process %d not reaped %v after SIGKILL", h.Name, p.PID, reapTimeout))
		}
	}
	return errors.Join(errs...)
}
