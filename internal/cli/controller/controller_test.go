package controller

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mooringlb/mooring/internal/cliutil"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`

func run(t *testing.T, args ...string) error {
	t.Helper()
	var out bytes.Buffer
	deps := &cliutil.Deps{Streams: cliutil.Streams{Out: &out, Err: &out}, Log: slog.New(slog.NewTextHandler(&out, nil))}
	cmd := NewCommand(deps)
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	return cmd.ExecuteContext(context.Background())
}

func TestFlagsAreValidated(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kc")
	if err := os.WriteFile(kc, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--kubeconfig", filepath.Join(t.TempDir(), "missing")}, "missing"},
		{[]string{"--kubeconfig", kc, "--workers", "0"}, "--workers"},
		{[]string{"--kubeconfig", kc, "--lease-namespace", ""}, "--lease-namespace"},
	} {
		err := run(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %q", c.args, err, c.want)
		}
	}
}

// Without --kubeconfig the controller reads $KUBECONFIG, like every command.
func TestKubeconfigFromEnv(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "from-env")
	t.Setenv("KUBECONFIG", missing)
	if err := run(t); err == nil || !strings.Contains(err.Error(), "$KUBECONFIG="+missing) {
		t.Errorf("error %v, want one naming $KUBECONFIG=%s", err, missing)
	}
}
