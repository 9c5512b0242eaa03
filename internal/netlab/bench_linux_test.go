package netlab

import (
	"context"
	"testing"
	"time"
)

// BenchmarkLab measures building a 3-node lab (ready to send frames) and
// tearing it down again.
func BenchmarkLab(b *testing.B) {
	RequirePrivileges(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for b.Loop() {
		l, err := New(ctx, Config{Nodes: 3})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
