package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/netlab"
)

// Cluster is a running lab, as seen from the `lab up` process that owns it.
type Cluster struct {
	cfg   Config
	log   *slog.Logger
	paths paths
	net   *netlab.Lab
	cp    *netlab.Host
	pki   *pki
	nodes []nodeSpec
	bgp   *bgpLab // the router and the client behind it (bgp_linux.go)
	cs    kubernetes.Interface
	dyn   dynamic.Interface
	state State
	start time.Time

	mu     sync.Mutex
	procs  []*proc
	killed map[string]bool
	// traces stops the following of a node's reboot (traceReboot).
	traces map[string]context.CancelFunc
	wg     sync.WaitGroup
	// life is Run's context: it ends when the lab goes down.
	life   context.Context
	down   context.CancelFunc
	objErr <-chan error // the result of installMooring; nil once received
	// closing is set by close: no process starts after it (a restart).
	closing bool
	// backoff is each restarted component's last restart delay.
	backoff map[string]time.Duration

	// real runs the real nodes (--runtime=containerd); nil otherwise.
	real *realNodes

	// chart waits for the rendered chart (--install=chart); gossipKey is
	// the key it was rendered with (UpgradeChart renders with it again).
	chart     func() ([]*unstructured.Unstructured, error)
	gossipKey string
}

// proc is a process the lab started and watches.
type proc struct {
	comp   component
	p      *netlab.Process
	killed bool // guarded by Cluster.mu: a kill, not a crash
}

// Run brings the lab up, calls ready once it serves the demo Service, and
// keeps it until ctx ends or `lab down` asks; then it removes everything it
// made: processes, namespaces and the state dir.
func Run(ctx context.Context, cfg Config, ready func(*Ready)) (err error) {
	if err := cfg.Validate(); err != nil {
		return err
	}
	c := &Cluster{cfg: cfg, log: cfg.Log, paths: newPaths(cfg.StateDir), killed: map[string]bool{},
		traces: map[string]context.CancelFunc{}, start: time.Now()}
	if err := netlab.Check(); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := claimDir(c.paths.Dir); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	c.life, c.down = ctx, cancel
	defer func() { err = errors.Join(err, c.close(cancel)) }()

	c.log.Info("lab: bringing up a control plane and the nodes; on an idle 2-core machine ready in 6-15 s",
		"nodes", cfg.Nodes, "install", installName(cfg), "timeout", cfg.Timeout)
	if err := c.build(ctx); err != nil {
		return err
	}
	upCtx, upCancel := context.WithTimeout(ctx, cfg.Timeout)
	defer upCancel()
	r, err := c.bringUp(upCtx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while starting: not a failure
		}
		// The state dir goes away with the lab; a failed start keeps its
		// logs, since they hold the reason.
		if c.cfg.KeepLogs == "" {
			if d, derr := os.MkdirTemp("", "mooring-lab-logs-"); derr == nil {
				c.cfg.KeepLogs = d
				err = fmt.Errorf("%w (the components' logs are kept in %s)", err, d)
			}
		}
		return err
	}
	// A fault that cannot be injected fails the lab before anything says
	// Ready: a lab without the fault asked for would measure nothing.
	if cfg.Fault.Kind != "" {
		node, err := c.StartFault(ctx, cfg.Fault)
		if err != nil {
			return fmt.Errorf("lab: injecting --fault %s: %w", cfg.Fault, err)
		}
		c.log.Info("fault injected", "fault", cfg.Fault.String(), "node", node)
	}
	c.mu.Lock() // RecordRestart may write the state at any time
	c.state.Ready = true
	c.state.Service = &r.Service
	err = writeState(c.paths.State, &c.state)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if ready != nil {
		ready(r)
	}
	<-ctx.Done()
	c.log.Info("lab going down")
	return nil
}

// build makes the namespaces, the certificates, the listeners and the
// state file: everything before the first process.
func (c *Cluster) build(ctx context.Context) error {
	var err error
	// Nodes route their pods' traffic.
	sysctls := map[string]string{
		"net.ipv4.ip_forward":              "1",
		"net.ipv6.conf.all.forwarding":     "1",
		"net.ipv6.conf.default.forwarding": "1",
	}
	if c.cfg.usesPodIPAM() || c.cfg.realNodes() {
		// The CNI bridge's gateway addresses answer at once, without
		// a second of duplicate address detection.
		sysctls["net.ipv6.conf.default.accept_dad"] = "0"
	}
	c.net, err = netlab.New(ctx, netlab.Config{Nodes: c.cfg.Nodes, NodeSysctls: sysctls, NoClient: c.cfg.BGP.Enabled})
	if err != nil {
		return err
	}
	if c.cp, err = c.net.AttachHost(ctx, controlPlaneHost, ControlPlaneOffset, nil); err != nil {
		return err
	}
	if err := c.buildBGP(ctx); err != nil {
		return err
	}
	for i, h := range c.net.Nodes() {
		n := nodeSpec{Name: h.Name, Addrs: []netip.Addr{h.Addr4, h.Addr6}, Labels: demoNodeLabels(i + 1)}
		if !c.cfg.usesPodIPAM() { // else the blocks are the mode's to give
			p4, p6 := nodePodCIDRs(i + 1)
			n.PodCIDRs = []netip.Prefix{p4, p6}
		}
		c.nodes = append(c.nodes, n)
	}
	if c.cfg.usesPodIPAM() && !c.cfg.realNodes() {
		if err := c.writeCNI(); err != nil {
			return err
		}
	}
	sans := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback(), c.cp.Addr4, c.cp.Addr6,
		nthHost(ServiceCIDR4, 1), nthHost(ServiceCIDR6, 1)}
	if c.pki, err = newPKI(c.paths.PKI, sans); err != nil {
		return err
	}
	if err := writeGossipKey(c.paths); err != nil {
		return fmt.Errorf("lab: gossip key: %w", err)
	}
	if c.cfg.realNodes() {
		if err := c.prepareRealNodes(); err != nil {
			return err
		}
	}
	fwdLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("lab: listening for kubectl: %w", err)
	}
	ctlLn, err := net.Listen("unix", c.paths.Control)
	if err != nil {
		fwdLn.Close()
		return fmt.Errorf("lab: control socket: %w", err)
	}
	fwd := &forwarder{ln: fwdLn, host: c.cp, target: netip.AddrPortFrom(c.cp.Addr4, APIServerPort), log: c.log}
	ctl := &controlServer{ln: ctlLn, kill: c.Kill, restore: c.Restore, record: c.RecordRestart, down: c.down}
	c.wg.Go(func() { fwd.Run(ctx) })
	c.wg.Go(func() { ctl.Run(ctx) })
	if err := c.pki.writeKubeconfig(c.paths.Kubeconfig, "https://"+fwdLn.Addr().String()); err != nil {
		return err
	}
	inLab := "https://" + netip.AddrPortFrom(c.cp.Addr4, APIServerPort).String()
	if err := c.pki.writeKubeconfig(c.paths.ClusterKubecfg, inLab); err != nil {
		return err
	}
	rc, err := kube.RESTConfig(c.paths.Kubeconfig, 50, 100)
	if err != nil {
		return err
	}
	if c.cs, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}
	if c.dyn, err = dynamic.NewForConfig(rc); err != nil {
		return err
	}
	return c.publishState()
}

// publishState writes state.json with every namespace's entry thread.
func (c *Cluster) publishState() error {
	c.state = State{PID: os.Getpid(), Dir: c.paths.Dir, Kubeconfig: c.paths.Kubeconfig, Control: c.paths.Control}
	add := func(h *netlab.Host, role string) error {
		tid, err := h.WorkerTID()
		if err != nil {
			return err
		}
		c.state.Hosts = append(c.state.Hosts, HostState{Name: h.Name, Role: role, Addr4: h.Addr4.String(),
			Addr6: h.Addr6.String(), MAC: h.MAC.String(), TID: tid})
		return nil
	}
	if err := add(c.cp, "control-plane"); err != nil {
		return err
	}
	for _, h := range c.net.Nodes() {
		if err := add(h, "node"); err != nil {
			return err
		}
	}
	if err := add(c.clientHost(), "client"); err != nil {
		return err
	}
	if err := c.publishBGPHosts(add); err != nil {
		return err
	}
	return writeState(c.paths.State, &c.state)
}

// bringUp starts the processes in dependency order and waits until the demo
// Service answers.
func (c *Cluster) bringUp(ctx context.Context) (*Ready, error) {
	if c.cfg.Install == InstallChart {
		c.chart = c.renderChart(ctx)
		if err := c.routeControlPlane(); err != nil {
			return nil, err
		}
	}
	apiserver := apiserverComponent(&c.cfg, c.paths, c.pki, c.cp.Addr4)
	if c.cfg.realNodes() {
		apiserver.Args = realNodeAPIServerArgs(apiserver.Args, c.pki)
	}
	for _, comp := range []component{etcdComponent(&c.cfg, c.paths), apiserver} {
		if err := c.startComponent(comp); err != nil {
			return nil, err
		}
	}
	if err := c.routePods(); err != nil {
		return nil, err
	}
	// Real nodes boot their runtime (containerd, images) beside the
	// control plane starting; their kubelets wait for apiReady.
	apiReady := make(chan struct{})
	var nodesBooted func() error
	if c.cfg.realNodes() {
		nodesBooted = c.startRealNodes(ctx, apiReady)
	}
	// Mooring's resources go in as soon as the apiserver takes writes,
	// which is before /readyz: in parallel with the rest.
	crdsUp := make(chan struct{})
	objErr := make(chan error, 1)
	c.objErr = objErr
	c.wg.Go(func() { objErr <- c.installMooring(ctx, crdsUp) })
	var mlbErr chan error
	if c.cfg.MetalLB != "" {
		mlbErr = make(chan error, 1)
		c.wg.Go(func() { mlbErr <- c.installMetalLB(ctx) })
	}
	if err := c.waitAPIServer(ctx); err != nil {
		return nil, err
	}
	c.progress("apiserver ready")
	close(apiReady)
	if c.cfg.mooringProcesses() {
		// The controller and the agents watch Mooring's resources from the
		// start, so they wait for the CRDs (usually in before /readyz). The
		// controller starts first: it has the longest way to go (leader
		// election, sync, allocation) before the Service has an address.
		select {
		case <-crdsUp:
		case err := <-objErr:
			if err != nil {
				return nil, err
			}
			c.objErr = nil // all done already
		case <-ctx.Done():
			return nil, fmt.Errorf("lab: waiting for Mooring's CRDs: %w", ctx.Err())
		}
		if c.cfg.usesPodIPAM() {
			// The controller records the pod IPAM mode there, and refuses
			// to start without it.
			if err := ensureNamespace(ctx, c.cs, mooringNamespace); err != nil {
				return nil, err
			}
		}
		if err := c.startComponent(controllerComponent(&c.cfg, c.paths)); err != nil {
			return nil, err
		}
	}
	if err := c.startComponent(kcmComponent(&c.cfg, c.paths)); err != nil {
		return nil, err
	}
	// kube-scheduler came later to `make kubebin`: an older build lacks it.
	if sched := schedulerComponent(&c.cfg, c.paths); isExecFile(sched.Path) {
		if err := c.startComponent(sched); err != nil {
			return nil, err
		}
	}
	for _, n := range c.nodes {
		comps := []component{kubeletComponent(&c.cfg, c.paths, n), kubeProxyComponent(&c.cfg, c.paths, n)}
		if c.cfg.realNodes() {
			// The real kubelet starts with its node, and kube-proxy once
			// the kubelet has registered the Node (registered).
			comps = nil
		}
		for _, comp := range comps {
			if err := c.startComponent(comp); err != nil {
				return nil, err
			}
		}
	}
	if nodesBooted != nil {
		if err := nodesBooted(); err != nil {
			return nil, err
		}
		c.progress("real nodes booted")
	}
	if c.cfg.mooringProcesses() {
		if c.cfg.usesPodIPAM() {
			if err := c.waitModeRecorded(ctx); err != nil {
				return nil, err
			}
		}
		for _, n := range c.nodes {
			if err := c.startComponent(agentComponent(&c.cfg, c.paths, n)); err != nil {
				return nil, err
			}
		}
	}
	if err := createCore(ctx, c.cs, c.nodes, c.cfg.Mooring && c.cfg.MetalLB == "", c.echoPod); err != nil {
		return nil, err
	}
	if mlbErr != nil {
		select {
		case err := <-mlbErr:
			if err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("lab: installing MetalLB: %w", ctx.Err())
		}
	}
	c.progress("all processes started")
	return c.waitReady(ctx)
}

// installMooring installs Mooring's CRDs, retrying until the apiserver
// takes them (an admin of system:masters passes authorization before the
// apiserver reports ready), closes crdsUp once they are established, and
// with Mooring creates the demo pool and policy. The apiserver's first
// custom-resource write takes about 2 s (it builds the resource's handlers
// then), which is why this runs beside starting the nodes.
func (c *Cluster) installMooring(ctx context.Context, crdsUp chan<- struct{}) error {
	var crds []string
	var last error
	err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		crds, last = installCRDs(actx, c.dyn, c.cfg.CRDDir)
		return last == nil, nil
	})
	if err == nil {
		err = poll(ctx, 50*time.Millisecond, func() (bool, error) {
			ok, err := crdsEstablished(ctx, c.dyn, crds)
			return ok && err == nil, nil
		})
	}
	if err != nil {
		return fmt.Errorf("lab: installing Mooring's CRDs from %s (last error: %v): %w", c.cfg.CRDDir, last, err)
	}
	c.progress("Mooring CRDs established")
	close(crdsUp)
	if !c.cfg.Mooring {
		return nil
	}
	// The chart goes in beside the demo objects (each costs the apiserver
	// a first write of its kinds).
	chartErr := make(chan error, 1)
	if c.cfg.Install == InstallChart {
		go func() { chartErr <- c.installChart(ctx) }()
	} else {
		chartErr <- nil
	}
	if c.cfg.PodIPAM == PodIPAMMultiPool {
		if err := createPodIPPool(ctx, c.dyn, DefaultPodIPPool()); err != nil {
			return err
		}
	}
	if c.cfg.MetalLB != "" {
		// MetalLB serves; `mooring migrate metallb run` applies Mooring's
		// pools and policies.
		return <-chartErr
	}
	var bgp labBGP
	if c.bgp != nil {
		bgp = labBGP{router: c.bgp.router.Addr4, hold: c.cfg.BGP.HoldTime, bfd: c.cfg.bgpBFD(), password: c.cfg.bgpPassword()}
		if bgp.password != "" {
			// The password's Secret lives there; createCore makes it
			// too, beside this.
			if err := ensureNamespace(ctx, c.cs, mooringNamespace); err != nil {
				return errors.Join(err, <-chartErr)
			}
		}
	}
	if err := errors.Join(createMooringObjects(ctx, c.dyn, bgp), <-chartErr); err != nil {
		return err
	}
	if c.bgp != nil {
		c.progress("demo pool and BGP objects created (peer, advertisement; BFD profile, password Secret as configured)")
		return nil
	}
	c.progress("demo pool and L2 policy created")
	return nil
}

func (c *Cluster) progress(msg string) {
	c.log.Info(msg, "elapsed", time.Since(c.start).Round(time.Millisecond))
}

// host returns the netlab host called name, or nil.
func (c *Cluster) host(name string) *netlab.Host {
	if name == controlPlaneHost {
		return c.cp
	}
	if h := c.bgpHost(name); h != nil {
		return h
	}
	return c.net.Host(name)
}

// Host returns the namespace called name ("control-plane", "node-1",
// "client", ...) or nil.
func (c *Cluster) Host(name string) *netlab.Host { return c.host(name) }

// startComponent starts comp in its host and watches it.
func (c *Cluster) startComponent(comp component) error {
	h := c.host(comp.Host)
	if h == nil {
		return fmt.Errorf("lab: %s: no host %s", comp.Name, comp.Host)
	}
	cmd, logf, err := comp.command(c.paths.Logs)
	if err != nil {
		return err
	}
	p, err := h.Start(cmd)
	logf.Close()
	if err != nil {
		return fmt.Errorf("lab: starting %s: %w", comp.Name, err)
	}
	pr := &proc{comp: comp, p: p}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		_ = p.Kill()
		<-p.Done()
		return fmt.Errorf("lab: not starting %s: the lab is going down", comp.Name)
	}
	c.procs = append(c.procs, pr)
	c.mu.Unlock()
	started := time.Now()
	c.wg.Go(func() {
		err := p.Wait()
		c.mu.Lock()
		killed, closing := pr.killed, c.closing
		c.mu.Unlock()
		if killed {
			return
		}
		logPath := filepath.Join(c.paths.Logs, logName(comp.Name))
		c.log.Warn("process exited", "component", comp.Name, "err", err, "log", logPath,
			"tail", tailFile(logPath, 5))
		if comp.Restart && !closing {
			c.restart(comp, time.Since(started))
		}
	})
	return nil
}

// restart starts comp again after it exited having run ran, unless the lab
// goes down meanwhile: 2 s later, doubling up to 30 s while it keeps
// exiting within a minute (a kubelet's crash-loop back-off).
func (c *Cluster) restart(comp component, ran time.Duration) {
	c.mu.Lock()
	d := 2 * time.Second
	if prev := c.backoff[comp.Name]; ran < time.Minute && prev > 0 {
		d = min(2*prev, 30*time.Second)
	}
	if c.backoff == nil {
		c.backoff = map[string]time.Duration{}
	}
	c.backoff[comp.Name] = d
	c.mu.Unlock()
	time.Sleep(d)
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	if closing {
		return
	}
	if err := c.startComponent(comp); err != nil {
		c.log.Warn("restarting", "component", comp.Name, "err", err)
		return
	}
	c.log.Warn("process restarted", "component", comp.Name)
}

// exited reports whether the named component has exited.
func (c *Cluster) exited(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The latest process of that name counts: a restored node's kubelet
	// replaces the killed one.
	for _, p := range slices.Backward(c.procs) {
		if p.comp.Name == name {
			select {
			case <-p.p.Done():
				return true
			default:
				return false
			}
		}
	}
	return false
}

// close tears everything down in reverse order: processes (every group
// SIGKILLed and reaped), listeners, namespaces, then the state dir.
func (c *Cluster) close(cancel context.CancelFunc) error {
	c.mu.Lock()
	c.closing = true
	procs := slices.Clone(c.procs)
	for _, p := range procs {
		p.killed = true
	}
	c.mu.Unlock()
	var errs []error
	slices.Reverse(procs)
	for _, p := range procs {
		errs = append(errs, p.p.Kill())
	}
	for _, p := range procs {
		<-p.p.Done()
		errs = append(errs, waitGroupGone(p.p.PID, 5*time.Second))
	}
	errs = append(errs, c.stopBGP())
	// What users started inside the lab (`lab exec ... &`) goes too: it
	// would otherwise keep a dead lab's namespace alive.
	errs = append(errs, c.killStrays(), c.closeRealNodes())
	cancel()
	if c.cp != nil {
		errs = append(errs, c.cp.Release())
	}
	errs = append(errs, c.releaseBGP())
	if c.net != nil {
		errs = append(errs, c.net.Close())
	}
	c.wg.Wait()
	if c.cfg.KeepLogs != "" {
		if err := os.CopyFS(c.cfg.KeepLogs, os.DirFS(c.paths.Logs)); err != nil {
			errs = append(errs, fmt.Errorf("lab: keeping logs: %w", err))
		}
	}
	errs = append(errs, os.RemoveAll(c.paths.Dir))
	return errors.Join(errs...)
}

// killStrays SIGKILLs every process left in the lab's namespaces.
func (c *Cluster) killStrays() error {
	var hosts []*netlab.Host
	if c.net != nil {
		hosts = c.net.Nodes()
		if cl := c.net.Client(); cl != nil {
			hosts = append(hosts, cl)
		}
	}
	hosts = append(hosts, c.bgpHosts()...)
	if c.cp != nil {
		hosts = append(hosts, c.cp)
	}
	var errs []error
	for _, h := range hosts {
		ns, err := nsOfFD(int(h.NS()))
		if err == nil {
			var n int
			if n, err = killNetNS(ns, 5*time.Second); n > 0 {
				c.log.Info("killed processes left in the lab", "host", h.Name, "count", n)
			}
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// waitGroupGone waits until no process of group pgid is left: the pods a
// kubelet forked are not the lab's children, so nothing else waits for
// them to be gone.
func waitGroupGone(pgid int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if err := unix.Kill(-pgid, 0); errors.Is(err, unix.ESRCH) {
			return nil
		}
		_ = unix.Kill(-pgid, unix.SIGKILL)
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("lab: processes of group %d still alive %v after SIGKILL", pgid, limit)
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// nthHost is the address n past the start of p (n < 256).
func nthHost(p netip.Prefix, n int) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	b[len(b)-1] += byte(n)
	a, _ := netip.AddrFromSlice(b)
	return a
}

// tailFile returns the last n lines of path (the state dir, logs included,
// is removed on the way out, so an early exit is reported with its cause).
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
