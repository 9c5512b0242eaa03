package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/mooringlb/mooring/internal/lab/realnode"
)

// A real node boots in two halves. The runtime half (an empty run/, the
// mount namespace, containerd, the images) needs no API server, so at
// `lab up` it runs beside etcd and the API server starting; the kubelet
// half waits for the API server, which a kubelet that starts earlier only
// retries against with a growing back-off.

// bootPhases is how long each step of a node's boot took.
type bootPhases struct {
	mounts, containerd, images, apiserver, kubelet time.Duration
}

// logArgs are the phases as slog attributes (images and the wait for the
// API server only when they happened).
func (p bootPhases) logArgs() []any {
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	args := []any{"mounts", r(p.mounts), "containerd", r(p.containerd)}
	if p.images > 0 {
		args = append(args, "images", r(p.images))
	}
	if p.apiserver > 0 {
		args = append(args, "waited for apiserver", r(p.apiserver))
	}
	return append(args, "kubelet", r(p.kubelet))
}

// startRealNodes boots every node at once, in the background: each
// node's runtime at once, its kubelet once apiReady is closed. The
// function it returns waits for every node's kubelet to be started.
func (c *Cluster) startRealNodes(ctx context.Context, apiReady <-chan struct{}) func() error {
	errs := make([]chan error, len(c.nodes))
	for i, n := range c.nodes {
		errs[i] = make(chan error, 1)
		c.wg.Go(func() { errs[i] <- c.bootRealNode(ctx, n.Name, true, apiReady) })
	}
	return func() error {
		var all []error
		for _, e := range errs {
			select {
			case err := <-e:
				all = append(all, err)
			case <-ctx.Done():
				return fmt.Errorf("lab: booting the real nodes: %w", ctx.Err())
			}
		}
		return errors.Join(all...)
	}
}

// bootRealNode starts a node as a machine boots: its runtime
// (bootRuntime), then, once apiReady is closed (nil: at once), the
// kubelet, which starts the node's pods.
func (c *Cluster) bootRealNode(ctx context.Context, name string, first bool, apiReady <-chan struct{}) error {
	start := time.Now()
	ph, enter, err := c.bootRuntime(ctx, name, first)
	if err != nil {
		return err
	}
	if apiReady != nil {
		t := time.Now()
		select {
		case <-apiReady:
		case <-ctx.Done():
			return fmt.Errorf("lab: %s waiting for the apiserver: %w", name, ctx.Err())
		}
		ph.apiserver = time.Since(t)
	}
	t := time.Now()
	rn := c.real.nodes[name]
	kl := component{Name: "kubelet/" + name, Host: name, Path: c.real.nsent,
		Args: append(append(enter[:2:2], rn.Kubelet), rn.KubeletArgs()...)}
	if err := c.startComponent(kl); err != nil {
		return err
	}
	ph.kubelet = time.Since(t)
	c.log.Info("real node booted", append([]any{"node", name, "took", time.Since(start).Round(time.Millisecond)},
		append(ph.logArgs(), "elapsed", time.Since(c.start).Round(time.Millisecond))...)...)
	if first {
		c.wg.Go(func() { c.registered(ctx, name) })
	}
	return nil
}

// bootRuntime is the half of a boot that needs no API server: an empty
// run/ (a tmpfs on a real machine), on a reboot empty cgroups (a rebooted
// machine has no trace of its old containers' cgroups: left there, each
// costs the kubelet's cAdvisor 3.1 s of retries at start, during which
// the kubelet syncs no pod), the mount namespace, containerd and the
// images (first boot only: containerd's root is the node's disk). It
// returns the phases and the nsenter arguments that join the node's mount
// namespace.
func (c *Cluster) bootRuntime(ctx context.Context, name string, first bool) (bootPhases, []string, error) {
	var ph bootPhases
	rn := c.real.nodes[name]
	t := time.Now()
	if err := os.RemoveAll(rn.RunDir()); err != nil {
		return ph, nil, err
	}
	if !first {
		if err := errors.Join(realnode.RemoveCgroup(rn.CgroupParent, ""), realnode.CreateCgroup(rn.CgroupParent)); err != nil {
			return ph, nil, fmt.Errorf("lab: %s: fresh cgroups for the reboot: %w", name, err)
		}
	}
	for _, b := range rn.Binds() {
		if err := os.MkdirAll(b.Source, 0o755); err != nil {
			return ph, nil, err
		}
	}
	ready := filepath.Join(rn.RunDir(), "mounts.ready")
	args := []string{"--mount", "--propagation", "slave", "--", c.cfg.Self, "lab", "node-mounts", "--ready=" + ready}
	for _, b := range rn.Binds() {
		args = append(args, "--bind="+b.Source+"="+b.Target)
	}
	holder := component{Name: "node-mounts/" + name, Host: name, Path: "unshare", Args: args, Env: c.cfg.SelfEnv}
	if p, err := exec.LookPath("unshare"); err == nil {
		holder.Path = p
	}
	if err := c.startComponent(holder); err != nil {
		return ph, nil, err
	}
	pid, err := c.waitHolder(ctx, holder.Name, ready)
	if err != nil {
		return ph, nil, err
	}
	ph.mounts, t = time.Since(t), time.Now()
	enter := []string{"--mount=/proc/" + strconv.Itoa(pid) + "/ns/mnt", "--"}
	path := "PATH=" + rn.Containerd + ":" + os.Getenv("PATH")
	ctrd := component{Name: "containerd/" + name, Host: name, Path: c.real.nsent,
		Args: append(append(enter[:2:2], filepath.Join(rn.Containerd, "containerd")), rn.ContainerdArgs()...), Env: []string{path}}
	if err := c.startComponent(ctrd); err != nil {
		return ph, nil, err
	}
	if err := c.waitContainerd(ctx, rn, enter); err != nil {
		return ph, nil, err
	}
	ph.containerd, t = time.Since(t), time.Now()
	if first {
		if err := c.importImages(ctx, rn, enter); err != nil {
			return ph, nil, err
		}
		ph.images = time.Since(t)
	}
	return ph, enter, nil
}

// waitHolder waits for the mount namespace's first process to report its
// binds made, and returns its PID.
func (c *Cluster) waitHolder(ctx context.Context, name, ready string) (int, error) {
	err := poll(ctx, 10*time.Millisecond, func() (bool, error) {
		if c.exited(name) {
			return false, fmt.Errorf("lab: %s exited: %s", name, tailFile(filepath.Join(c.paths.Logs, logName(name)), 5))
		}
		_, err := os.Stat(ready)
		return err == nil, nil
	})
	if err != nil {
		return 0, err
	}
	return c.latestPID(name)
}

func (c *Cluster) waitContainerd(ctx context.Context, rn *realnode.Node, enter []string) error {
	var last error
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		if c.exited("containerd/" + rn.Name) {
			return false, fmt.Errorf("lab: containerd on %s exited: %s", rn.Name, tailFile(filepath.Join(c.paths.Logs, logName("containerd/"+rn.Name)), 5))
		}
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, last = c.ctr(actx, rn, enter, "version")
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("lab: containerd on %s not serving (last: %v): %w", rn.Name, last, err)
	}
	return nil
}

// importImages side-loads the lab's images into the node's containerd,
// as `ctr -n k8s.io images import` (the k8s.io namespace is the CRI's).
func (c *Cluster) importImages(ctx context.Context, rn *realnode.Node, enter []string) error {
	for _, img := range c.real.images {
		start := time.Now()
		if _, err := c.ctr(ctx, rn, enter, "images", "import", "--base-name", img.Repository, img.Archive); err != nil {
			return err
		}
		c.log.Debug("image imported", "node", rn.Name, "image", img.Ref(), "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}
