package server

import (
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// A batch body of far more items than a batch may hold is refused with their count, and
// reading it keeps no more than MaxBatch of them: its cost does not grow with the items past
// the limit.
func TestBatchPastTheLimitKeepsNoItems(t *testing.T) {
	const n = 100_000
	body := []byte(`{"messages":[` + strings.Repeat(`{},`, n-1) + `{}]}`)
	var e *Error
	allocs := testing.AllocsPerRun(3, func() { _, e = decodeList[jsontext.Value](body, "messages") })
	if e == nil || e.Message != "messages: 100000 items, must be 1 to 1000" {
		t.Fatalf("refusal %v", e)
	}
	if allocs > 2*MaxBatch {
		t.Fatalf("reading %d items made %.0f allocations, as if it kept every one", n, allocs)
	}
}
