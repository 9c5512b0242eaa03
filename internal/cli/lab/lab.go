// Package lab is the `mooring lab` verb: the one-machine cluster of
// internal/lab. Subcommands: up, down, exec, kill, restore, netns, status;
// kubelet and echo are the hidden programs the lab runs inside its
// namespaces.
package lab

import (
	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/lab"
)

// NewCommand builds `mooring lab`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	stateDir := lab.StateDirFromEnv()
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "A whole cluster on this machine: control plane, nodes, kube-proxy, Mooring, a demo Service",
		Long: `mooring lab runs a real Kubernetes control plane and N nodes in network namespaces on
one Linux machine (root, no Docker), with Mooring's controller and agents and a demo
LoadBalancer Service. See docs/lab.md.`,
	}
	cmd.PersistentFlags().StringVar(&stateDir, "state-dir", stateDir,
		"folder of the running lab (also $"+lab.EnvStateDir+")")
	cmd.AddCommand(
		newUpCommand(deps, &stateDir),
		newDownCommand(deps, &stateDir),
		newExecCommand(deps, &stateDir),
		newKillCommand(deps, &stateDir),
		newRestoreCommand(deps, &stateDir),
		newNetNSCommand(deps, &stateDir),
		newStatusCommand(deps, &stateDir),
		newKubeletCommand(deps),
		newEchoCommand(deps),
		newPodRunCommand(deps),
		newNodeMountsCommand(deps),
	)
	return cmd
}
