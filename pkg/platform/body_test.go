package platform

import (
	"encoding/json"
	"testing"
)

func TestAppendSendBody(t *testing.T) {
	tests := []struct {
		name string
		m    TemplateMessage
		want string // with a single keyword, the output is deterministic
	}{
		{
			"all fields",
			TemplateMessage{ToUser: "oU1", TemplateID: "tpl", URL: "https://campus.example.edu/a?b=1&c=2", ClientMsgID: "01JH5Z",
				Data: map[string]string{"thing1": "期末考试"}},
			`{"touser":"oU1","template_id":"tpl","url":"https://campus.example.edu/a?b=1&c=2","client_msg_id":"01JH5Z","data":{"thing1":{"value":"期末考试"}}}`,
		},
		{
			"optional fields left out",
			TemplateMessage{ToUser: "oU1", TemplateID: "tpl", Data: map[string]string{"time2": "15:01"}},
			`{"touser":"oU1","template_id":"tpl","data":{"time2":{"value":"15:01"}}}`,
		},
		{
			"escapes",
			TemplateMessage{ToUser: `o"\`, TemplateID: "t\n\r\t\x01", Data: map[string]string{"k": "a\u2028b\xffc"}},
			`{"touser":"o\"\\","template_id":"t\n\r\t\u0001","data":{"k":{"value":"a\u2028b\ufffdc"}}}`,
		},
		{
			"no data",
			TemplateMessage{ToUser: "oU1", TemplateID: "tpl"},
			`{"touser":"oU1","template_id":"tpl","data":{}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(appendSendBody(nil, &tt.m)); got != tt.want {
				t.Errorf("body\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestAppendSendBodyManyKeywords(t *testing.T) {
	m := TemplateMessage{ToUser: "oU1", TemplateID: "tpl", Data: map[string]string{
		"thing1": "高等数学", "time2": "2025-01-08 09:00", "character_string3": "A-101", "phrase4": "待考",
	}}
	var got struct {
		ToUser string                       `json:"touser"`
		Data   map[string]map[string]string `json:"data"`
	}
	if err := json.Unmarshal(appendSendBody(nil, &m), &got); err != nil {
		t.Fatal(err)
	}
	for k, v := range m.Data {
		if got.Data[k]["value"] != v {
			t.Errorf("data.%s = %q, want %q", k, got.Data[k]["value"], v)
		}
	}
}

// FuzzAppendSendBody checks that any string survives a round trip through the send body
// (invalid UTF-8 turning into U+FFFD, as encoding/json does), in every field it can take.
func FuzzAppendSendBody(f *testing.F) {
	for _, s := range []string{"", "plain", "期末考试", "\"\\\n\x00\x7f", "\u2028\u2029", "\xff", "<script>&"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendSendBody(nil, &TemplateMessage{ToUser: s, TemplateID: s, URL: s, ClientMsgID: s, Data: map[string]string{"k": s}})
		var back struct {
			ToUser      string                       `json:"touser"`
			TemplateID  string                       `json:"template_id"`
			URL         string                       `json:"url"`
			ClientMsgID string                       `json:"client_msg_id"`
			Data        map[string]map[string]string `json:"data"`
		}
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q encoded as %s: %v", s, b, err)
		}
		// Each invalid byte becomes U+FFFD, as converting to runes does.
		want := string([]rune(s))
		if back.ToUser != want || back.TemplateID != want || back.URL != want || back.ClientMsgID != want || back.Data["k"]["value"] != want {
			t.Fatalf("%q came back as %+v", s, back)
		}
	})
}
