package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Exec replaces the calling process with argv, run inside the network
// namespace at nsPath (see Handle.NetNSPath). It returns only on error.
//
// setns changes only the calling thread, and execve keeps the calling
// thread's namespaces for the new program, so the thread is locked and
// never unlocked: on error the process is about to exit anyway.
func Exec(nsPath string, argv []string) error {
	if len(argv) == 0 {
		return errors.New("lab: no command given: use mooring lab exec <host> -- <command> [args...]")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("lab: %w", err) // exec.LookPath's error says "exec: ..."
	}
	runtime.LockOSThread()
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("lab: opening %s: %w", nsPath, err)
	}
	err = unix.Setns(fd, unix.CLONE_NEWNET)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("lab: entering %s: %w", nsPath, err)
	}
	return fmt.Errorf("lab: running %s: %w", path, syscall.Exec(path, argv, os.Environ()))
}
