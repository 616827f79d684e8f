package service

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
)

// TestNewLogger: JSON, one object a line, when log.format says so; text otherwise; the level
// filters.
func TestNewLogger(t *testing.T) {
	var b bytes.Buffer
	log := NewLogger(&b, config.Log{Format: "json", Level: "info"})
	log.Debug("hidden")
	log.Info("delivery sent", "ucsId", "01KAW3J5M7Q9S2V4X6Z8B0D2F4")
	var line map[string]any
	if err := json.Unmarshal(b.Bytes(), &line); err != nil || line["msg"] != "delivery sent" || line["ucsId"] != "01KAW3J5M7Q9S2V4X6Z8B0D2F4" || line["level"] != "INFO" {
		t.Fatalf("json log: %q %v", b.String(), err)
	}
	b.Reset()
	NewLogger(&b, config.Log{Format: "text", Level: "warn"}).Info("hidden")
	NewLogger(&b, config.Log{Format: "text", Level: "warn"}).Warn("shown", "ucsId", "x")
	if s := b.String(); strings.Contains(s, "hidden") || !strings.Contains(s, `level=WARN msg=shown ucsId=x`) {
		t.Fatalf("text log: %q", s)
	}
}
