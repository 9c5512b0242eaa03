package frr

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/netlab"
)

// StartForTest starts a router in h for t and stops it in t.Cleanup,
// printing the daemons' logs first when t failed. It skips t when FRR is
// not installed, except under CI=true, where `make deps` installs it and a
// skip would pass while testing nothing.
func StartForTest(t testing.TB, h *netlab.Host, cfg Config) *Instance {
	t.Helper()
	RequireFRR(t)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout+5*time.Second)
	defer cancel()
	r, err := Start(ctx, h, "", cfg)
	if err != nil {
		t.Fatalf("starting FRR in %s: %v", h.Name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, d := range daemons {
				t.Logf("FRR in %s: %s", h.Name, r.LogTail(d, 30))
			}
		}
		if err := r.Stop(); err != nil {
			t.Errorf("stopping FRR in %s: %v", h.Name, err)
		}
	})
	return r
}

// RequireFRR skips t unless FRR is installed (fails it under CI=true).
func RequireFRR(t testing.TB) {
	t.Helper()
	err := Check()
	switch {
	case err == nil:
	case os.Getenv("CI") == "true" && errors.Is(err, ErrNotInstalled):
		t.Fatalf("CI=true but %v", err)
	default:
		t.Skipf("skipping: %v", err)
	}
}
