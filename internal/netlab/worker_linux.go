package netlab

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/vishvananda/netns"
)

// worker owns one OS thread that lives inside one network namespace for the
// whole life of the lab. It exists because three things depend on the
// calling thread rather than the process: the namespace a new socket joins,
// the namespace /proc/sys/net shows, and the thread whose exit fires a child's
// Pdeathsig (Go issue 27505). Doing all of them here keeps them consistent.
type worker struct {
	ns    netns.NsHandle // the namespace the thread unshared into
	calls chan func()
	stop  chan struct{}
	done  chan struct{} // closed when the thread has left run
	once  sync.Once
}

// newWorker starts a worker in a fresh, unnamed network namespace.
func newWorker() (*worker, error) {
	w := &worker{
		calls: make(chan func()),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	ready := make(chan error, 1)
	go w.run(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return w, nil
}

func (w *worker) run(ready chan<- error) {
	defer close(w.done)
	// Never unlocked: once the thread has unshared it must not run other
	// goroutines. Returning while locked makes the runtime terminate the
	// thread, which is how the namespace (and Pdeathsig) lets go.
	runtime.LockOSThread()
	ns, err := netns.New()
	if err != nil {
		ready <- fmt.Errorf("netlab: creating a network namespace: %w", err)
		return
	}
	w.ns = ns
	ready <- nil
	for {
		select {
		case fn := <-w.calls:
			fn()
		case <-w.stop:
			return
		}
	}
}

// do runs fn on the worker thread and returns its error. It refuses to run
// fn if the thread is somehow no longer in its namespace, because a socket
// opened there would silently belong to another namespace.
func (w *worker) do(fn func() error) error {
	errc := make(chan error, 1)
	call := func() {
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("netlab: panic in namespace worker: %v", r)
			}
		}()
		cur, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("netlab: reading the worker thread's namespace: %w", err)
			return
		}
		same := cur.Equal(w.ns)
		cur.Close()
		if !same {
			errc <- errors.New("netlab: worker thread is not in its namespace; refusing to run")
			return
		}
		errc <- fn()
	}
	select {
	case w.calls <- call:
		return <-errc
	case <-w.done:
		return ErrClosed
	}
}

// close ends the worker thread and then releases the namespace handle. The
// namespace itself disappears once no process, thread, socket or handle
// refers to it.
func (w *worker) close() error {
	var err error
	w.once.Do(func() {
		close(w.stop)
		<-w.done
		err = w.ns.Close()
	})
	return err
}
