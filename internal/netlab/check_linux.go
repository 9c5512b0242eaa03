package netlab

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Check reports whether this process can build a lab: it creates (and
// drops) a network namespace and opens a packet socket inside it. The error
// wraps ErrPrivileges and the system's reason.
func Check() error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends up in a throw-away namespace, so
		// it must die with this goroutine rather than run other code.
		runtime.LockOSThread()
		ns, err := netns.New()
		if err != nil {
			errc <- fmt.Errorf("%w: creating a network namespace: %w", ErrPrivileges, err)
			return
		}
		defer ns.Close()
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("%w: opening a packet socket: %w", ErrPrivileges, err)
			return
		}
		unix.Close(fd)
		errc <- nil
	}()
	return <-errc
}
