package push

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func BenchmarkParse(b *testing.B) {
	body := []byte(tdlBody)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseEncodingJSON is the baseline the hand-written reader is
// measured against: decoding the same body with encoding/json alone,
// without any of the rules.
func BenchmarkParseEncodingJSON(b *testing.B) {
	body := []byte(tdlBody)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var v struct {
			UserID string            `json:"userId"`
			Type   string            `json:"type"`
			URL    string            `json:"url"`
			Time   json.RawMessage   `json:"time"`
			Data   map[string]string `json:"data"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseInvalid(b *testing.B) {
	body := []byte(strings.NewReplacer(
		`"2021012345"`, `"2021 012345"`,
		`"部门负责人审核"`, `"部门负责人审核\n下一步"`,
		`"关于2024年暑期放假安排的通知"`, `"关于2024年暑期放假安排的通知🎉🎉🎉🎉🎉🎉"`,
	).Replace(tdlBody))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(body); err == nil {
			b.Fatal("accepted")
		}
	}
}

func BenchmarkContainsEmoji(b *testing.B) {
	s := "关于2024年暑期放假安排的通知，请各部门于7月5日（周五）前完成《值班表》报送。"
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	for b.Loop() {
		if ContainsEmoji(s) {
			b.Fatal("emoji")
		}
	}
}

func BenchmarkNewID(b *testing.B) {
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		NewID(now)
	}
}

func BenchmarkNewIDParallel(b *testing.B) {
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			NewID(now)
		}
	})
}

func BenchmarkMessageEncode(b *testing.B) {
	req, err := Parse([]byte(tdlBody))
	if err != nil {
		b.Fatal(err)
	}
	m := req.Message(NewID(time.Now()), "oa-client", time.Now())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Encode(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeMessage(b *testing.B) {
	req, err := Parse([]byte(tdlBody))
	if err != nil {
		b.Fatal(err)
	}
	raw, err := req.Message(NewID(time.Now()), "oa-client", time.Now()).Encode()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeMessage(raw); err != nil {
			b.Fatal(err)
		}
	}
}
