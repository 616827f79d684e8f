package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/campus-it/ucs/pkg/push"
)

const fuzzItem = `{"userId":"2020000001","type":"JML","data":{"class":"高等数学","info":"第三章习题"}}`

// FuzzBatchBody feeds arbitrary bodies to the reader of the batch and results bodies. It must
// not panic; a refusal is a 400 with a short one-line message; what it accepts is exactly what
// encoding/json reads as {"<key>": [1 to 1000 items]} with the key once, given JSON text the
// service accepts (push.TextProblem), and its items are the same.
func FuzzBatchBody(f *testing.F) {
	for _, s := range []string{
		`{"messages":[` + fuzzItem + `]}`,
		`{"messages":[` + fuzzItem + `,` + fuzzItem + `]}`,
		`{"messages":[]}`, `{"messages":{}}`, `{"messages":null}`, `{"messages":[1,"x",null,[],{}]}`,
		`{"messages":[` + fuzzItem + `],"extra":1}`, `{"messages":[1],"messages":[2]}`, `{"extra":[1]}`,
		`{"ucsIds":["01KAW3J5M7Q9S2V4X6Z8B0D2F4"]}`, `{"ucsIds":[null,"a","\u0041"]}`, `{"ucsIds":[1]}`, `{"ucsIds":"x"}`,
		`{"ucsIds":["\ud800"]}`, `{"ucsIds":["\udc00\ud800"]}`, `{"ucsIds":["\ud83d\ude00"]}`, "{\"ucsIds\":[\"\xff\"]}",
		`{"messages":[{"userId":"a","userId":"b"}]}`, `{"\u006dessages":[1]}`, `{"messages":[1]} `, `{"messages":[1]}x`,
		`[]`, `null`, ``, `{`, `{"messages":[`, `{"messages":[1,]}`, `{"messages":[` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `]}`,
		"\ufeff{\"ucsIds\":[\"a\"]}", `{"ucsIds":["a"]}{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		raws, rerr := decodeList[jsontext.Value](body, "messages")
		checkRefusal(t, rerr)
		ids, ierr := decodeList[string](body, "ucsIds")
		checkRefusal(t, ierr)
		textOK := push.TextProblem(body) == ""

		stdRaws, rawsShape := stdList[json.RawMessage](body, "messages")
		if rerr == nil {
			if !textOK || !rawsShape {
				t.Fatalf("accepted %q: text ok %v, shape %v", body, textOK, rawsShape)
			}
			if len(raws) != len(stdRaws) {
				t.Fatalf("%d items, encoding/json reads %d", len(raws), len(stdRaws))
			}
			for i := range raws {
				if !bytes.Equal(raws[i], stdRaws[i]) {
					t.Fatalf("item %d: %q, encoding/json reads %q", i, raws[i], stdRaws[i])
				}
				_, _ = push.Parse(raws[i]) // must not panic either
			}
		} else if textOK && rawsShape && len(stdRaws) >= 1 && len(stdRaws) <= MaxBatch {
			t.Fatalf("refused %q (%s), encoding/json reads %d items", body, rerr.Message, len(stdRaws))
		}

		stdIDs, idsShape := stdList[*string](body, "ucsIds")
		for _, id := range stdIDs {
			idsShape = idsShape && id != nil // a null id is no string
		}
		if ierr == nil {
			if !textOK || !idsShape || len(ids) != len(stdIDs) {
				t.Fatalf("accepted %q: text ok %v, shape %v, %d ids, encoding/json reads %d", body, textOK, idsShape, len(ids), len(stdIDs))
			}
			for i, id := range ids {
				if want := stdIDs[i]; want == nil && id != "" || want != nil && *want != id {
					t.Fatalf("id %d: %q, encoding/json reads %v", i, id, want)
				}
			}
		} else if textOK && idsShape && len(stdIDs) >= 1 && len(stdIDs) <= MaxBatch {
			t.Fatalf("refused %q (%s), encoding/json reads %d ids", body, ierr.Message, len(stdIDs))
		}
	})
}

// checkRefusal fails t unless e is nil or a 400 with a short one-line message.
func checkRefusal(t *testing.T, e *Error) {
	t.Helper()
	if e == nil {
		return
	}
	if e.Code != CodeBadRequest || e.Message == "" || len(e.Message) > 200 || strings.ContainsAny(e.Message, "\r\n") || !utf8.ValidString(e.Message) {
		t.Fatalf("refusal %q (%s)", e.Message, e.Code)
	}
}

// stdList reads body with encoding/json as an independent check: ok reports whether it is one
// object whose only member, given once, is key, holding an array of T.
func stdList[T any](body []byte, key string) (list []T, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var top map[string]json.RawMessage
	if err := dec.Decode(&top); err != nil || top == nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false // more than one value
	}
	raw, found := top[key]
	if len(top) != 1 || !found || keyCount(body) != 1 {
		return nil, false
	}
	if err := json.Unmarshal(raw, &list); err != nil || list == nil {
		return nil, false
	}
	return list, true
}

// keyCount counts the members of the object body (valid JSON).
func keyCount(body []byte) int {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // {
		return -1
	}
	n := 0
	for dec.More() {
		if _, err := dec.Token(); err != nil { // name
			return -1
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return -1
		}
		n++
	}
	return n
}
