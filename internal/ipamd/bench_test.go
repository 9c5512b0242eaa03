package ipamd

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkAddDelOverSocket is one plugin call's agent side: an ADD and a
// DEL through the client, the unix socket, the allocator and the store.
func BenchmarkAddDelOverSocket(b *testing.B) {
	dir := b.TempDir()
	st, err := OpenFileStore(filepath.Join(dir, "store"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	al, err := NewAllocator(st, nil)
	if err != nil {
		b.Fatal(err)
	}
	al.SetPools(dual())
	ctx, cancel := context.WithCancel(context.Background())
	sock := filepath.Join(dir, "s.sock")
	done := make(chan error, 1)
	go func() { done <- (&Server{Alloc: al, Socket: sock}).Run(ctx) }()
	defer func() { cancel(); <-done }()
	cl := NewClient(sock)
	for range 200 {
		if err := cl.Status(ctx); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.ResetTimer()
	for i := range b.N {
		k := Key{ContainerID: fmt.Sprint(i), IfName: "eth0"}
		if _, err := cl.Add(ctx, AddRequest{Key: k}); err != nil {
			b.Fatal(err)
		}
		if err := cl.Del(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
}
