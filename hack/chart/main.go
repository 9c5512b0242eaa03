// Command chart brings charts/mooring in step with config/ and writes the
// values reference of docs/install.md (make generate runs it). The work is
// done by internal/chart.
package main

import (
	"fmt"
	"os"

	"github.com/mooringlb/mooring/internal/chart"
)

func main() {
	changed, err := chart.Sync(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if changed {
		fmt.Fprintln(os.Stderr, "chart: updated charts/mooring and docs/install.md from config/ and values.schema.json")
	}
}
