package membership

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
)

// slogWriter turns memberlist's "[LEVEL] memberlist: message" lines into
// slog records at the matching level, and hands suspect the member of a
// failed probe (suspect.go; nil: none).
type slogWriter struct {
	log     *slog.Logger
	suspect func(name string)
}

func (w *slogWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\n"))
	level := slog.LevelInfo
	for prefix, l := range map[string]slog.Level{
		"[DEBUG]": slog.LevelDebug, "[INFO]": slog.LevelInfo, "[WARN]": slog.LevelWarn, "[ERR]": slog.LevelError,
	} {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			level, line = l, strings.TrimSpace(rest)
			break
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	if name, ok := suspectOf(line); ok && w.suspect != nil {
		w.suspect(name)
	}
	w.log.Log(context.Background(), level, line, "component", "memberlist")
	return len(p), nil
}
