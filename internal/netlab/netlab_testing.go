package netlab

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// RequirePrivileges skips t, with the reason, unless the process can build
// a lab (see Check). Under CI=true missing privileges fail t instead: CI
// runs as root, so a privileged test that skips there would pass while
// testing nothing. (Other systems than Linux still skip.)
func RequirePrivileges(t testing.TB) {
	t.Helper()
	err := Check()
	switch {
	case err == nil:
	case os.Getenv("CI") == "true" && errors.Is(err, ErrPrivileges):
		t.Fatalf("CI=true but this test lacks privileges (run as root, or with CAP_NET_ADMIN, CAP_NET_RAW and CAP_SYS_ADMIN): %v", err)
	default:
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
