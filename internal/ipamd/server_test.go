package ipamd

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/podipam"
)

// syncBuffer is a bytes.Buffer the server's goroutines may write to while
// the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServerLogsEveryGC: each GC the agent serves leaves one log line with
// what it freed, also when it freed nothing, so that the agent's log shows
// whether a runtime calls GC at all (the real-node test counts them); a
// refused GC is a warning instead.
func TestServerLogsEveryGC(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenFileStore(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	al, err := NewAllocator(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	al.SetPools(map[string]Pool{"default": {Families: []podipam.Family{podipam.IPv4},
		Blocks: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/24")}}})
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	sock := filepath.Join(dir, "s.sock")
	done := make(chan error, 1)
	srv := &Server{Alloc: al, Socket: sock, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	go func() { done <- srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	cl := NewClient(sock).WithTimeout(5 * time.Second)
	for range 400 {
		if err := cl.Status(context.Background()); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	kept := Key{Network: "pods", ContainerID: "kept", IfName: "eth0"}
	for _, k := range []Key{kept, {Network: "pods", ContainerID: "gone", IfName: "eth0"}} {
		if _, err := cl.Add(context.Background(), AddRequest{Key: k, Namespace: "ns", Pod: k.ContainerID}); err != nil {
			t.Fatal(err)
		}
	}
	if gc, err := cl.GC(context.Background(), "pods", []Key{kept}); err != nil || len(gc.Freed) != 1 {
		t.Fatalf("first GC freed %v, %v; want gone's allocation", gc.Freed, err)
	}
	if gc, err := cl.GC(context.Background(), "pods", []Key{kept}); err != nil || len(gc.Freed) != 0 {
		t.Fatalf("second GC freed %v, %v; want nothing", gc.Freed, err)
	}
	if _, err := cl.GC(context.Background(), "", []Key{kept}); err == nil {
		t.Fatal("a GC without the network's name was served")
	}
	out := logs.String()
	for _, want := range []string{
		`msg="CNI GC served" network=pods valid=1 freed=1`,
		`msg="CNI GC served" network=pods valid=1 freed=0`,
		`level=WARN msg="CNI GC refused" network=""`,
	} {
		if strings.Count(out, want) != 1 {
			t.Errorf("the log holds %q %d times, want once:\n%s", want, strings.Count(out, want), out)
		}
	}
}
