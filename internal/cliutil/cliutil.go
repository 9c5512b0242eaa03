// Package cliutil holds what every verb package under internal/cli shares:
// the streams, the logger, and exit codes. It has no logic of its own.
package cliutil

import (
	"fmt"
	"io"
	"log/slog"
)

// Streams are a command's standard streams.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// Deps are what the root command hands every verb. Log is set by the root's
// PersistentPreRunE, so verbs read it inside RunE, not at construction.
type Deps struct {
	Streams Streams
	Log     *slog.Logger
}

// ExitError ends the program with Code after the command has already said
// why on its streams.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }
