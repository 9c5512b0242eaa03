// Package controller is the `mooring controller` verb.
package controller

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
)

// NewCommand builds `mooring controller`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	return &cobra.Command{
		Use:   "controller",
		Short: "(not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("mooring controller is not built yet: see the open issues")
		},
	}
}
