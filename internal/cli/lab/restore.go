package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/lab"
)

func newRestoreCommand(deps *cliutil.Deps, stateDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "restore <node>",
		Short: "Bring a killed node back: link up, then its kubelet (and pods), kube-proxy and agent",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := lab.Open(*stateDir)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			if err := h.Restore(ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(deps.Streams.Out, "%s restored\n", args[0])
			return nil
		},
	}
}

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
