package failover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Killer takes a node down. The lab's is a hard kill (every process of the
// node, its link down, nothing graceful); elsewhere a user's command
// (CommandKiller) or deleting the node's agent pod for a soft failover
// (AgentPodKiller). Kill returns once the kill has been done, not once the
// cluster noticed.
type Killer interface {
	Kill(ctx context.Context, node string) error
}

// Restorer brings a killed node back between runs. It is optional: without
// one the next run kills whichever node announces then.
type Restorer interface {
	Restore(ctx context.Context, node string) error
}

// KillerFunc adapts a function to Killer.
type KillerFunc func(ctx context.Context, node string) error

// Kill calls f.
func (f KillerFunc) Kill(ctx context.Context, node string) error { return f(ctx, node) }

// RestorerFunc adapts a function to Restorer.
type RestorerFunc func(ctx context.Context, node string) error

// Restore calls f.
func (f RestorerFunc) Restore(ctx context.Context, node string) error { return f(ctx, node) }

// NodePlaceholder is replaced by the node's name in a Command.
const NodePlaceholder = "{node}"

// Command runs a user's shell command for a node: every "{node}" in Line is
// replaced by the node name, shell-quoted, and MOORING_NODE is set too. It
// is both a Killer and a Restorer, e.g.
//
//	--kill-command 'docker kill {node}'  --restore-command 'docker start {node}'
type Command struct {
	Line  string
	Shell string // default "/bin/sh"
}

// Kill runs the command for node.
func (c Command) Kill(ctx context.Context, node string) error { return c.run(ctx, node) }

// Restore runs the command for node.
func (c Command) Restore(ctx context.Context, node string) error { return c.run(ctx, node) }

// Expand returns the command line for node.
func (c Command) Expand(node string) string {
	return strings.ReplaceAll(c.Line, NodePlaceholder, shellQuote(node))
}

func (c Command) run(ctx context.Context, node string) error {
	if strings.TrimSpace(c.Line) == "" {
		return errors.New("empty command")
	}
	shell := c.Shell
	if shell == "" {
		shell = "/bin/sh"
	}
	line := c.Expand(node)
	cmd := exec.CommandContext(ctx, shell, "-c", line)
	cmd.Env = append(os.Environ(), "MOORING_NODE="+node)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("command %q for node %s: %w: %s", line, node, err, tail(out.String(), 400))
	}
	return nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
