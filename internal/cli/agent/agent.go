// Package agent is the `mooring agent` verb.
package agent

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
)

// NewCommand builds `mooring agent`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	return &cobra.Command{
		Use:   "agent",
		Short: "(not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("mooring agent is not built yet: see the open issues")
		},
	}
}
