package agent

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
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
	var from, to string
	cmd := &cobra.Command{
		Use:   "install-cni",
		Short: "Copy the mooring-ipam CNI plugin into the node's CNI plugin folder (the agent's init container)",
		Long: `Copies the mooring-ipam CNI plugin shipped in the image into the node's
CNI plugin folder (a hostPath, /opt/cni/bin by default), atomically: written
to a temporary name in that folder, then renamed over the old plugin, so a
container runtime starting a pod meanwhile runs the old or the new plugin,
never a half-written one.`,
		Args: cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error {
			if from == "" || to == "" {
				return fmt.Errorf("--from %q and --to %q must both be given: the plugin and the node's CNI plugin folder", from, to)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			dst, err := cniinstall.Install(from, to)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "installed %s\n", dst)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", DefaultIPAMPlugin, "the plugin binary to install (the image's copy)")
	f.StringVar(&to, "to", DefaultCNIBinDir, "the node's CNI plugin folder, as mounted in the container")
	return cmd
}
