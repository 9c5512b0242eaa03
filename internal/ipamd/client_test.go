package ipamd

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/podipam"
)

// The client's plain-syscall round trip: answers of any length, an agent
// that never answers (bounded by the timeout), one that hangs up without
// a whole answer, and no agent at all are each an UnreachableError except
// the answer; the Server's Observe sees each phase in order.
func TestClientRoundTrip(t *testing.T) {
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
	al.SetPools(map[string]Pool{"default": {Families: []podipam.Family{podipam.IPv4, podipam.IPv6},
		Blocks: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/24"), netip.MustParsePrefix("fd00:9::/120")}}})
	ctx, cancel := context.WithCancel(context.Background())
	sock := filepath.Join(dir, "s.sock")
	seen := make(chan CallTimes, 1000)
	done := make(chan error, 1)
	go func() { done <- (&Server{Alloc: al, Socket: sock, Observe: func(c CallTimes) { seen <- c }}).Run(ctx) }()
	defer func() { cancel(); <-done }()
	cl := NewClient(sock).WithTimeout(5 * time.Second)
	for range 400 {
		if err := cl.Status(context.Background()); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Enough allocations that GC's answer is longer than the first read.
	for i := range 40 {
		if _, err := cl.Add(context.Background(), AddRequest{Key: Key{Network: "pods", ContainerID: "c" + string(rune('A'+i)), IfName: "eth0"}, Namespace: "ns", Pod: "p"}); err != nil {
			t.Fatal(err)
		}
	}
	gc, err := cl.GC(context.Background(), "pods", []Key{})
	if err != nil || len(gc.Freed) != 40 {
		t.Fatalf("GC freed %d, %v; want 40", len(gc.Freed), err)
	}
	var c CallTimes
	for len(seen) > 0 {
		c = <-seen
	}
	if c.Op != OpGC || c.Accepted.After(c.Decoded) || c.Decoded.After(c.Handled) || c.Handled.After(c.Replied) {
		t.Fatalf("last call's times out of order: %+v", c)
	}
	if _, err := cl.Check(context.Background(), Key{ContainerID: "none", IfName: "eth0"}); !errors.As(err, new(*CallError)) {
		t.Fatalf("CHECK of nothing: %v, want a CallError", err)
	}

	// An agent that accepts and never answers: the timeout ends the call.
	silent := filepath.Join(dir, "silent.sock")
	l, err := net.Listen("unix", silent)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	hangUp := make(chan bool, 4)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			if <-hangUp {
				_, _ = conn.Write([]byte(`{"allocation":`))
				conn.Close()
			} else {
				defer conn.Close()
			}
		}
	}()
	hangUp <- false
	start := time.Now()
	_, err = NewClient(silent).WithTimeout(200*time.Millisecond).Add(context.Background(), AddRequest{Key: Key{ContainerID: "x", IfName: "eth0"}})
	var un *UnreachableError
	if !errors.As(err, &un) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("silent agent: %v, want an UnreachableError for the deadline", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("silent agent: gave up after %s, before the 200ms timeout", d)
	}
	hangUp <- true
	if _, err := NewClient(silent).Add(context.Background(), AddRequest{Key: Key{ContainerID: "x", IfName: "eth0"}}); !errors.As(err, &un) {
		t.Fatalf("agent hung up mid-answer: %v, want an UnreachableError", err)
	}
	if err := NewClient(filepath.Join(dir, "nothing.sock")).Status(context.Background()); !errors.As(err, &un) {
		t.Fatalf("no agent: %v, want an UnreachableError", err)
	}
	done2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := cl.Status(done2); !errors.As(err, &un) {
		t.Fatalf("cancelled context: %v, want an UnreachableError", err)
	}
}
