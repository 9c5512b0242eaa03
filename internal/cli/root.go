// Package cli builds Mooring's command tree: one package per verb under
// internal/cli/<verb>, each with NewCommand(deps). Nothing here calls
// os.Exit, so Run is testable.
package cli

import (
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cli/agent"
	"github.com/mooringlb/mooring/internal/cli/audit"
	"github.com/mooringlb/mooring/internal/cli/controller"
	"github.com/mooringlb/mooring/internal/cli/doctor"
	"github.com/mooringlb/mooring/internal/cli/failover"
	"github.com/mooringlb/mooring/internal/cli/importcmd"
	"github.com/mooringlb/mooring/internal/cli/lab"
	"github.com/mooringlb/mooring/internal/cli/migrate"
	"github.com/mooringlb/mooring/internal/cli/podipam"
	"github.com/mooringlb/mooring/internal/cli/probe"
	"github.com/mooringlb/mooring/internal/cli/status"
	"github.com/mooringlb/mooring/internal/cli/version"
	"github.com/mooringlb/mooring/internal/cliutil"
)

// Streams are the command's standard streams.
type Streams = cliutil.Streams

// NewRootCommand builds the whole tree.
func NewRootCommand(s Streams) *cobra.Command {
	var level, format string
	deps := &cliutil.Deps{Streams: s}
	root := &cobra.Command{
		Use:           Name,
		Short:         "Network services for bare-metal Kubernetes: LoadBalancer addresses, L2 announcement, and the tools to check them",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(s.Err, level, format)
			if err != nil {
				return err
			}
			deps.Log = log
			return nil
		},
	}
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.PersistentFlags().StringVar(&level, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&format, "log-format", "text", "log format: text or json")
	root.AddCommand(
		controller.NewCommand(deps),
		failover.NewCommand(deps),
		agent.NewCommand(deps),
		audit.NewCommand(deps),
		lab.NewCommand(deps),
		status.NewCommand(deps),
		version.NewCommand(deps),
		importcmd.NewCommand(deps),
		doctor.NewCommand(deps),
		probe.NewCommand(deps),
		migrate.NewCommand(deps),
		podipam.NewCommand(deps),
	)
	return root
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, cliutil.Usagef("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, cliutil.Usagef("--log-format %q: use text or json", format)
}
