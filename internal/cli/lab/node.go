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
	return nodeCommand(deps, stateDir, "kill <node>",
		"Hard-kill a node: SIGKILL all its processes (kubelet, pods, kube-proxy, agent) and set its link down",
		10*time.Second, (*lab.Handle).Kill,
		func(node string) string {
			return fmt.Sprintf("%s killed at %s", node, time.Now().UTC().Format(time.RFC3339Nano))
		})
}

func newRestoreCommand(deps *cliutil.Deps, stateDir *string) *cobra.Command {
	return nodeCommand(deps, stateDir, "restore <node>",
		"Bring a killed node back: link up, then its kubelet (and pods), kube-proxy and agent",
		30*time.Second, (*lab.Handle).Restore,
		func(node string) string { return node + " restored" })
}

// nodeCommand builds a verb that applies one action of the running lab to
// one node, within timeout, and prints what happened.
func nodeCommand(deps *cliutil.Deps, stateDir *string, use, short string, timeout time.Duration,
	action func(*lab.Handle, context.Context, string) error, done func(node string) string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := lab.Open(*stateDir)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if err := action(h, ctx, args[0]); err != nil {
				return err
			}
			_, err = fmt.Fprintln(deps.Streams.Out, done(args[0]))
			return err
		},
	}
}
