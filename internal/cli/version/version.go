// Package version is the `mooring version` verb.
package version

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/buildinfo"
	"github.com/mooringlb/mooring/internal/cliutil"
)

// NewCommand builds `mooring version`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print Mooring's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			i := buildinfo.Get()
			_, err := fmt.Fprintf(deps.Streams.Out, "mooring %s (commit %s, %s, %s/%s)\n",
				i.Version, i.Commit, i.GoVersion, runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
