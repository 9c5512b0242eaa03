package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
)

// The names the binary answers to. Installed as kubectl-mooring on $PATH,
// it is a kubectl plugin: `kubectl mooring status` runs it with argv[0]
// ending in PluginName, and its help then says `kubectl mooring ...`.
const (
	Name       = "mooring"
	PluginName = "kubectl-" + Name
)

// Exit codes: 1 when a command failed (or found what it looks for, like
// `audit arp` finding a split), 2 when the command line itself is wrong.
const (
	ExitFailure = 1
	ExitUsage   = 2
)

// Main runs the program as the OS started it: argv[0] picks the name.
func Main(ctx context.Context, argv []string, s Streams) int {
	if len(argv) == 0 {
		return Run(ctx, nil, s)
	}
	plugin := strings.TrimSuffix(filepath.Base(argv[0]), ".exe") == PluginName
	return run(ctx, plugin, argv[1:], s)
}

// Run executes the command line as `mooring` and returns the exit code.
func Run(ctx context.Context, args []string, s Streams) int {
	return run(ctx, false, args, s)
}

func run(ctx context.Context, plugin bool, args []string, s Streams) int {
	root := NewRootCommand(s)
	if plugin {
		asPlugin(root)
	}
	markUsageErrors(root)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	var ee cliutil.ExitError
	if errors.As(err, &ee) {
		return ee.Code // the command has said why
	}
	return report(s.Err, cmd, err)
}

// report prints err once, with one "Error: " prefix, and for a wrong
// command line, where to read the usage.
func report(w io.Writer, cmd *cobra.Command, err error) int {
	fmt.Fprintln(w, "Error:", oncePrefixes(err.Error()))
	var ue usageError
	var cu cliutil.UsageError
	if !errors.As(err, &ue) && !errors.As(err, &cu) && !isCobraUsage(err) {
		return ExitFailure
	}
	if ue.cmd != nil {
		cmd = ue.cmd
	}
	if ue.flag && strings.Contains(cmd.Use, " -- ") && !strings.Contains(err.Error(), " -- ") {
		// `lab exec node-1 ip -br addr`: -br was meant for ip.
		fmt.Fprintf(w, "Flags meant for the command being run go after `--`: %s\n", useWithPath(cmd))
	}
	fmt.Fprintf(w, "Run '%s --help' for usage.\n", cmd.CommandPath())
	return ExitUsage
}

// usageError is a command-line mistake: wrong flags or arguments.
type usageError struct {
	cmd  *cobra.Command
	flag bool
	err  error
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// markUsageErrors wraps the flag and argument checks of every command so
// their errors are known as usage errors. A command checks its flags'
// values in PreRunE, before it builds or reaches anything: an error there
// is a usage error too (exit 2, with the --help to read).
func markUsageErrors(root *cobra.Command) {
	// A verb may word its own flag errors (lab exec does): keep its words,
	// mark the result. Every command's function is read before any is
	// replaced, so none wraps another's wrapper.
	own := map[*cobra.Command]func(*cobra.Command, error) error{}
	walk(root, func(c *cobra.Command) { own[c] = c.FlagErrorFunc() })
	walk(root, func(c *cobra.Command) {
		f := own[c]
		c.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
			return usageError{cmd: c, flag: true, err: f(c, err)}
		})
		if pre := c.PreRunE; pre != nil {
			c.PreRunE = func(c *cobra.Command, args []string) error {
				if err := pre(c, args); err != nil {
					return usageError{cmd: c, err: err}
				}
				return nil
			}
		}
		if c.Args == nil {
			return
		}
		check := c.Args
		c.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return usageError{cmd: c, err: err}
			}
			return nil
		}
	})
}

// isCobraUsage recognises the usage errors cobra makes without a hook.
func isCobraUsage(err error) bool {
	m := err.Error()
	return strings.HasPrefix(m, "unknown command ") || strings.HasPrefix(m, "required flag(s) ") ||
		strings.HasPrefix(m, "if any flags in the group ")
}

// oncePrefixes drops a segment of an error chain that repeats the one
// before it: wrapping an error that already names its package gives
// "lab: lab: no lab is running", printed as "lab: no lab is running".
func oncePrefixes(msg string) string {
	parts := strings.Split(msg, ": ")
	out := parts[:1]
	for _, p := range parts[1:] {
		if p != out[len(out)-1] {
			out = append(out, p)
		}
	}
	return strings.Join(out, ": ")
}

func useWithPath(c *cobra.Command) string {
	_, rest, _ := strings.Cut(c.Use, " ")
	return c.CommandPath() + " " + rest
}

// exampleCommand matches an example line's command, after indentation
// and an optional "$ ".
var exampleCommand = regexp.MustCompile(`(?m)^(\s*(?:\$ )?)` + Name + ` `)

// asPlugin makes the tree speak as `kubectl mooring`: usage lines, help
// and examples.
func asPlugin(root *cobra.Command) {
	if root.Annotations == nil {
		root.Annotations = map[string]string{}
	}
	root.Annotations[cobra.CommandDisplayNameAnnotation] = "kubectl " + Name
	walk(root, func(c *cobra.Command) {
		c.Example = exampleCommand.ReplaceAllString(c.Example, "${1}kubectl "+Name+" ")
	})
}

func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walk(sub, f)
	}
}
