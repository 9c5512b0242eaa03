package lab

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// The faults the BGP lab's restart tests inject into single processes
// (docs/bgp.md, "Graceful restart and BFD"; docs/benchmarks.md).

// KillAgent kills node's Mooring agent with SIGKILL, as a crash or the
// OOM killer would: no shutdown at all, the kernel closes its sockets.
// StartAgent starts it again.
func (c *Cluster) KillAgent(node string) error {
	return c.stopComponent("mooring-agent/"+node, 0)
}

// PauseAPIServer stops the API server (SIGSTOP to its process group): its
// connections stay open and nothing answers, as with a hung or
// partitioned control plane. ResumeAPIServer lets it go on.
func (c *Cluster) PauseAPIServer() error { return c.signalComponent("kube-apiserver", unix.SIGSTOP) }

// ResumeAPIServer continues the API server after PauseAPIServer.
func (c *Cluster) ResumeAPIServer() error { return c.signalComponent("kube-apiserver", unix.SIGCONT) }

// signalComponent sends sig to the process group of every running process
// of the component called name; it is an error when none runs.
func (c *Cluster) signalComponent(name string, sig unix.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.procs {
		select {
		case <-p.p.Done():
			continue
		default:
		}
		if p.comp.Name != name {
			continue
		}
		if err := unix.Kill(-p.p.PID, sig); err != nil {
			return fmt.Errorf("lab: %s to %s (process group %d): %w", unix.SignalName(sig), name, p.p.PID, err)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("lab: no process %s", name)
	}
	return nil
}
