package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"golang.org/x/sys/unix"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

// writeCNI links the plugins into the lab's CNI bin folder and writes
// every node's conflist.
func (c *Cluster) writeCNI() error {
	bin := c.paths.cniBin()
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	links := map[string]string{"mooring-ipam": c.cfg.IPAMPlugin}
	for _, b := range cniBinaries {
		links[b] = filepath.Join(c.cfg.CNIPlugins, b)
	}
	for name, target := range links {
		abs, err := filepath.Abs(target)
		if err != nil {
			return err
		}
		if err := os.Symlink(abs, filepath.Join(bin, name)); err != nil {
			return fmt.Errorf("lab: CNI plugin %s: %w", name, err)
		}
	}
	for _, n := range c.nodes {
		cp := c.paths.cni(n.Name)
		if err := os.MkdirAll(filepath.Dir(cp.ConfList), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(cp.ConfList, []byte(conflist(c.cfg.PodNetwork, cp.Socket)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// waitModeRecorded waits until the controller has recorded the pod IPAM
// mode: an agent that starts before the record reads "off" and serves no
// pod addresses until it is restarted.
func (c *Cluster) waitModeRecorded(ctx context.Context) error {
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		if c.exited("mooring-controller") {
			return false, fmt.Errorf("lab: the Mooring controller exited before recording pod IPAM mode %s (see %s)",
				c.cfg.PodIPAM, filepath.Join(c.paths.Logs, logName("mooring-controller")))
		}
		_, err := c.cs.CoreV1().ConfigMaps(mooringNamespace).Get(ctx, podipamctl.ModeConfigMap, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("lab: waiting for the pod IPAM mode record: %w", err)
	}
	c.progress("pod IPAM mode recorded")
	return nil
}

// createPodIPPool creates pool through the dynamic client.
func createPodIPPool(ctx context.Context, dyn dynamic.Interface, pool *mooringv1.PodIPPool) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pool)
	if err != nil {
		return err
	}
	_, err = dyn.Resource(podIPPoolGVR).Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("lab: creating PodIPPool %s: %w", pool.Name, err)
	}
	return nil
}

// MigratePodIPAM moves a running cluster-pool lab to multi-pool, the one
// supported change of mode, through the same code as `mooring podipam
// migrate`: the plan and its checks (the lab's controller runs with the
// lab's cluster-pool flags, given here: no Deployment runs it), the pool
// "default" with cluster-pool's CIDRs and block sizes, the controller
// restarted with --pod-ipam-mode=multi-pool (the lab plays
// --controller-update=manual), each agent started again once it has exited
// on seeing the recorded change, as its DaemonSet would, and the wait that
// verifies every node from the API. Running pods are left alone.
func (c *Cluster) MigratePodIPAM(ctx context.Context) error {
	c.mu.Lock()
	mode := c.cfg.PodIPAM
	c.mu.Unlock()
	if mode != PodIPAMClusterPool {
		return fmt.Errorf("lab: pod IPAM mode is %q: only cluster-pool → multi-pool is supported", mode)
	}
	rc, err := kube.RESTConfig(c.paths.Kubeconfig, 50, 100)
	if err != nil {
		return err
	}
	cl, err := client.New(rc, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		return err
	}
	plan, err := podipamctl.PlanMigration(ctx, cl, podipamctl.MigrationInput{Namespace: mooringNamespace, ClusterPool: &podipamctl.ClusterPoolSettings{
		V4: []netip.Prefix{PodIPAMCIDR4}, MaskV4: PodIPAMMask4, V6: []netip.Prefix{PodIPAMCIDR6}, MaskV6: PodIPAMMask6,
		Source: "the lab's controller flags"}})
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := podipamctl.CreateDefaultPool(ctx, cl, plan); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	// SIGTERM, as a Deployment's rollout does: the controller gives up its
	// Lease, so the new one leads at once instead of after the Lease ran
	// out (SIGKILL left the blocks recorded in cluster-pool ~14 s longer).
	if err := c.stopComponent("mooring-controller", 10*time.Second); err != nil {
		return err
	}
	c.mu.Lock()
	c.cfg.PodIPAM = PodIPAMMultiPool
	ctrl := controllerComponent(&c.cfg, c.paths)
	c.mu.Unlock()
	if err := c.startComponent(ctrl); err != nil {
		return err
	}
	c.progress("controller restarted with --pod-ipam-mode=multi-pool")
	for _, n := range c.nodes {
		name := "mooring-agent/" + n.Name
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := poll(wctx, 100*time.Millisecond, func() (bool, error) { return c.exited(name), nil })
		cancel()
		if err != nil {
			return fmt.Errorf("lab: waiting for %s to exit on the mode change: %w", name, err)
		}
		c.mu.Lock()
		agent := agentComponent(&c.cfg, c.paths, n)
		c.mu.Unlock()
		if err := c.startComponent(agent); err != nil {
			return err
		}
	}
	c.progress("agents restarted in multi-pool")
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	last, err := podipamctl.WaitMigrated(wctx, cl, plan, 200*time.Millisecond, func(m podipamctl.MigrationProgress) {
		c.log.Debug("pod IPAM migration", "progress", fmt.Sprintf("%+v", m), "elapsed", time.Since(c.start).Round(time.Millisecond))
	})
	if err != nil {
		return fmt.Errorf("lab: the migration did not complete: %w (last seen %+v)", err, last)
	}
	c.progress("pod IPAM migrated: every node kept its blocks and its agent re-registered")
	return nil
}

// StopAgent stops node's Mooring agent (SIGTERM; after 5 s SIGQUIT, then SIGKILL),
// as if its pod were gone: its CNI socket stops answering.
func (c *Cluster) StopAgent(node string) error {
	return c.stopComponent("mooring-agent/"+node, AgentStopGrace)
}

// StartAgent starts node's Mooring agent again after StopAgent.
func (c *Cluster) StartAgent(node string) error {
	for _, n := range c.nodes {
		if n.Name == node {
			c.mu.Lock()
			agent := agentComponent(&c.cfg, c.paths, n)
			c.mu.Unlock()
			return c.startComponent(agent)
		}
	}
	return fmt.Errorf("lab: no node %q", node)
}

// stopComponent stops the running processes called name, marked killed so
// that nothing reports them as crashed: SIGTERM to the process group and up
// to grace for it to exit, then SIGQUIT, which makes a Go process write
// every goroutine's stack into its log (what held its exit) and end, and
// after up to quitGrace more SIGKILL (grace 0: SIGKILL at once). It is an
// error when none runs.
func (c *Cluster) stopComponent(name string, grace time.Duration) error {
	c.mu.Lock()
	var ps []*proc
	for _, p := range c.procs {
		select {
		case <-p.p.Done():
			continue
		default:
		}
		if p.comp.Name == name {
			p.killed = true
			ps = append(ps, p)
		}
	}
	c.mu.Unlock()
	if len(ps) == 0 {
		return fmt.Errorf("lab: no process %s", name)
	}
	var errs []error
	for _, p := range ps {
		if grace > 0 {
			_ = unix.Kill(-p.p.PID, unix.SIGTERM)
			select {
			case <-p.p.Done():
				continue
			case <-time.After(grace):
			}
			c.progress(fmt.Sprintf("%s (pid %d) still running %s after SIGTERM: SIGQUIT (its goroutines go to its log), then SIGKILL", name, p.p.PID, grace))
			_ = unix.Kill(p.p.PID, unix.SIGQUIT)
			select {
			case <-p.p.Done():
				continue
			case <-time.After(quitGrace):
			}
		}
		errs = append(errs, p.p.Kill())
		<-p.p.Done()
	}
	return errors.Join(errs...)
}

// AgentStopGrace is how long StopAgent waits after SIGTERM before it
// takes the agent's goroutines (SIGQUIT) and kills it.
const AgentStopGrace = 5 * time.Second

// quitGrace is how long a Go process gets to write its goroutines after
// SIGQUIT (a few ms usually; 2 s on a starved machine).
const quitGrace = 2 * time.Second

// RestartController stops Mooring's controller (SIGTERM, up to 5 s) and
// starts it again with or without --adopt-only: the last step of a
// MetalLB migration in the lab, taken by hand in a real cluster.
func (c *Cluster) RestartController(adoptOnly bool) error {
	if !c.cfg.Mooring || c.cfg.Install != "" {
		return errors.New("lab: Mooring's controller is no lab process here (--no-mooring or --install=chart)")
	}
	if err := c.stopComponent("mooring-controller", 5*time.Second); err != nil {
		return err
	}
	comp := controllerComponent(&c.cfg, c.paths)
	comp.Args = slices.DeleteFunc(comp.Args, func(a string) bool { return a == "--adopt-only" })
	if adoptOnly {
		comp.Args = append(comp.Args, "--adopt-only")
	}
	return c.startComponent(comp)
}
