package lab

import (
	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/lab"
)

func newExecCommand(_ *cliutil.Deps, stateDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "exec <host> -- <command> [args...]",
		Short: "Run a command in a lab namespace: client, node-N or control-plane",
		Example: `  mooring lab exec client -- curl -s http://10.213.0.100/
  mooring lab exec node-1 -- nft list ruleset`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			h, err := lab.Open(*stateDir)
			if err != nil {
				return err
			}
			path, err := h.NetNSPath(args[0])
			if err != nil {
				return err
			}
			return lab.Exec(path, args[1:])
		},
	}
}
