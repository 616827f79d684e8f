package push

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

func equalMessage(a, b Message) bool {
	return a.UcsID == b.UcsID && a.ClientID == b.ClientID && a.UserID == b.UserID && a.Type == b.Type &&
		a.URL == b.URL && maps.Equal(a.Data, b.Data) && (a.Data == nil) == (b.Data == nil) &&
		a.Time == b.Time && a.Accepted == b.Accepted
}

func TestMessageEncode(t *testing.T) {
	for _, m := range []Message{
		{UcsID: "01HX", ClientID: "oa", UserID: "u1", Type: TypeTDL, Data: map[string]string{"type": "a", "list": "b"}, Accepted: 1},
		{UcsID: "01HX", ClientID: "oa", UserID: "u1", Type: TypeEN, URL: "https://a.b/?x=1&y=<2>", Data: map[string]string{}, Time: 1714800000000, Accepted: 1714800001234},
		{UcsID: "01HX", ClientID: "c", UserID: "u", Type: TypeWR},
		{UcsID: "\"\\\n\r\t\b\f\x00\x1f\x7f", ClientID: "\u2028\u2029\u0085", UserID: "中文😀", Type: "X\xffY",
			Data: map[string]string{"k\xfe": "<&>", "": "", "z": strings.Repeat("长", 300), "a": "\u00e9"}, Time: -5, Accepted: -1},
	} {
		checkEncode(t, m)
	}
}

// validUTF8 is s with each byte that is not UTF-8 replaced by U+FFFD, as JSON encoders write it.
func validUTF8(s string) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r)
	}
	return b.String()
}

// checkEncode: encoding/json reads Encode's JSON back as m, invalid UTF-8 turned into U+FFFD.
func checkEncode(t *testing.T, m Message) {
	t.Helper()
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var got Message
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	want := m
	valid := validUTF8
	want.UcsID, want.ClientID, want.UserID, want.Type, want.URL = valid(m.UcsID), valid(m.ClientID), valid(m.UserID), Type(valid(string(m.Type))), valid(m.URL)
	if m.Data != nil {
		want.Data = map[string]string{}
		for k, v := range m.Data {
			want.Data[valid(k)] = valid(v)
		}
	}
	if !equalMessage(got, want) {
		t.Errorf("Encode: %s\n read back %+v\n want %+v", b, got, want)
	}
}

// FuzzMessageEncode: any message, whatever its text, is written as JSON that encoding/json
// reads back as the message.
func FuzzMessageEncode(f *testing.F) {
	f.Add("01HX", "oa", "u1", "TDL", "https://a.b/?x=1&y=<2>", "k", "v", "k2", "\u2028\"\\\x00", int64(0), int64(1), false)
	f.Add("\xff", "", "中文😀", "X\xffY", "", "", "", "\xfe", "<&>", int64(-5), int64(-1), true)
	f.Fuzz(func(t *testing.T, id, client, user, typ, url, k1, v1, k2, v2 string, at, accepted int64, nilData bool) {
		m := Message{UcsID: id, ClientID: client, UserID: user, Type: Type(typ), URL: url, Time: at, Accepted: accepted}
		if !nilData {
			m.Data = map[string]string{k1: v1, k2: v2}
			if validUTF8(k1) == validUTF8(k2) && k1 != k2 {
				return // two names that are one name once written
			}
		}
		checkEncode(t, m)
	})
}

func TestMessageRoundTrip(t *testing.T) {
	req, err := Parse([]byte(tdlBody))
	if err != nil {
		t.Fatal(err)
	}
	m := req.Message(NewID(req.Time), "oa-client", req.Time.Add(1500))
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	if !equalMessage(got, m) {
		t.Errorf("round trip:\n got  %+v\n want %+v", got, m)
	}
}

func TestDecodeMessage(t *testing.T) {
	ok := `{"ucsId":"01HX","clientId":"c","userId":"u","type":"AR","data":{"title":"t"},"accepted":1,"future":true}`
	if m, err := DecodeMessage([]byte(ok)); err != nil || m.Type != TypeAR || m.Data["title"] != "t" {
		t.Errorf("DecodeMessage(%s) = %+v, %v", ok, m, err)
	}
	for body, want := range map[string]string{
		`{"clientId":"c","userId":"u","type":"AR"}`:             "push: decode message: no ucsId",
		`{"ucsId":"i","userId":"u","type":"AR"}`:                "push: decode message: no clientId",
		`{"ucsId":"i","clientId":"c","type":"AR"}`:              "push: decode message: no userId",
		`{"ucsId":"i","clientId":"c","userId":"u"}`:             "push: decode message: no type",
		`{"ucsId":"i","clientId":"c","userId":"u","type":"ar"}`: `push: decode message: unknown type "ar"`,
	} {
		if _, err := DecodeMessage([]byte(body)); err == nil || err.Error() != want {
			t.Errorf("DecodeMessage(%s) error = %v, want %s", body, err, want)
		}
	}
	// Errors of the JSON reader are wrapped; their text is its own.
	for _, body := range []string{`{`, `{"ucsId":"i","clientId":"c","userId":"u","type":"AR","time":"1"}`} {
		_, err := DecodeMessage([]byte(body))
		var se *jsontext.SyntacticError
		var te *jsonv2.SemanticError
		if err == nil || !strings.HasPrefix(err.Error(), "push: decode message: ") || !errors.As(err, &se) && !errors.As(err, &te) {
			t.Errorf("DecodeMessage(%s) error = %v, want a wrapped error of the JSON reader", body, err)
		}
	}
	// Read as encoding/json reads it: names in any case, the last of a repeated name, invalid
	// UTF-8 as U+FFFD.
	lenient := "{\"UCSID\":\"i\",\"clientId\":\"c\",\"userId\":\"x\",\"userId\":\"u\",\"type\":\"AR\",\"data\":{\"title\":\"a\xffb\"}}"
	var want Message
	if err := json.Unmarshal([]byte(lenient), &want); err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeMessage([]byte(lenient)); err != nil || !equalMessage(got, want) || got.UcsID != "i" || got.UserID != "u" || got.Data["title"] != "a\uFFFDb" {
		t.Errorf("DecodeMessage(%q) = %+v, %v; encoding/json reads %+v", lenient, got, err, want)
	}
}

// FuzzDecodeMessage: DecodeMessage reads any input as encoding/json does, failing where it
// fails and otherwise giving the same message or refusing one that lacks what a delivery needs.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"ucsId":"01HX","clientId":"c","userId":"u","type":"AR","data":{"title":"t"},"accepted":1}`,
		`{"UcsId":"i","CLIENTID":"c","userId":"u","userId":"v","type":"TDL","data":{"a":"\ud800"},"time":5,"url":null}`,
		`{"ucsId":"i","clientId":"c","userId":"u","type":"AR","data":null,"x":[1,{"y":2}]}`,
		`{"ucsId":"i","clientId":"c","userId":"u","type":"AR","time":1.5}`,
		`[]`, `null`, `{`, "{\"ucsId\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeMessage(b)
		var want Message
		if jerr := json.Unmarshal(b, &want); jerr != nil {
			if err == nil {
				t.Fatalf("DecodeMessage(%q) = %+v; encoding/json fails: %v", b, got, jerr)
			}
			return
		}
		if err != nil {
			if want.UcsID != "" && want.ClientID != "" && want.UserID != "" && spec(string(want.Type)) != nil {
				t.Fatalf("DecodeMessage(%q) fails: %v; encoding/json reads %+v", b, err, want)
			}
			return
		}
		if !equalMessage(got, want) {
			t.Fatalf("DecodeMessage(%q) = %+v; encoding/json reads %+v", b, got, want)
		}
	})
}
