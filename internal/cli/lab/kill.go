package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/lab"
)

func newKillCommand(deps *cliutil.Deps, stateDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "kill <node>",
		Short: "Hard-kill a node: SIGKILL all its processes (kubelet, pods, kube-proxy, agent) and set its link down",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := lab.Open(*stateDir)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			if err := h.Kill(ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(deps.Streams.Out, "%s killed at %s\n", args[0], time.Now().UTC().Format(time.RFC3339Nano))
			return nil
		},
	}
}
