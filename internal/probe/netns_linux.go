package probe

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
)

// Netns makes the request from inside the pod's own network namespace: the
// probe enters it (the pod must run on this machine, as the lab's pods do)
// and connects from there, so the path is exactly the pod's.
type Netns struct{}

// Request implements Requester. The socket is created on a thread locked
// into the pod's namespace; that thread is never unlocked, so the runtime
// discards it when the goroutine ends and no other code runs in the pod's
// namespace by accident.
func (Netns) Request(ctx context.Context, from *corev1.Pod, to netip.AddrPort) error {
	pid, err := podPID(from)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := netns.GetFromPid(pid)
		if err != nil {
			done <- fmt.Errorf("pod %s (pid %d) network namespace: %w", from.Name, pid, err)
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			done <- fmt.Errorf("entering pod %s's network namespace: %w", from.Name, err)
			return
		}
		d := net.Dialer{Timeout: dialTimeout}
		c, err := d.DialContext(ctx, "tcp", to.String())
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		done <- httpGet(ctx, c, to.String())
	}()
	return <-done
}
