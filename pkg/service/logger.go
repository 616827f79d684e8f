package service

import (
	"io"
	"log/slog"

	"github.com/campus-it/ucs/pkg/config"
)

// NewLogger is the programs' logger as l configures it: text for a person at a terminal, or
// JSON, one object a line, for a log collector. Secrets and tokens are never given to it.
func NewLogger(w io.Writer, l config.Log) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
