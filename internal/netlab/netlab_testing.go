package netlab

import (
	"context"
	"testing"
	"time"
)

// RequirePrivileges skips t, with the reason, unless the process can build
// a lab (see Check). CI runs as root, where it never skips.
func RequirePrivileges(t testing.TB) {
	t.Helper()
	if err := Check(); err != nil {
		t.Skipf("skipping: %v", err)
	}
}

// NewForTest builds a lab for t, skipping t when privileges are missing and
// closing the lab in t.Cleanup. It fails t if the build fails.
func NewForTest(t testing.TB, cfg Config) *Lab {
	t.Helper()
	RequirePrivileges(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("building lab: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("closing lab: %v", err)
		}
	})
	return l
}
