package kubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// podProcess is a pod's echo server: a child in a new network namespace.
// It stays in the kubelet's process group, so killing the group (a node
// kill) takes the pods with it.
type podProcess struct {
	cmd      *exec.Cmd
	done     chan struct{}
	err      error
	stopping atomic.Bool // set before a deliberate kill: not a crash
	once     sync.Once
}

func (p *podProcess) pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *podProcess) exitErr() error {
	if p.err == nil {
		return errors.New("exit status 0")
	}
	return p.err
}

// kill SIGKILLs the process and waits for it (bounded).
func (p *podProcess) kill() {
	p.once.Do(func() {
		p.stopping.Store(true)
		_ = p.cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	})
}

// startPodProcess starts `mooring lab echo` in a new network namespace and
// waits for its readiness byte: it has turned off IPv6 duplicate address
// detection in its namespace (only a thread inside can) before any link
// arrives, and is listening.
func startPodProcess(cfg Config, obj *corev1.Pod, p *pod) (*podProcess, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(cfg.Self, "lab", "echo",
		"--port="+strconv.Itoa(p.port),
		"--pod="+obj.Name, "--namespace="+obj.Namespace, "--node="+cfg.NodeName,
		"--ready-fd=3")
	cmd.Env = os.Environ()
	cmd.ExtraFiles = []*os.File{w}
	if cfg.LogDir != "" {
		f, err := os.OpenFile(filepath.Join(cfg.LogDir, "pod-"+obj.Namespace+"-"+obj.Name+".log"),
			os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			w.Close()
			return nil, err
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	// Pdeathsig: this process never ends the thread that forked (it locks
	// no threads), so the pod dies only with the kubelet.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("kubelet: starting pod %s: %w", p.key, err)
	}
	w.Close()
	proc := &podProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		proc.err = cmd.Wait()
		close(proc.done)
	}()
	_ = r.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1)
	if _, err := r.Read(buf); err != nil {
		proc.kill()
		return nil, fmt.Errorf("kubelet: pod %s did not report ready (see its log): %w", p.key, err)
	}
	return proc, nil
}

// staticNet is the lab's own pod wiring when no CNI config is given: a
// veth per pod, the pod's addresses at offset n of the node's pod CIDRs,
// routed links like the ptp CNI plugin's.
type staticNet struct {
	cidrs []netip.Prefix
	mu    sync.Mutex
	next  int // last address offset handed out; offset 1 is the gateway
}

func newStaticNet(cidrs []netip.Prefix) *staticNet { return &staticNet{cidrs: cidrs, next: 1} }

// ready: the static wiring needs nothing but the node.
func (*staticNet) ready(context.Context) error { return nil }

func (*staticNet) status(context.Context) error { return nil }

func (s *staticNet) wire(_ context.Context, _ *corev1.Pod, p *pod) error {
	s.mu.Lock()
	s.next++
	idx := s.next
	s.mu.Unlock()
	if idx > 250 {
		return errors.New("kubelet: this node has run out of pod addresses")
	}
	p.veth = fmt.Sprintf("vpod%d", idx)
	p.addrs = nil
	for _, c := range s.cidrs {
		p.addrs = append(p.addrs, nthAddr(c, idx))
	}
	return wirePod(s.cidrs, p)
}

func (*staticNet) unwire(_ context.Context, p *pod) { unwirePod(p) }

// Every pod's gateway: the first address of the node's pod CIDR (IPv4) and
// fe80::1 (IPv6), held by the node end of every pod's veth, as the ptp CNI
// plugin does. Routed links need no bridge and no proxy ARP.
var gw6 = netip.MustParseAddr("fe80::1")

// wirePod creates the veth pair (node end p.veth, pod end eth0), gives the
// pod its /32 and /128 with default routes via the gateways, and routes the
// pod's addresses to its link on the node.
func wirePod(cidrs []netip.Prefix, p *pod) error {
	podNS, err := netns.GetFromPid(p.proc.pid())
	if err != nil {
		return fmt.Errorf("kubelet: pod %s namespace: %w", p.key, err)
	}
	defer podNS.Close()
	nh, err := netlink.NewHandleAt(podNS)
	if err != nil {
		return err
	}
	defer nh.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.veth}, PeerName: "eth0", PeerNamespace: netlink.NsFd(podNS)}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("kubelet: pod %s: creating veth %s: %w", p.key, p.veth, err)
	}
	host, err := netlink.LinkByName(p.veth)
	if err != nil {
		return err
	}
	eth0, err := nh.LinkByName("eth0")
	if err != nil {
		return err
	}
	lo, err := nh.LinkByName("lo")
	if err != nil {
		return err
	}
	steps := []func() error{
		func() error { return nh.LinkSetUp(lo) },
		func() error { return netlink.AddrAdd(host, addr(netip.PrefixFrom(nthAddr(cidrs[0], 1), 32))) },
		func() error { return netlink.AddrAdd(host, addr(netip.PrefixFrom(gw6, 64))) },
		func() error { return netlink.LinkSetUp(host) },
		func() error { return nh.LinkSetUp(eth0) },
	}
	for _, a := range p.addrs {
		steps = append(steps,
			func() error { return nh.AddrAdd(eth0, addr(netip.PrefixFrom(a, a.BitLen()))) },
			func() error {
				return netlink.RouteAdd(&netlink.Route{LinkIndex: host.Attrs().Index, Dst: ipnet(netip.PrefixFrom(a, a.BitLen())), Scope: netlink.SCOPE_LINK})
			})
	}
	gw4 := nthAddr(cidrs[0], 1)
	steps = append(steps,
		func() error {
			return nh.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: ipnet(netip.PrefixFrom(gw4, 32)), Scope: netlink.SCOPE_LINK})
		},
		func() error { return nh.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gw4.AsSlice()}) },
	)
	if len(p.addrs) > 1 {
		steps = append(steps, func() error {
			return nh.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gw6.AsSlice()})
		})
	}
	for i, s := range steps {
		if err := s(); err != nil {
			return fmt.Errorf("kubelet: pod %s: wiring step %d: %w", p.key, i, err)
		}
	}
	return nil
}

// unwirePod deletes the node end of the pod's veth (the kernel removes the
// routes and the pod end with it).
func unwirePod(p *pod) {
	if l, err := netlink.LinkByName(p.veth); err == nil {
		_ = netlink.LinkDel(l)
	}
}

func addr(p netip.Prefix) *netlink.Addr {
	a := &netlink.Addr{IPNet: ipnet(p)}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

func ipnet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
