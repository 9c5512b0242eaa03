package cni_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/ipamd"
)

// agentEnv makes the test binary an ipamd agent process (see TestMain):
// the latency benchmark runs its agent as its own process, as production
// does, so the test's own goroutines and garbage collector do not run in
// the agent between a plugin's connect and its answer.
const agentEnv = "MOORING_CNITEST_AGENT_DIR"

// runAgentProcess serves ipamd with a file store in dir on dir/ipamd.sock
// with pools(), until SIGTERM or until its stdin closes (the test died).
// Each call's timings go to stdout, one line per call:
// op containerID accepted decoded handled replied (Unix nanoseconds).
func runAgentProcess(dir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	st, err := ipamd.OpenFileStore(filepath.Join(dir, "store"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer st.Close()
	al, err := ipamd.NewAllocator(st, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	al.SetPools(pools())
	lines := make(chan ipamd.CallTimes, 4096)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // off the calls' path: the answer is already written
		defer wg.Done()
		w := bufio.NewWriter(os.Stdout)
		for c := range lines {
			fmt.Fprintf(w, "%s %s %d %d %d %d\n", c.Op, c.Key.ContainerID, c.Accepted.UnixNano(), c.Decoded.UnixNano(), c.Handled.UnixNano(), c.Replied.UnixNano())
			if len(lines) == 0 {
				_ = w.Flush()
			}
		}
		_ = w.Flush()
	}()
	srv := &ipamd.Server{Alloc: al, Socket: filepath.Join(dir, "ipamd.sock"), Observe: func(c ipamd.CallTimes) { lines <- c }}
	err = srv.Run(ctx)
	close(lines)
	wg.Wait()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// agentProc is an ipamd agent running as a child process of the test.
type agentProc struct {
	sock  string
	cmd   *exec.Cmd
	stdin io.Closer
	mu    sync.Mutex
	calls map[string]ipamd.CallTimes // "op containerID" → timings
	got   *sync.Cond
	done  chan struct{}
}

func startAgentProcess(t testing.TB, dir string) *agentProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	a := &agentProc{sock: filepath.Join(dir, "ipamd.sock"), calls: map[string]ipamd.CallTimes{}, done: make(chan struct{})}
	a.got = sync.NewCond(&a.mu)
	a.cmd = exec.Command(self)
	a.cmd.Env = append(os.Environ(), agentEnv+"="+dir)
	a.cmd.Stderr = os.Stderr
	in, err := a.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.stdin = in
	go a.read(out)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", a.sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			a.stop()
			t.Fatal("the agent process's socket never came up")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return a
}

func (a *agentProc) read(r io.Reader) {
	defer close(a.done)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 6 {
			continue
		}
		var ts [4]time.Time
		for i := range ts {
			ns, _ := strconv.ParseInt(f[2+i], 10, 64)
			ts[i] = time.Unix(0, ns)
		}
		a.mu.Lock()
		a.calls[f[0]+" "+f[1]] = ipamd.CallTimes{Op: f[0], Key: ipamd.Key{ContainerID: f[1]}, Accepted: ts[0], Decoded: ts[1], Handled: ts[2], Replied: ts[3]}
		a.got.Broadcast()
		a.mu.Unlock()
	}
	a.mu.Lock()
	a.got.Broadcast()
	a.mu.Unlock()
}

// call waits for (and forgets) the timings of the agent's call op for
// containerID; false when the agent exited without reporting it.
func (a *agentProc) call(op, containerID string) (ipamd.CallTimes, bool) {
	k := op + " " + containerID
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		if c, ok := a.calls[k]; ok {
			delete(a.calls, k)
			return c, true
		}
		select {
		case <-a.done:
			return ipamd.CallTimes{}, false
		default:
		}
		a.got.Wait()
	}
}

func (a *agentProc) stop() error {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	a.stdin.Close()
	<-a.done
	return a.cmd.Wait()
}
