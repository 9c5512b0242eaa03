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
	if err == nil {
		_, err = chart.SplitRoles(".", in)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
