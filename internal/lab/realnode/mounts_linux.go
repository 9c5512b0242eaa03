package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// HoldMounts is `mooring lab node-mounts`, the first process of a node:
// started by `unshare --mount --propagation slave` (a new mount namespace
// in which the host's mounts still appear, and nothing made here leaks
// out), it bind-mounts the node's private folders over the host paths,
// writes ready, and holds the namespace until it is killed. containerd and
// the kubelet join it with `nsenter --mount=/proc/<pid>/ns/mnt` (not `ip
// netns exec`, which remounts /sys and hides the cgroup mounts). When every
// process of the node is gone, so is the namespace and every mount in it:
// a killed node, like a rebooted machine, leaves no mount behind.
func HoldMounts(ctx context.Context, binds []Bind, ready string) error {
	same, err := sameMountNS("/proc/self/ns/mnt", fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if err != nil {
		return err
	}
	if same {
		return errors.New("realnode: node-mounts runs in its parent's mount namespace: start it with `unshare --mount --propagation slave`")
	}
	for _, b := range binds {
		if err := unix.Mount(b.Source, b.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("realnode: bind-mounting %s over %s: %w", b.Source, b.Target, err)
		}
	}
	if err := os.WriteFile(ready, []byte("ready\n"), 0o644); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func sameMountNS(a, b string) (bool, error) {
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		return false, err
	}
	if err := unix.Stat(b, &sb); err != nil {
		return false, err
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino, nil
}
