package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/lab"
)

func newDownCommand(deps *cliutil.Deps, stateDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Remove the running lab: every process, namespace and file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := lab.Open(*stateDir)
			if errors.Is(err, lab.ErrNoLab) {
				// A lab killed with SIGKILL leaves only its state dir (its
				// namespaces and processes died with it).
				if _, serr := os.Stat(filepath.Join(*stateDir, "state.json")); serr == nil {
					fmt.Fprintf(deps.Streams.Out, "no lab running; removing the leftovers in %s\n", *stateDir)
					return os.RemoveAll(*stateDir)
				}
				return err
			}
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			if err := h.Down(ctx); err != nil {
				return err
			}
			fmt.Fprintln(deps.Streams.Out, "lab removed")
			return nil
		},
	}
}
