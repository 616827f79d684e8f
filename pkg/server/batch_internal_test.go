package server

import (
	"net/http"
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

// TestBodyBufferFollowsWhatCame: a body declared long is read into a buffer that grows as the
// body comes, from at most first bytes: a client that declares the largest batch lookup and
// sends two bytes holds a few KiB of the front end, not the body it declared.
func TestBodyBufferFollowsWhatCame(t *testing.T) {
	const declared = 1000*64 + 64<<10
	r, err := http.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	r.ContentLength = declared
	body, err := readJSONBody(r, declared, 4<<10)
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != "{}" || cap(body) > 4<<10 {
		t.Fatalf("a body declared %d bytes, of which 2 came: read %q into %d bytes; want at most 4 KiB", declared, body, cap(body))
	}
}
