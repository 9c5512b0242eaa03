package agent

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/cni"
	"github.com/mooringlb/mooring/internal/cniinstall"
)

// Where the image keeps the plugin (internal/image.IPAMPluginPath) and
// where the chart mounts the node's CNI plugin folder.
const (
	DefaultIPAMPlugin = "/mooring-ipam"
	DefaultCNIBinDir  = "/host/opt/cni/bin"
)

// newInstallCNICommand builds `mooring agent install-cni`, the agent's init
// container when pod IPAM is on: the image has no shell to cp with.
func newInstallCNICommand(deps *cliutil.Deps) *cobra.Command {
	var from, to, network, confDir, socket string
	cmd := &cobra.Command{
		Use:   "install-cni",
		Short: "Copy the mooring-ipam CNI plugin into the node's CNI plugin folder (the agent's init container)",
		Long: `Copies the mooring-ipam CNI plugin shipped in the image into the node's
CNI plugin folder (a hostPath, /opt/cni/bin by default), atomically: written
to a temporary name in that folder, then renamed over the old plugin, so a
container runtime starting a pod meanwhile runs the old or the new plugin,
never a half-written one.

With --network (ptp or bridge) it also writes the node's pod network,
--conf-dir/10-mooring.conflist: that reference plugin with mooring-ipam as
its IPAM and as a list entry (for GC), on the agent's --socket, the same
way. Without it the network config is yours (docs/podipam.md).`,
		Args: cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error {
			if from == "" || to == "" {
				return fmt.Errorf("--from %q and --to %q must both be given: the plugin and the node's CNI plugin folder", from, to)
			}
			if network != "" && confDir == "" {
				return fmt.Errorf("--network %s needs --conf-dir: the node's CNI config folder, as mounted in the container", network)
			}
			if network != "" {
				if _, err := cniinstall.ConfList(network, socket); err != nil {
					return err
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			dst, err := cniinstall.Install(from, to)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "installed %s\n", dst)
			if network == "" {
				return nil
			}
			conf, err := cniinstall.WriteConfList(confDir, network, socket)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%s with mooring-ipam on %s)\n", conf, network, socket)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", DefaultIPAMPlugin, "the plugin binary to install (the image's copy)")
	f.StringVar(&to, "to", DefaultCNIBinDir, "the node's CNI plugin folder, as mounted in the container")
	f.StringVar(&network, "network", "", "also write the node's pod network with this main plugin: ptp or bridge (empty: the network config is yours)")
	f.StringVar(&confDir, "conf-dir", "", "with --network: the node's CNI config folder, as mounted in the container")
	f.StringVar(&socket, "socket", cni.DefaultSocket, "with --network: the agent's --pod-ipam-socket, as the host sees it (the plugin runs on the host)")
	return cmd
}
