package bgpspeaker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"syscall"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/bgpspeaker"
	"github.com/mooringlb/mooring/internal/netlab"
)

// A speaker under test runs as its own process inside a node's namespace
// (GoBGP's goroutines would otherwise wander across the test binary's
// threads and namespaces), exactly as the agent runs on a node: SIGTERM
// shuts it down gracefully, SIGKILL is a crash. The test binary re-executes
// itself in child mode and drives it with one JSON command per line.

const childEnv = "MOORING_BGPSPEAKER_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "1":
		os.Exit(childMain())
	case "garbage":
		os.Exit(garbageMain())
	case "web":
		os.Exit(webMain())
	case "client":
		os.Exit(clientMain())
	}
	os.Exit(m.Run())
}

type command struct {
	Op      string              `json:"op"` // apply, status
	Desired *bgpspeaker.Desired `json:"desired,omitempty"`
}

type reply struct {
	Err      string                    `json:"err,omitempty"`
	Sessions []bgpspeaker.SessionState `json:"sessions,omitempty"`
	// HeapInuse is the child's heap after a GC (op "mem").
	HeapInuse uint64 `json:"heapInuse,omitempty"`
}

// childMain serves commands on stdin until EOF or SIGTERM.
func childMain() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sp := bgpspeaker.New(bgpspeaker.NewGoBGP(log, bgpspeaker.KernelProber{}), log, -1)
	ctx := context.Background()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	lines := make(chan []byte)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			lines <- append([]byte(nil), sc.Bytes()...)
		}
		close(lines)
	}()
	enc := json.NewEncoder(os.Stdout)
	for {
		select {
		case <-term:
			err := sp.Shutdown(ctx, true)
			log.Info("SIGTERM: stopped gracefully", "error", err)
			return 0
		case line, ok := <-lines:
			if !ok {
				return 0
			}
			_ = enc.Encode(serve(ctx, sp, line))
		}
	}
}

func serve(ctx context.Context, sp *bgpspeaker.Speaker, line []byte) reply {
	var c command
	if err := json.Unmarshal(line, &c); err != nil {
		return reply{Err: err.Error()}
	}
	switch c.Op {
	case "apply":
		if err := sp.Apply(ctx, *c.Desired); err != nil {
			return reply{Err: err.Error()}
		}
		return reply{}
	case "mem":
		runtime.GC()
		debug.FreeOSMemory()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return reply{HeapInuse: m.HeapInuse}
	case "status":
		s, err := sp.Status(ctx)
		if err != nil {
			return reply{Err: err.Error()}
		}
		return reply{Sessions: s}
	}
	return reply{Err: "unknown op " + c.Op}
}

// speakerProc is a running child speaker.
type speakerProc struct {
	t    testing.TB
	host *netlab.Host
	proc *netlab.Process
	in   io.WriteCloser
	out  chan []byte // one reply per line; closed when the child exits
	log  string
}

// startSpeaker starts a child speaker in host.
func startSpeaker(t testing.TB, host *netlab.Host) *speakerProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logf := filepath.Join(t.TempDir(), "speaker-"+host.Name+".log")
	f, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = f
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := host.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	s := &speakerProc{t: t, host: host, proc: p, in: in, out: make(chan []byte, 1), log: logf}
	go func() {
		defer close(s.out)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			s.out <- append([]byte(nil), sc.Bytes()...)
		}
	}()
	t.Cleanup(func() {
		_ = p.Kill()
		_ = p.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("speaker %s log tail:\n%s", host.Name, b)
		}
	})
	return s
}

func (s *speakerProc) call(c command) (reply, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return reply{}, err
	}
	if _, err := s.in.Write(append(b, '\n')); err != nil {
		return reply{}, fmt.Errorf("speaker %s: %w", s.host.Name, err)
	}
	var line []byte
	select {
	case l, ok := <-s.out:
		if !ok {
			return reply{}, fmt.Errorf("speaker %s exited", s.host.Name)
		}
		line = l
	case <-time.After(30 * time.Second):
		return reply{}, fmt.Errorf("speaker %s: no answer in 30 s", s.host.Name)
	}
	var r reply
	if err := json.Unmarshal(line, &r); err != nil {
		return reply{}, err
	}
	if r.Err != "" {
		return r, fmt.Errorf("speaker %s: %s", s.host.Name, r.Err)
	}
	return r, nil
}

func (s *speakerProc) apply(d bgpspeaker.Desired) {
	s.t.Helper()
	if _, err := s.call(command{Op: "apply", Desired: &d}); err != nil {
		s.t.Fatal(err)
	}
}

func (s *speakerProc) status() []bgpspeaker.SessionState {
	s.t.Helper()
	r, err := s.call(command{Op: "status"})
	if err != nil {
		s.t.Fatal(err)
	}
	return r.Sessions
}

// session returns the named session's state.
func (s *speakerProc) session(peer string) (bgpspeaker.SessionState, bool) {
	for _, st := range s.status() {
		if st.Peer == peer {
			return st, true
		}
	}
	return bgpspeaker.SessionState{}, false
}

// terminate sends SIGTERM and waits for the exit.
func (s *speakerProc) terminate() {
	s.t.Helper()
	if err := syscall.Kill(s.proc.PID, syscall.SIGTERM); err != nil {
		s.t.Fatal(err)
	}
	select {
	case <-s.proc.Done():
	case <-time.After(10 * time.Second):
		s.t.Fatalf("speaker %s did not exit within 10 s of SIGTERM", s.host.Name)
	}
}

// kill sends SIGKILL and waits for the exit.
func (s *speakerProc) kill() {
	s.t.Helper()
	_ = s.proc.Kill()
	<-s.proc.Done()
}
