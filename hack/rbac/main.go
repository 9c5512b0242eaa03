// Command rbac splits controller-gen's rbac output (on stdin) into one role
// per component and feature, config/rbac/<role>/role.yaml (make generate
// runs it). The work is done by internal/chart.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/mooringlb/mooring/internal/chart"
)

func main() {
	in, err := io.ReadAll(os.Stdin)
	var removed []string
	if err == nil {
		removed, _, err = chart.SplitRoles(".", in)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, f := range removed {
		fmt.Fprintf(os.Stderr, "rbac: removed %s: no marker names its role any more (remove its folder's bindings too)\n", f)
	}
}
