package agent

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A stopping agent does not wait for a part that ignores the end (a
// reflector sleeping out its backoff) longer than the grace; a part's own
// error, before or after the end, is returned.
func TestUntilDone(t *testing.T) {
	boom := errors.New("boom")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stuck := make(chan struct{})
	defer close(stuck)
	if err := untilDone(ctx, 10*time.Millisecond, func(context.Context) error { <-stuck; return boom }); err != nil {
		t.Fatalf("a part stuck past the grace: %v, want nil", err)
	}
	if err := untilDone(ctx, time.Minute, func(ctx context.Context) error { <-ctx.Done(); return boom }); !errors.Is(err, boom) {
		t.Fatalf("a part that ends with the context: %v, want its error", err)
	}
	if err := untilDone(context.Background(), time.Minute, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("a part that fails while running: %v, want its error", err)
	}
}
