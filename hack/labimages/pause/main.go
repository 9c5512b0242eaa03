//go:build linux

// Command pause is the lab's sandbox ("pause") image for real nodes: the
// first process of every pod, holding its namespaces until the runtime
// stops it. Like Kubernetes' pause it sleeps until SIGINT or SIGTERM and
// reaps the zombies it inherits as PID 1 of a shared process namespace.
// hack/image lab packages it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
