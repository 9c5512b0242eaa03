package memory

import (
	"runtime"
	"testing"
)

// sampled is the number of allocations the heap profile has recorded so
// far (published a cycle or two after a collection: three are run first).
func sampled() int64 {
	for range 3 {
		runtime.GC()
	}
	n, _ := runtime.MemProfile(nil, true)
	recs := make([]runtime.MemProfileRecord, n+50)
	n, _ = runtime.MemProfile(recs, true)
	var b int64
	for _, r := range recs[:n] {
		b += r.AllocObjects
	}
	return b
}

var sink [][]byte

// allocate allocates 64 MiB in 64 KiB pieces: at the default rate the
// profile records ~128 of them.
func allocate() {
	for range 1024 {
		sink = append(sink, make([]byte, 64<<10))
	}
	sink = nil
}

// TestTuneProfiling: with profiles served the heap profile samples 1,024
// allocations of 64 KiB (one every 512 KiB on average: ~128); not served,
// next to none of the same (a record or two published late from before
// the switch).
func TestTuneProfiling(t *testing.T) {
	t.Setenv("GODEBUG", "")
	defer func(r int) { runtime.MemProfileRate = r }(runtime.MemProfileRate)
	TuneProfiling(true)
	before := sampled()
	allocate()
	if got := sampled() - before; got < 32 {
		t.Fatalf("profiles served: %d of 1,024 allocations of 64 KiB recorded; want ~128", got)
	}
	TuneProfiling(false)
	before = sampled()
	allocate()
	if got := sampled() - before; got >= 8 {
		t.Errorf("profiles not served: %d of 1,024 allocations of 64 KiB recorded; want next to none", got)
	}
}
