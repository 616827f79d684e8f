package push

import (
	"errors"
	"strings"
	"testing"
)

// TestProblemKind names each rule's kind, as the refusal metrics count them.
func TestProblemKind(t *testing.T) {
	for _, c := range []struct {
		body string
		want RuleKind
	}{
		{`{"type":"JML","data":{"class":"a","info":"b"}}`, "required"},
		{`{"userId":"u 1","type":"JML","data":{"class":"a","info":"b"}}`, "user_id"},
		{`{"userId":"u","type":"XX","data":{"class":"a","info":"b"}}`, "type"},
		{`{"userId":"u","type":"JML","url":"ftp://x","data":{"class":"a","info":"b"}}`, "url"},
		{`{"userId":"u","type":"JML","time":123,"data":{"class":"a","info":"b"}}`, "time"},
		{`{"userId":"u","type":"JML","data":{"class":"a","info":"😀"}}`, "emoji"},
		{`{"userId":"u","type":"JML","data":{"class":"a","info":"123456789012345678901"}}`, "length"},
		{`{"userId":"u","type":"JML","data":{"class":"a","info":"x\ny"}}`, "line_break"},
		{`{"userId":"u","type":"JML","data":{"class":"a","info":"x\u0007"}}`, "control"},
		{`{"userId":"u","type":"JML","data":{"class":"a","info":"  "}}`, "blank"},
		{`{"userId":"u","type":"JML","data":{"class":"a","info":1}}`, "string"},
		{`{"userId":"u","type":"JML","data":[]}`, "object"},
		{`{"userId":"u","type":"JML","data":{"class":"a","info":"b"},"x":1}`, "unknown_field"},
		{`{"userId":"u","type":"JML","data":{"class":"a","info":"b","x":"1"}}`, "unknown_field"},
		{`{"userId":"u","type":"JML","url":"https://example.edu/` + strings.Repeat("a", 1100) + `","data":{"class":"a","info":"b"}}`, "length"},
		{`{"userId":"u","type":"JML","data":{"class":"a","info":"x\u202ey"}}`, "format"},
		{`{"userId":"u","type":"JML","data":{"class":"a","info":"x\ue000y"}}`, "private_use"},
		{`{"userId":"u","userId":"v","type":"JML","data":{"class":"a","info":"b"}}`, "duplicate"},
		{`\xff`, "body"},
		{`{"userId":"u","userId":"v","type":"JML","data":{"class":"a","info":"b"}}`, "duplicate"},
		{`[1]`, "body"},
	} {
		_, err := Parse([]byte(c.body))
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: %v, want a refusal", c.body, err)
			continue
		}
		if got := ve.Problems[0].Kind(); got != c.want {
			t.Errorf("%s: first problem %v is %q, want %q", c.body, ve.Problems[0], got, c.want)
		}
	}
}
