package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// ControllerManager is a running kube-controller-manager with the
// endpointslice and node-lifecycle controllers: what turns Pods into
// EndpointSlices and marks a silent Node NotReady (phase 2 of a failover).
type ControllerManager struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// KCMOptions tunes kube-controller-manager for tests and the lab.
type KCMOptions struct {
	// NodeMonitorGracePeriod is how long a Node may stay silent before it is
	// marked NotReady (Kubernetes' default is 50s).
	NodeMonitorGracePeriod time.Duration
	// Log receives the process's output; nil discards it.
	Log *os.File
}

// StartControllerManager runs kube-controller-manager against the
// environment, with its own admin kubeconfig written into dir.
func (e *Env) StartControllerManager(dir string, opt KCMOptions) (*ControllerManager, error) {
	kc, err := e.KubeconfigFile(dir, "kube-controller-manager")
	if err != nil {
		return nil, err
	}
	return StartControllerManager(filepath.Join(e.BinDir, "kube-controller-manager"), kc, opt)
}

// StartControllerManager runs the binary at path with kubeconfig kc.
func StartControllerManager(path, kc string, opt KCMOptions) (*ControllerManager, error) {
	args := []string{
		"--kubeconfig=" + kc,
		"--controllers=endpointslice-controller,node-lifecycle-controller",
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--secure-port=0",
		"--concurrent-service-endpoint-syncs=5",
	}
	if opt.NodeMonitorGracePeriod > 0 {
		args = append(args, fmt.Sprintf("--node-monitor-grace-period=%s", opt.NodeMonitorGracePeriod))
	}
	cmd := exec.Command(path, args...)
	if opt.Log != nil {
		cmd.Stdout, cmd.Stderr = opt.Log, opt.Log
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start kube-controller-manager: %w", err)
	}
	cm := &ControllerManager{cmd: cmd, done: make(chan struct{})}
	go func() {
		cm.err = cmd.Wait()
		close(cm.done)
	}()
	return cm, nil
}

// Stop kills the process and waits for it.
func (c *ControllerManager) Stop(ctx context.Context) error {
	_ = c.cmd.Process.Kill()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Exited is closed when the process has exited; Err then says how.
func (c *ControllerManager) Exited() <-chan struct{} { return c.done }

// Err is the process's exit status; valid once Exited is closed.
func (c *ControllerManager) Err() error { return c.err }
