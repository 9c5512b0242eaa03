package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mooringlb/mooring/internal/cliutil"
)

func runCLI(t *testing.T, argv ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), argv, Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

func allCommands() []*cobra.Command {
	var cmds []*cobra.Command
	walk(NewRootCommand(Streams{}), func(c *cobra.Command) { cmds = append(cmds, c) })
	return cmds
}

// Every command, hidden ones included, states the shared flags in the
// same words, and names them alike.
func TestSharedFlagWording(t *testing.T) {
	want := map[string]string{
		cliutil.KubeconfigFlag:  cliutil.KubeconfigUsage,
		cliutil.MetricsAddrFlag: cliutil.MetricsAddrUsage,
	}
	seen := map[string]int{}
	for _, c := range allCommands() {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if usage, ok := want[f.Name]; ok {
				seen[f.Name]++
				if f.Usage != usage {
					t.Errorf("%s --%s: usage %q, want %q", c.CommandPath(), f.Name, f.Usage, usage)
				}
				return
			}
			if strings.Contains(f.Name, "kubeconfig") || servesMetrics(f.Name) {
				t.Errorf("%s --%s: name the flag --%s or --%s", c.CommandPath(), f.Name, cliutil.KubeconfigFlag, cliutil.MetricsAddrFlag)
			}
		})
	}
	// status, controller, agent at least; a rename must not empty the test.
	if seen[cliutil.KubeconfigFlag] < 3 || seen[cliutil.MetricsAddrFlag] < 2 {
		t.Errorf("too few shared flags found: %v", seen)
	}
}

// servesMetrics says whether a flag's name says it is where metrics are
// served (--metrics-bind-address, --metrics-listen, ...); a client-side
// setting such as doctor's --metrics-port is another flag.
func servesMetrics(name string) bool {
	if !strings.HasPrefix(name, "metrics") {
		return false
	}
	for _, s := range []string{"addr", "address", "bind", "listen"} {
		if strings.HasSuffix(name, s) || strings.Contains(name, "-"+s+"-") {
			return true
		}
	}
	return false
}

// doubled reports an error line that repeats a segment: "lab: lab: ...".
func doubled(s string) bool {
	for _, line := range strings.Split(s, "\n") {
		parts := strings.Split(strings.TrimPrefix(line, "Error: "), ": ")
		for i := 1; i < len(parts); i++ {
			if parts[i] == parts[i-1] {
				return true
			}
		}
	}
	return false
}

// A usage error on any command is printed once, with one prefix, says
// where the usage is, and exits 2; nothing goes to stdout.
func TestUsageErrorsPrintedOnce(t *testing.T) {
	for _, c := range allCommands() {
		if !c.Runnable() || c.DisableFlagParsing {
			continue // a command that parses no flags would run
		}
		path := strings.Fields(c.CommandPath())[1:]
		code, stdout, stderr := runCLI(t, append(append([]string{Name}, path...), "--no-such-flag")...)
		checkUsageError(t, c.CommandPath(), code, stdout, stderr)
		if !strings.Contains(stderr, "unknown flag: --no-such-flag") {
			t.Errorf("%s: stderr lacks the flag error:\n%s", c.CommandPath(), stderr)
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"nosuchverb"}, []string{`unknown command "nosuchverb"`, "Run 'mooring --help'"}},
		{[]string{"status", "extra"}, []string{`unknown command "extra" for "mooring status"`, "Run 'mooring status --help'"}},
		{[]string{"audit", "arp"}, []string{"give the addresses to check: mooring audit arp -i IFACE ADDRESS...", "Run 'mooring audit arp --help'"}},
		// mistakes the commands find themselves (cliutil.UsageError)
		{[]string{"status", "-o", "xml"}, []string{`-o "xml": use table, wide, json or yaml`, "Run 'mooring status --help'"}},
		{[]string{"audit", "arp", "10.0.0.1"}, []string{"--interface is required", "Run 'mooring audit arp --help'"}},
		{[]string{"audit", "arp", "-i", "lo", "nope"}, []string{`"nope" is not an IP address`}},
		{[]string{"--log-level", "loud", "version"}, []string{`--log-level "loud"`, "Run 'mooring version --help'"}},
		{[]string{"lab", "exec", "node-1", "ip", "-br", "addr"}, []string{"unknown shorthand flag: 'b' in -br",
			"after ", "mooring lab exec ", "<host> -- <command>", "Run 'mooring lab exec --help'"}},
	} {
		code, stdout, stderr := runCLI(t, append([]string{Name}, tc.args...)...)
		checkUsageError(t, strings.Join(tc.args, " "), code, stdout, stderr)
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr lacks %q:\n%s", tc.args, w, stderr)
			}
		}
	}
}

func checkUsageError(t *testing.T, what string, code int, stdout, stderr string) {
	t.Helper()
	if code != ExitUsage {
		t.Errorf("%s: exit %d, want %d", what, code, ExitUsage)
	}
	if stdout != "" {
		t.Errorf("%s: usage error wrote to stdout:\n%s", what, stdout)
	}
	if n := strings.Count(stderr, "Error:"); n != 1 {
		t.Errorf("%s: %d error lines, want 1:\n%s", what, n, stderr)
	}
	if doubled(stderr) {
		t.Errorf("%s: doubled prefix:\n%s", what, stderr)
	}
	if !strings.Contains(stderr, "--help' for usage.") {
		t.Errorf("%s: no pointer to --help:\n%s", what, stderr)
	}
}

func TestOncePrefixes(t *testing.T) {
	for in, want := range map[string]string{
		"lab: lab: no lab is running (start one)": "lab: no lab is running (start one)",
		"exec: exec: \"ip\": not found":           "exec: \"ip\": not found",
		"probe fd00::1: timeout":                  "probe fd00::1: timeout",
		"a: b: a: c":                              "a: b: a: c",
	} {
		if got := oncePrefixes(in); got != want {
			t.Errorf("oncePrefixes(%q) = %q, want %q", in, got, want)
		}
	}
	// A command's own error goes through the same printer.
	var b bytes.Buffer
	if code := report(&b, NewRootCommand(Streams{}), errString("lab: lab: no lab is running")); code != ExitFailure || b.String() != "Error: lab: no lab is running\n" {
		t.Errorf("report: code %d, %q", code, b.String())
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// Named kubectl-mooring, the binary is the same program and its help
// speaks as `kubectl mooring`.
func TestPluginName(t *testing.T) {
	code, stdout, _ := runCLI(t, "/usr/local/bin/"+PluginName, "--help")
	if code != 0 || !strings.Contains(stdout, "kubectl mooring [command]") {
		t.Errorf("plugin --help: exit %d:\n%s", code, stdout)
	}
	code, stdout, _ = runCLI(t, PluginName, "failover", "--help")
	if code != 0 || !strings.Contains(stdout, "\n  kubectl mooring failover -n demo echo") || !strings.Contains(stdout, "kubectl mooring failover SERVICE [flags]") {
		t.Errorf("plugin failover --help: exit %d:\n%s", code, stdout)
	}
	code, _, stderr := runCLI(t, PluginName, "status", "extra")
	if code != ExitUsage || !strings.Contains(stderr, "Run 'kubectl mooring status --help'") {
		t.Errorf("plugin usage error: exit %d:\n%s", code, stderr)
	}
	code, stdout, _ = runCLI(t, PluginName, "version")
	if code != 0 || !strings.HasPrefix(stdout, "mooring ") {
		t.Errorf("plugin version: exit %d: %q", code, stdout)
	}
}

// A command whose usage has `--` and whose flag error does not say so gets
// the hint from the root.
func TestDashDashHint(t *testing.T) {
	root := &cobra.Command{Use: Name, SilenceErrors: true, SilenceUsage: true}
	sub := &cobra.Command{Use: "run <host> -- <command>", Args: cobra.MinimumNArgs(2), RunE: func(*cobra.Command, []string) error { return nil }}
	root.AddCommand(sub)
	markUsageErrors(root)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"run", "h", "ip", "-br"})
	cmd, err := root.ExecuteC()
	var b bytes.Buffer
	if code := report(&b, cmd, err); code != ExitUsage ||
		!strings.Contains(b.String(), "Flags meant for the command being run go after `--`: mooring run <host> -- <command>") {
		t.Errorf("exit %d:\n%s", code, b.String())
	}
}

// pflag takes a `quoted` word in a flag's usage as the name of its value,
// so "record the command: `lab restore` of ..." printed as
// "--restart-on-restore lab restore". A value name is one word, and a
// boolean flag has none.
func TestFlagValueNames(t *testing.T) {
	for _, c := range allCommands() {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			name, _ := pflag.UnquoteUsage(f)
			if strings.ContainsAny(name, " \t") || (f.Value.Type() == "bool" && name != "") {
				t.Errorf("%s --%s: --help shows the value name %q: do not put `backticks` in its usage", c.CommandPath(), f.Name, name)
			}
		})
	}
}

// A command line that names nothing to do is a usage error (exit 2, with
// the --help to read), like an unknown flag (found on the new-user walk:
// `mooring import metallb` exited 1).
func TestMissingInputIsUsageError(t *testing.T) {
	for _, argv := range [][]string{
		{Name, "import", "metallb"},
		{Name, "import", "cilium", "--from-cluster", "-f", "x.yaml"},
		{Name, "failover", "--runs", "1"},
		{Name, "audit", "arp", "-i", "eth0"},
	} {
		code, stdout, stderr := runCLI(t, argv...)
		if code != ExitUsage || stdout != "" || strings.Contains(stderr, "arg(s)") || !strings.Contains(stderr, "Run '"+cmdPath(argv)+" --help'") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", argv, code, stdout, stderr)
		}
	}
}

// cmdPath is the command words of argv, up to the first flag.
func cmdPath(argv []string) string {
	var words []string
	for _, a := range argv {
		if strings.HasPrefix(a, "-") {
			break
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}
