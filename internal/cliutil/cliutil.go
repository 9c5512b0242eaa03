// Package cliutil holds what every verb package under internal/cli shares:
// the streams, the logger, exit codes and the wording of shared flags. It
// has no logic of its own.
package cliutil

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
)

// Streams are a command's standard streams.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// Deps are what the root command hands every verb. Log is set by the root's
// PersistentPreRunE, so verbs read it inside RunE, not at construction.
type Deps struct {
	Streams Streams
	Log     *slog.Logger
}

// ExitError ends the program with Code after the command has already said
// why on its streams.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// UsageError is a mistake in the command line that a command finds itself
// (a missing required flag, a malformed value): the root prints it like
// cobra's own usage errors, with where to read the usage, and exits 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError with a formatted message.
func Usagef(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

// Shared flags: every command that has one of these flags uses this name
// and exactly this help text, so `--help` reads the same everywhere (a test
// in internal/cli walks the whole tree to check it).
const (
	KubeconfigFlag  = "kubeconfig"
	KubeconfigUsage = "path to a kubeconfig file; when empty, $KUBECONFIG, then the in-cluster configuration"

	MetricsAddrFlag  = "metrics-addr"
	MetricsAddrUsage = "address to serve Prometheus metrics on (host:port); \"0\" disables it"
	// MetricsDisabled is the --metrics-addr value that turns metrics off.
	MetricsDisabled = "0"
)

// AddKubeconfigFlag defines --kubeconfig into p. Load it with
// kube.RESTConfig(*p, ...), which applies the rule the help text states.
func AddKubeconfigFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, KubeconfigFlag, "", KubeconfigUsage)
}

// EnvPprofAddr is --pprof-addr's default, so a lab's or a test's
// processes can be profiled without changing their arguments.
const EnvPprofAddr = "MOORING_PPROF_ADDR"

// AddPprofAddrFlag defines --pprof-addr into p (default $MOORING_PPROF_ADDR):
// where Go's profiles are served (net/http/pprof), off when empty.
func AddPprofAddrFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "pprof-addr", os.Getenv(EnvPprofAddr), "serve Go's CPU, heap and goroutine profiles (net/http/pprof under /debug/pprof/) at host:port; empty: off (default $"+EnvPprofAddr+"). Profiles show internals and cost CPU while taken: bind to loopback, e.g. 127.0.0.1:6060")
}

// AddMetricsAddrFlag defines --metrics-addr into p with default def.
func AddMetricsAddrFlag(cmd *cobra.Command, p *string, def string) {
	cmd.Flags().StringVar(p, MetricsAddrFlag, def, MetricsAddrUsage)
}
