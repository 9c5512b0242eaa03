// Package lab is the `mooring lab` verb.
package lab

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
)

// NewCommand builds `mooring lab`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	return &cobra.Command{
		Use:   "lab",
		Short: "(not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("mooring lab is not built yet: see the open issues")
		},
	}
}
