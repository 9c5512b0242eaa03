// Command echo is the lab's echo image for real nodes (`mooring lab up
// --runtime=containerd`): internal/lab/echo's server, configured from the
// environment the pod's downward API sets (POD_NAME, POD_NAMESPACE,
// NODE_NAME; PORT, default 8080). hack/image lab packages it.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/mooringlb/mooring/internal/lab/echo"
)

func main() {
	cfg := echo.Config{Port: 8080, Pod: os.Getenv("POD_NAME"), Namespace: os.Getenv("POD_NAMESPACE"),
		Node: os.Getenv("NODE_NAME"), Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	if p := os.Getenv("PORT"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "echo: PORT=%q: want a port number\n", p)
			os.Exit(2)
		}
		cfg.Port = n
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := echo.Run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
