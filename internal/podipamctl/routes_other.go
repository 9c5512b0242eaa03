//go:build !linux

package podipamctl

import (
	"errors"

	"github.com/mooringlb/mooring/internal/podipam"
)

// ApplyRoutes installs pod routes on Linux only.
func ApplyRoutes(_ any, _ []podipam.Route) error {
	return errors.New("pod routes are supported on Linux only")
}
