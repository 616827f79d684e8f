package embedded

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// The handler under FerretDB's logger writes what slog's own would, attributes and groups in
// order, and writes nothing below its level.
func TestLazyAttrs(t *testing.T) {
	var lazy, plain bytes.Buffer
	opts := &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	for _, c := range []struct {
		buf *bytes.Buffer
		log *slog.Logger
	}{
		{&lazy, slog.New(&lazyAttrs{h: slog.NewTextHandler(&lazy, opts)})},
		{&plain, slog.New(slog.NewTextHandler(&plain, opts))},
	} {
		l := c.log.With("query", `INSERT INTO "t" VALUES (?)`, "args", []any{`{"_id":"a"}`})
		l.Debug("dropped")
		l.With("n", 1).WithGroup("g").With("k", "v").Error("kept", "x", 2)
		l.Info("also kept")
	}
	if lazy.String() != plain.String() {
		t.Fatalf("lazy handler wrote\n%s\nslog's wrote\n%s", lazy.String(), plain.String())
	}
	if strings.Contains(lazy.String(), "dropped") || !strings.Contains(lazy.String(), "g.k=v g.x=2") {
		t.Fatalf("unexpected output:\n%s", lazy.String())
	}
}
