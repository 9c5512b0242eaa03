package ipamd

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lockDir takes an exclusive, non-blocking flock on path. The kernel drops
// it when the process dies, so a crashed ipamd never leaves it stale.
func lockDir(path string) (func() error, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("ipamd: open lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s): stop the other agent on this node first", ErrLocked, path)
		}
		return nil, fmt.Errorf("ipamd: lock %s: %w", path, err)
	}
	return f.Close, nil
}
