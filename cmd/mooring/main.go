// Command mooring is Mooring's single binary: the LB-IPAM controller, the L2
// announcement agent, the one-machine lab and the operator's tools.
// Installed as kubectl-mooring, it is also a kubectl plugin.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	// Before the other packages initialise: the agent's binary pages.
	_ "github.com/mooringlb/mooring/internal/agent/memory/early"
	"github.com/mooringlb/mooring/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args, cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
