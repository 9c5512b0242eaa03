package ipamd

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// roundTrip sends req on a new connection to the unix socket and returns
// everything the agent writes back until it closes the connection.
//
// It uses blocking system calls on a plain file descriptor instead of
// package net: the plugin is a process per CNI call, and the first net.Conn
// of a process creates the runtime's epoll instance and its event fd, a
// goroutine to watch the dial's context, and hands each wake-up from one
// thread to another. Here the one thread that sends the request sleeps in
// read(2) until the agent answers, which removes those steps and the
// threads' wake-ups from every pod start. The deadline is enforced with
// SO_SNDTIMEO (it bounds connect(2) on unix sockets too) and SO_RCVTIMEO.
func roundTrip(socket string, deadline time.Time, req []byte) ([]byte, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	defer syscall.Close(fd)
	// Each attempt (and each retry after a signal) gets what is left of
	// the deadline, so the calls together never outlast it.
	if err := retry(func() error {
		if err := setTimeout(fd, syscall.SO_SNDTIMEO, deadline); err != nil {
			return err
		}
		return syscall.Connect(fd, &syscall.SockaddrUnix{Name: socket})
	}); err != nil {
		return nil, &os.PathError{Op: "connect", Path: socket, Err: timeoutErr(err)}
	}
	for len(req) > 0 {
		var n int
		if err := retry(func() (err error) {
			if err := setTimeout(fd, syscall.SO_SNDTIMEO, deadline); err != nil {
				return err
			}
			n, err = syscall.Write(fd, req)
			return err
		}); err != nil {
			return nil, os.NewSyscallError("write", timeoutErr(err))
		}
		req = req[n:]
	}
	out := make([]byte, 0, 1024)
	for {
		if len(out) == cap(out) {
			out = append(out, 0)[:len(out)]
		}
		var n int
		if err := retry(func() (err error) {
			if err := setTimeout(fd, syscall.SO_RCVTIMEO, deadline); err != nil {
				return err
			}
			n, err = syscall.Read(fd, out[len(out):cap(out)])
			return err
		}); err != nil {
			return nil, os.NewSyscallError("read", timeoutErr(err))
		}
		if n == 0 {
			return out, nil
		}
		out = out[:len(out)+n]
	}
}

// retry repeats a system call that a signal interrupted: with a timeout
// set on the socket, the kernel does not restart it by itself.
func retry(call func() error) error {
	for {
		if err := call(); !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func setTimeout(fd, opt int, deadline time.Time) error {
	left := time.Until(deadline)
	if left <= 0 {
		return os.ErrDeadlineExceeded
	}
	tv := syscall.NsecToTimeval(max(left.Nanoseconds(), int64(time.Microsecond)))
	return os.NewSyscallError("setsockopt", syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, opt, &tv))
}

// timeoutErr names a socket timeout for what it is.
func timeoutErr(err error) error {
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINPROGRESS) {
		return fmt.Errorf("%w (%v)", os.ErrDeadlineExceeded, err)
	}
	return err
}
