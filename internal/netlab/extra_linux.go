package netlab

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// This file adds hosts beyond the nodes and the client — the one-machine
// lab's "control-plane" namespace, routers — without changing how New
// builds a lab.

// AttachHost adds a host named name to the bridge at address offset off
// (1-10: the offsets the package leaves free for such hosts; same offset in
// both subnets, so 2 is 10.213.0.2 and fd00:213::2 with the defaults).
// sysctls are written before its veth appears, as for nodes.
//
// The lab does not own the new host: Lab.Close removes its bridge port but
// not its processes or namespace. The caller must call Release on it (before
// or after Lab.Close). AttachHost returns once the host's links are up.
func (l *Lab) AttachHost(ctx context.Context, name string, off int, sysctls map[string]string) (*Host, error) {
	if off < 1 || off > nodeOffsetBase {
		return nil, fmt.Errorf("netlab: AttachHost %s: offset %d, want 1..%d", name, off, nodeOffsetBase)
	}
	if name == "" || len(name) > 15 || l.Host(name) != nil {
		return nil, fmt.Errorf("netlab: AttachHost: name %q is empty, longer than 15 characters or taken", name)
	}
	for k := range sysctls {
		if _, err := sysctlPath(k); err != nil {
			return nil, err
		}
	}
	spec := hostSpec{
		name:    name,
		addr4:   addOffset(l.cfg.Subnet4.Addr(), off),
		addr6:   addOffset(l.cfg.Subnet6.Addr(), off),
		sysctls: sysctls,
	}
	var index int
	err := l.bridge.withNL(func(nl *netlink.Handle) error {
		br, err := nl.LinkByName(l.cfg.Bridge)
		if err == nil {
			index = br.Attrs().Index
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netlab: AttachHost %s: finding bridge: %w", name, err)
	}
	h, err := l.addHost(spec, index, hostMAC(spec))
	if err != nil {
		if h != nil {
			err = errors.Join(err, h.Release())
		}
		return nil, err
	}
	if err := l.waitHostUp(ctx, h); err != nil {
		return nil, errors.Join(err, h.Release())
	}
	return h, nil
}

// waitHostUp polls until h's bridge port and eth0 are operationally up.
func (l *Lab) waitHostUp(ctx context.Context, h *Host) error {
	ctx, cancel := context.WithTimeout(ctx, defaultReadyTimeout)
	defer cancel()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		up := true
		err := l.bridge.withNL(func(nl *netlink.Handle) error {
			port, err := nl.LinkByName(h.Name)
			if err != nil {
				return err
			}
			up = port.Attrs().OperState == netlink.OperUp
			return nil
		})
		if err == nil && up {
			err = h.withNL(func(nl *netlink.Handle) error {
				link, err := nl.LinkByIndex(h.IfIndex)
				if err == nil {
					up = link.Attrs().OperState == netlink.OperUp
				}
				return err
			})
		}
		if err != nil {
			return fmt.Errorf("netlab: %s: reading links: %w", h.Name, err)
		}
		if up {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("netlab: %s not operationally up: %w", h.Name, ctx.Err())
		case <-t.C:
		}
	}
}

// Release kills every process started in h (as Lab.Close does), ends its
// worker thread and drops its namespace. Only for hosts from AttachHost;
// it is idempotent.
func (h *Host) Release() error {
	return errors.Join(h.stopProcesses(), h.close())
}

// WorkerTID is the kernel thread ID of the host's worker thread, which stays
// inside the host's namespace for the life of the lab: another process can
// enter the namespace through /proc/<pid>/task/<tid>/ns/net even when no
// process of the host is running.
func (h *Host) WorkerTID() (int, error) {
	var tid int
	err := h.Do(func() error {
		tid = unix.Gettid()
		return nil
	})
	return tid, err
}
