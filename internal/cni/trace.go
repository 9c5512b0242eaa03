package cni

import (
	"fmt"
	"os"
	"time"
)

// TraceEnv, when set in the plugin's environment, makes an ADD write one
// line to stderr with when it reached each step (Unix nanoseconds):
//
//	mooring-ipam-trace init=… parsed=… answered=… printed=…
//
// init is this package's init (the Go runtime and every package it
// imports have started), parsed is after stdin's config is read, answered
// is after the agent's answer is decoded, printed is after the result is
// written to stdout. The latency benchmark (latency_linux_test.go) puts it
// beside libcni's exec and the agent's own times to split an ADD into
// phases. Off, it costs one environment lookup per ADD.
const TraceEnv = "MOORING_IPAM_TRACE"

// TracePrefix starts the trace line.
const TracePrefix = "mooring-ipam-trace"

var initAt = time.Now()

type trace struct {
	on                        bool
	parsed, answered, printed time.Time
}

func newTrace() *trace { return &trace{on: os.Getenv(TraceEnv) != ""} }

func (t *trace) mark(at *time.Time) {
	if t.on {
		*at = time.Now()
	}
}

func (t *trace) write() {
	if t.on {
		fmt.Fprintf(os.Stderr, "%s init=%d parsed=%d answered=%d printed=%d\n", TracePrefix,
			initAt.UnixNano(), t.parsed.UnixNano(), t.answered.UnixNano(), t.printed.UnixNano())
	}
}
