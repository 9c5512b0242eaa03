package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/lab"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	deps := &cliutil.Deps{Streams: cliutil.Streams{In: bytes.NewReader(nil), Out: &out, Err: io.Discard},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cmd := NewCommand(deps)
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	err := cmd.Execute()
	return out.String(), err
}

func TestSubcommands(t *testing.T) {
	cmd := NewCommand(&cliutil.Deps{})
	visible := map[string]bool{}
	for _, c := range cmd.Commands() {
		visible[c.Name()] = !c.Hidden
	}
	for _, name := range []string{"up", "down", "exec", "kill", "restore", "netns", "status"} {
		if !visible[name] {
			t.Errorf("lab %s missing or hidden", name)
		}
	}
	for _, name := range []string{"kubelet", "echo"} {
		if hidden, ok := visible[name]; !ok || hidden {
			t.Errorf("lab %s should exist and be hidden", name)
		}
	}
}

func TestVerbsWithoutALabSayHowToStartOne(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "none")
	for _, args := range [][]string{
		{"exec", "client", "--", "true"}, {"kill", "node-1"}, {"restore", "node-1"}, {"netns", "client"},
		{"status"}, {"down"},
	} {
		_, err := run(t, append([]string{"--state-dir", dir}, args...)...)
		if !errors.Is(err, lab.ErrNoLab) {
			t.Errorf("lab %v without a lab: %v, want ErrNoLab", args, err)
		}
	}
}

func TestDownSweepsADeadLabsLeftovers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "lab")
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(lab.State{PID: 1 << 30, Dir: dir})
	if err := os.WriteFile(filepath.Join(dir, "state.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "--state-dir", dir, "down"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there: %v", dir, err)
	}
}

// Issue 8 item 10: `lab up --help` says it needs root and what it prints;
// exec's usage errors say where the command goes.
func TestHelpAndUsageErrors(t *testing.T) {
	out, err := run(t, "up", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"needs root", "KUBECONFIG=", "kubectl", "Ready in", "--no-mooring", "loadBalancerClass"} {
		if !strings.Contains(out, s) {
			t.Errorf("lab up --help lacks %q:\n%s", s, out)
		}
	}
	dir := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		args []string
		want string
	}{
		// The root command adds that flags of the command go after --
		// (internal/cli's TestUsageErrorsPrintedOnce).
		{[]string{"exec", "node-1", "ip", "-br", "addr"}, "unknown shorthand flag: 'b' in -br"},
		{[]string{"exec", "node-1"}, "no command given for node-1: use mooring lab exec"},
		{[]string{"exec", "--", "ip", "addr"}, "no host given: use mooring lab exec"},
		{[]string{"exec", "node-1", "node-2", "--", "ip"}, "one host before --"},
	} {
		_, err := run(t, append([]string{"--state-dir", dir}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("lab %v: %v, want %q", tc.args, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "lab: lab:") || strings.Contains(err.Error(), "exec: exec:")) {
			t.Errorf("lab %v: doubled prefix in %q", tc.args, err)
		}
	}
}

// Issue 18: a fault that cannot be injected is a usage error (exit 2)
// before anything starts — an unknown node included — instead of a lab
// that says Ready and injects nothing.
func TestUpFaultUsageErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--fault=slow-new-pods=10s@node-9"}, `the lab has no node "node-9": its nodes are node-1..node-3`},
		{[]string{"--nodes=4", "--fault=responder-open@node-5"}, `no node "node-5": its nodes are node-1..node-4`},
		{[]string{"--fault=responder-open@"}, "nothing after @"},
		{[]string{"--fault=responder-open=1s"}, "takes no value"},
		{[]string{"--fault=slow-new-pods"}, "not a positive duration"},
		{[]string{"--fault=xdp-loop"}, "unknown fault; the faults are slow-new-pods=DURATION[@NODE]"},
		{[]string{"--no-mooring", "--fault=responder-open"}, "cannot go with --no-mooring"},
		{[]string{"--pod-ipam=multi-pool", "--fault=slow-new-pods=5s"}, "static pod addresses only"},
	} {
		_, err := run(t, append([]string{"--state-dir", dir, "up"}, tc.args...)...)
		var ue cliutil.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("lab up %v: %v, want a usage error saying %q", tc.args, err, tc.want)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a rejected lab up left %s behind: %v", dir, err)
	}
}

func TestParseFault(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want lab.Fault
	}{
		{"slow-new-pods=20s", lab.Fault{Kind: lab.FaultSlowNewPods, SlowNewPods: 20e9}},
		{" slow-new-pods=1m@node-2 ", lab.Fault{Kind: lab.FaultSlowNewPods, SlowNewPods: 60e9, Node: "node-2"}},
		{"responder-open", lab.Fault{Kind: lab.FaultResponderOpen}},
		{"responder-open@node-3", lab.Fault{Kind: lab.FaultResponderOpen, Node: "node-3"}},
	} {
		got, err := lab.ParseFault(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}
