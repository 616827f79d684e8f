package push

import (
	"encoding/json"
	"errors"
	"maps"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/campus-it/ucs/pkg/platform/keyword"
)

// fuzzSeeds are the inputs FuzzParse starts from: every table case (so
// every type and every rule) and forms that stress the reader.
func fuzzSeeds() [][]byte {
	var seeds [][]byte
	for _, c := range parseCases() {
		seeds = append(seeds, []byte(c.body))
	}
	for _, s := range []string{
		`{"userId":"u1","type":"EN","data":{"name":"期末考试","class":"高数","time":"6月20日"},"time":"1718000000000"}`,
		`{"userId":"u1","type":"JML","data":{"class":"C","info":"i"},"url":null,"time":null}`,
		`{"userId":"u1","type":"OPPAN","data":{"process":"p","applicant":"a","node":"n","time":"t"},"time":1.718e12}`,
		`{"userId":"u1","type":"TDL","data":{"type":"\ud800\udc00","list":"\udc00\ud800","step":"\ud800","content":"\u00e9"}}`,
		`{"userId":"u1","type":"TDL","data":{"type":"a","list":"b","step":"c","content":"d"},"time":-0}`,
		`{"userId":"u1","type":"TDL","data":{"type":"a","list":"b","step":"c","content":"d"},"time":1E9}`,
		`{"userId":"u1","type":"TDL","data":{"type":"a","list":"b","step":"c","content":"d"},"time":1e+09}`,
		`{"userId":"u1","type":"TDL","data":{"type":"a","list":"b","step":"c","content":"d"},"url":"http://[::]"}`,
		`{"userId":"u1","type":"TDL","data":{"type":"a","list":"b","step":"c","content":"d"},"url":"http://[.]/"}`,
		`{"userId":"u1","type":"TDL","data":{"type":"a","list":"b","step":"c","content":"d"},"url":"http://a:0"}`,
		`{"":"","\u0000":0,"data":{"":""}}`,
		`{"a":[[[[{"b":[true,false,null,-1.5e-3]}]]]]}`,
		`  {  "userId" : "u1" , "type" : "WR" , "data" : { "title" : "t" , "date" : "d" , "content" : "c" } }  `,
		"{\"userId\":\"u1\"\u00a0}",
		`{"userId":"u1","type":"TDL","data":{"type":"★","list":"☆","step":"™","content":"®"}}`,
		`{"userId":"u1","type":"TDL","data":{"type":"👨‍👩‍👧","list":"a","step":"b","content":"c"}}`,
		`nul`, `{"x":tru}`, `{"x":1.}`, `{"x":.1}`, `{"x":1e}`, `{"x":"\u12"}`, `{"x":"\`, "\xef\xbb\xbf{}",
	} {
		seeds = append(seeds, []byte(s))
	}
	// Nesting at encoding/json's limit and one beyond it.
	for _, n := range []int{maxDepth - 1, maxDepth} {
		seeds = append(seeds, []byte(`{"x":`+strings.Repeat("[", n)+strings.Repeat("]", n)+`}`))
	}
	return seeds
}

func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := Parse(body)
		jsonOK := json.Valid(body) && !hasLoneSurrogate(body)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("error %v (%T) is not a *ValidationError with problems", err, err)
			}
			for _, p := range ve.Problems {
				if p.Field == "" || p.Rule == "" || strings.ContainsAny(p.String(), "\r\n") {
					t.Fatalf("malformed problem %q", p.String())
				}
			}
			// The reader judges syntax as encoding/json does, but for lone
			// surrogate escapes, which stand for no character.
			first := ve.Problems[0].String()
			if len(body) <= MaxBodyBytes && utf8.Valid(body) && strings.HasPrefix(first, "body: not valid JSON") == jsonOK {
				t.Fatalf("Parse says %q, json.Valid says %v", first, jsonOK)
			}
		} else {
			if !jsonOK {
				t.Fatalf("Parse accepted invalid JSON")
			}
			checkAccepted(t, body, req)
		}
		checkAgreement(t, body)
	})
}

// checkAccepted re-checks every rule on an accepted Request, and compares
// it with what encoding/json makes of the same body.
func checkAccepted(t *testing.T, body []byte, req Request) {
	t.Helper()
	sp := spec(string(req.Type))
	if sp == nil {
		t.Fatalf("accepted unknown type %q", req.Type)
	}
	if req.UserID == "" || len(req.UserID) > maxUserIDRunes || strings.Trim(req.UserID, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
		t.Fatalf("accepted userId %q", req.UserID)
	}
	if req.URL != "" {
		u, err := url.Parse(req.URL)
		if err != nil || u.Host == "" || u.User != nil || (!strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https")) {
			t.Fatalf("accepted url %q: %v", req.URL, err)
		}
	}
	if !req.Time.IsZero() {
		if ms := req.Time.UnixMilli(); ms < 1e12 || ms > 9999999999999 {
			t.Fatalf("accepted time %v", req.Time)
		}
	}
	for _, f := range sp.Fields {
		v, ok := req.Data[f.Name]
		if f.Required && (!ok || strings.TrimSpace(v) == "") {
			t.Fatalf("accepted without %s: %q", f.Name, v)
		}
		if n := utf8.RuneCountInString(v); n > f.MaxRunes {
			t.Fatalf("accepted %s of %d runes", f.Name, n)
		}
		if ContainsEmoji(v) || strings.ContainsFunc(v, func(r rune) bool {
			return r < 0x20 || 0x7F <= r && r <= 0x9F || r == 0x2028 || r == 0x2029
		}) {
			t.Fatalf("accepted %s = %q", f.Name, v)
		}
		// What the front end accepts, the platform takes: every main item
		// is a valid thing value as sent.
		if f.Main && !keyword.Valid("thing", v) || strings.ContainsFunc(v, func(r rune) bool { return !keyword.Allowed(r) }) {
			t.Fatalf("accepted %s = %q, which the platform refuses", f.Name, v)
		}
	}
	for k := range req.Data {
		if sp.field(k) < 0 {
			t.Fatalf("accepted data key %q for %s", k, req.Type)
		}
	}

	var std struct {
		UserID string             `json:"userId"`
		Type   string             `json:"type"`
		URL    *string            `json:"url"`
		Data   map[string]*string `json:"data"`
	}
	if err := json.Unmarshal(body, &std); err != nil {
		t.Fatalf("encoding/json rejects an accepted body: %v", err)
	}
	maps.DeleteFunc(std.Data, func(_ string, v *string) bool { return v == nil }) // null: not given
	if std.UserID != req.UserID || std.Type != string(req.Type) || (std.URL != nil && *std.URL != req.URL) || len(std.Data) != len(req.Data) {
		t.Fatalf("encoding/json reads %+v, Parse %+v", std, req)
	}
	for k, v := range std.Data {
		if req.Data[k] != keyword.Clean(*v) {
			t.Fatalf("data.%s: encoding/json reads %q, Parse %q", k, *v, req.Data[k])
		}
	}
}

// FuzzURLPattern compares validURL with the schema's url pattern on bare
// strings, where the fuzzer finds differences much faster than in bodies.
func FuzzURLPattern(f *testing.F) {
	for _, s := range []string{"", "http://a", "HTTPS://a.b:8443/x?y#z", "http://a/%4", "http://a/%41", "https://a.b/通知",
		"http://-a", "http://a-", "http://a:", "http://a:123456", "http://[::1]/", "http://a/\u3000", "http://a/\u00a0", "ftp://a", "http://a\\b"} {
		f.Add(s)
	}
	re := regexp.MustCompile(urlPattern)
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		if got, want := s == "" || validURL(s), re.MatchString(s); got != want {
			t.Fatalf("validURL(%q) = %v, pattern says %v", s, got, want)
		}
		if validURL(s) {
			if u, err := url.Parse(s); err != nil || u.Host == "" {
				t.Fatalf("validURL(%q), but net/url: %v", s, err)
			}
		}
	})
}

// FuzzTextPattern compares the content rules of one value (inspect and
// the length limits) with the schema's patterns and maxLength.
func FuzzTextPattern(f *testing.F) {
	for _, s := range []string{"", " ", "中文", "a\nb", "\t", "\u3000", "😀", "©", "☆", "\u0085", "\u200b", "\U000E0020", strings.Repeat("长", 21),
		"\u202e", "\ue000", "\uffff", "\U00050000", "\u00ad\ufeff\u2060", strings.Repeat("长", 20) + "\u200b", strings.Repeat("\u200b", 30)} {
		f.Add(s)
	}
	text, blank := regexp.MustCompile(textPattern), regexp.MustCompile(nonBlank)
	main, extra := regexp.MustCompile(countPattern(mainItemMaxRunes)), regexp.MustCompile(countPattern(extraItemMaxRunes))
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		facts := inspect(s)
		clean := !facts.lineBreak && !facts.control && !facts.emoji && facts.refused == [3]rune{-1, -1, -1}
		if clean != text.MatchString(s) {
			t.Fatalf("inspect(%q) = %+v, text pattern says %v", s, facts, text.MatchString(s))
		}
		if facts.blank == blank.MatchString(s) {
			t.Fatalf("inspect(%q).blank = %v, non-blank pattern says %v", s, facts.blank, blank.MatchString(s))
		}
		if want := utf8.RuneCountInString(s) - utf8.RuneCountInString(strings.Map(func(r rune) rune {
			if c := keyword.ClassOf(r); c != nil && c.Treatment == keyword.Remove && !isEmoji(r) {
				return r
			}
			return -1
		}, s)); facts.runes != want {
			t.Fatalf("inspect(%q).runes = %d, want %d", s, facts.runes, want)
		}
		if (facts.runes <= mainItemMaxRunes) != main.MatchString(s) || (facts.runes <= extraItemMaxRunes) != extra.MatchString(s) {
			t.Fatalf("inspect(%q).runes = %d, length patterns say %v, %v", s, facts.runes, main.MatchString(s), extra.MatchString(s))
		}
		if facts.emoji != ContainsEmoji(s) {
			t.Fatalf("inspect(%q).emoji = %v, ContainsEmoji says %v", s, facts.emoji, ContainsEmoji(s))
		}
	})
}
