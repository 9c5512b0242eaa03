package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/lab"
)

const execUsage = "mooring lab exec [--restart-on-restore] <host> -- <command> [args...]"

func newExecCommand(_ *cliutil.Deps, stateDir *string) *cobra.Command {
	restart := false
	cmd := &cobra.Command{
		Use:   "exec <host> -- <command> [args...]",
		Short: "Run a command in a lab namespace: client, node-N, control-plane or router",
		Long: `exec runs a command inside a lab namespace (client, node-N, control-plane, or router in
the BGP lab), as a process of that host. Put the command after --, so that its own flags are
its own. In the router, vtysh reaches the router's own FRR daemons.

With --restart-on-restore (nodes only) the lab records the command, and each ` + "`lab restore`" + `
of that node runs it again there (its output then goes to the lab's logs/ folder), as a
service of a rebooted machine would; ` + "`lab kill`" + ` kills it like every other process of the node.`,
		Example: `  mooring lab exec client -- curl -s http://10.213.0.100/
  mooring lab exec node-1 -- ip -br addr
  mooring lab exec node-1 -- nft list ruleset
  mooring lab exec router -- vtysh -c 'show ip route json'     # lab up --bgp
  mooring lab exec --restart-on-restore node-1 -- /usr/local/bin/speaker --node-name node-1 &`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch dash := cmd.ArgsLenAtDash(); {
			case len(args) == 0 || dash == 0:
				return fmt.Errorf("no host given: use %s", execUsage)
			case len(args) == 1:
				return fmt.Errorf("no command given for %s: use %s", args[0], execUsage)
			case dash > 1:
				return fmt.Errorf("one host before --, got %q: use %s", args[:dash], execUsage)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := lab.Open(*stateDir)
			if err != nil {
				return err
			}
			path, err := h.NetNSPath(args[0])
			if err != nil {
				return err
			}
			if restart {
				if err := recordRestart(cmd, h, args[0], args[1:]); err != nil {
					return err
				}
			}
			hs, _ := h.Host(args[0]) // found: NetNSPath did
			return lab.Exec(path, lab.RouterArgv(hs, args[1:]))
		},
	}
	cmd.Flags().BoolVar(&restart, "restart-on-restore", false, "record the command: each \"lab restore\" of this node runs it again")
	// `lab exec node-1 ip -br addr` reads -br as exec's flag: the root
	// command's usage-error printer says flags of the command go after --.
	return cmd
}

// recordRestart asks the lab to run argv again in node at each restore.
func recordRestart(cmd *cobra.Command, h *lab.Handle, node string, argv []string) error {
	hs, err := h.Host(node)
	if err != nil {
		return err
	}
	if hs.Role != "node" {
		return errors.New("--restart-on-restore: " + node + " is not a node (only nodes are killed and restored)")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("--restart-on-restore: %w", err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return err
	}
	dir, _ := os.Getwd()
	r := lab.Restart{Node: node, Argv: append([]string{path}, argv[1:]...), Dir: dir}
	return h.RecordRestart(cmd.Context(), r)
}
