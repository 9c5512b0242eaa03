package lab

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/realnode"
)

// addRuntimeFlags are `lab up`'s flags for real nodes.
func addRuntimeFlags(f *pflag.FlagSet, cfg *lab.Config) {
	f.StringVar(&cfg.Runtime, "runtime", lab.RuntimeProcess, "what runs the nodes: process (the kubelet stand-in, quickest) or containerd (per node a real containerd, runc and kubelet v1.37.2; needs --images and hack/containerd's build)")
	f.StringVar(&cfg.Containerd, "containerd", "", "with --runtime=containerd: folder of containerd, containerd-shim-runc-v2 and ctr (default: $"+lab.EnvContainerd+", else the current hack/containerd/build.sh build)")
	f.StringVar(&cfg.Images, "images", "", "with --runtime=containerd: folder with mooring.oci.tar, echo.oci.tar and pause.oci.tar (built by make image labimages; default: $"+lab.EnvImages+", else dist/ of the repository)")
	f.StringVar(&cfg.Runc, "runc", "", "with --runtime=containerd: the runc binary (default: runc on $PATH, Debian's)")
}

// fillRuntime finds what --runtime=containerd needs when not given.
func fillRuntime(cfg *lab.Config, self string) error {
	if cfg.Runtime != lab.RuntimeContainerd {
		return nil
	}
	if cfg.Containerd == "" {
		cfg.Containerd = lab.FindContainerd()
	}
	if cfg.Images == "" {
		cfg.Images = lab.FindImages(self)
	}
	if cfg.Runc == "" {
		cfg.Runc = lab.FindRunc()
	}
	if cfg.CNIPlugins == "" {
		cfg.CNIPlugins = lab.FindCNIPlugins()
	}
	return nil
}

// newNodeMountsCommand is the first process of a real node (see
// realnode.HoldMounts).
func newNodeMountsCommand(deps *cliutil.Deps) *cobra.Command {
	var binds []string
	ready := ""
	cmd := &cobra.Command{
		Use:    "node-mounts",
		Short:  "Hold a real node's mount namespace: bind its private folders over the host paths, then wait",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var bs []realnode.Bind
			for _, b := range binds {
				src, dst, ok := strings.Cut(b, "=")
				if !ok || src == "" || dst == "" {
					return cliutil.UsageError{Err: fmt.Errorf("--bind %q: want SOURCE=TARGET", b)}
				}
				bs = append(bs, realnode.Bind{Source: src, Target: dst})
			}
			return realnode.HoldMounts(cmd.Context(), bs, ready)
		},
	}
	cmd.Flags().StringArrayVar(&binds, "bind", nil, "SOURCE=TARGET bind mount (repeatable)")
	cmd.Flags().StringVar(&ready, "ready", "", "file to write once the mounts are made")
	return cmd
}
