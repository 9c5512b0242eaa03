package labtest

import (
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"time"

	"github.com/vishvananda/netns"
)

// GetFromPod sends one HTTP/1.0 GET from inside the network namespace of
// process pid (a pod's) and returns the body's first line.
func GetFromPod(pid int, to netip.AddrPort, timeout time.Duration) (string, error) {
	type res struct {
		body string
		err  error
	}
	done := make(chan res, 1)
	go func() {
		// The thread enters the pod and dies with this goroutine (never
		// unlocked): the socket is created there, and no other goroutine
		// runs in the pod's namespace.
		runtime.LockOSThread()
		ns, err := netns.GetFromPid(pid)
		if err != nil {
			done <- res{err: err}
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			done <- res{err: err}
			return
		}
		conn, err := (&net.Dialer{Timeout: timeout}).Dial("tcp", to.String())
		if err != nil {
			done <- res{err: err}
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(timeout))
		if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\nHost: e2e\r\n\r\n"); err != nil {
			done <- res{err: err}
			return
		}
		b, err := io.ReadAll(conn)
		_, body, _ := strings.Cut(string(b), "\r\n\r\n")
		line, _, _ := strings.Cut(body, "\n")
		done <- res{body: line, err: err}
	}()
	r := <-done
	return r.body, r.err
}
