package lab

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/lab"
)

func newNetNSCommand(deps *cliutil.Deps, stateDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "netns <host>",
		Short: "Print a path that enters a lab namespace (for nsenter --net=, or mooring failover --client-netns)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			h, err := lab.Open(*stateDir)
			if err != nil {
				return err
			}
			p, err := h.NetNSPath(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(deps.Streams.Out, p)
			return nil
		},
	}
}
