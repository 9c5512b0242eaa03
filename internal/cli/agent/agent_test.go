package agent

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mooringlb/mooring/internal/cliutil"
)

// Invalid flags fail before anything connects anywhere, saying which flag.
func TestFlagsAreValidated(t *testing.T) {
	t.Setenv(EnvNodeName, "")
	missing := filepath.Join(t.TempDir(), "from-env")
	t.Setenv("KUBECONFIG", missing)
	tests := []struct {
		args []string
		want string
	}{
		{nil, "--node-name is required"},
		{[]string{"--node-name=n1", "--gossip-port=0"}, "--gossip-port 0"},
		{[]string{"--node-name=n1", "--gossip-bind=nowhere"}, "--gossip-bind"},
		{[]string{"--node-name=n1", "--metrics-addr=9473"}, "--metrics-addr"},
		{[]string{"--node-name=n1", "--probe-interval=1s", "--probe-wait=2s"}, "--probe-wait"},
		{[]string{"--node-name=n1", "--bgp", "--bgp-listen-port=70000"}, "--bgp-listen-port 70000"},
		{[]string{"--node-name=n1", "--bgp", "--bgp-secret-namespace="}, "--bgp-secret-namespace is required"},
		// the shared rule: $KUBECONFIG when --kubeconfig is empty
		{[]string{"--node-name=n1", "--metrics-addr=0", "--insecure-gossip"}, "$KUBECONFIG=" + missing},
		// gossip needs a key, or the explicit lab-only opt-out; not both
		{[]string{"--node-name=n1", "--metrics-addr=0"}, "no gossip key: give --gossip-key-file"},
		{[]string{"--node-name=n1", "--insecure-gossip", "--gossip-key-file=" + missing}, "exclude each other"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		deps := &cliutil.Deps{Streams: cliutil.Streams{Out: &out, Err: &out}, Log: slog.New(slog.DiscardHandler)}
		cmd := NewCommand(deps)
		cmd.SetArgs(tt.args)
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		err := cmd.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want it to mention %q", tt.args, err, tt.want)
		}
	}
}
