package standalone_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/standalone"
)

// TestPlatformRefusedCharactersEndToEnd replays the attack pass's finding through the whole
// stack: text with characters the platform refuses used to be accepted with a 200 and end
// "failed: 47003". Now spaces other than U+0020 reach the platform as spaces and invisible
// characters are removed, so those pushes are delivered; the rest, a value of nothing but a
// zero width space, and a lone surrogate escape, are refused with a 400 naming the problem,
// and nothing of them reaches the platform.
func TestPlatformRefusedCharactersEndToEnd(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir)
	defer s.Close()
	info := readInfo(t, dir)
	base := info.BaseURL
	tok := token(t, base, standalone.DemoClient, clientSecret(t, info, standalone.DemoClient))
	user := standalone.DemoUsers[0]
	jml := func(info string) string {
		b, _ := json.Marshal(map[string]any{"userId": user, "type": "JML", "data": map[string]string{"class": "高等数学", "info": info}})
		return string(b)
	}

	delivered := map[string]string{ // sent as → what the platform must get
		jml("\u3000\u3000第三章\u00a0习题\u2003五"):      "  第三章 习题 五",
		jml("\ufeff第四章\u200b习\u00ad题\u2060\u200c"): "第四章习题",
	}
	ids := map[string]string{}
	for body, want := range delivered {
		st, m := call(t, "POST", base+"/v1/infra/notification/mp", "application/json", tok, body)
		if st != 200 {
			t.Fatalf("%s: %d %v", body, st, m)
		}
		ids[m["data"].(map[string]any)["ucsId"].(string)] = want
	}
	refused := map[string]string{ // body → the answer's msg
		jml("附件\u202egpj.exe"):                          "data.info: contains a formatting character (U+202E)",
		jml("私用\ue000"):                                 "data.info: contains a private-use character (U+E000)",
		jml("非字符\uffff"):                                "data.info: contains a code point that is not a character (U+FFFF)",
		jml("\u200b"):                                   "data.info: must not be blank",
		jml("零宽\u200d连接"):                               "data.info: contains emoji",
		strings.Replace(jml("X"), `"X"`, `"\ud83d"`, 1): `body: not valid JSON: \ud83d at byte`,
	}
	for body, want := range refused {
		st, m := call(t, "POST", base+"/v1/infra/notification/mp", "application/json", tok, body)
		if msg, _ := m["msg"].(string); st != 400 || m["code"] != "A00400" || !strings.HasPrefix(msg, want) {
			t.Errorf("%s: %d %v, want 400 %q", body, st, m, want)
		}
	}
	for id, want := range ids {
		embeddedtest.Eventually(t, 30*time.Second, "push "+id+" delivered", func() bool {
			r := lookup(t, base, tok, id)
			if r["state"] == "failed" {
				t.Fatalf("push %s failed: %v", id, r)
			}
			return r["state"] == "delivered"
		})
		found := false
		for _, m := range s.Sim.Sent() {
			if m.ClientMsgID == id {
				found = true
				if m.Data["thing2"] != want {
					t.Errorf("the platform got %q for %s, want %q", m.Data["thing2"], id, want)
				}
			}
		}
		if !found {
			t.Errorf("push %s never reached the platform", id)
		}
	}
	if n := len(s.Sim.Sent()); n != len(delivered) {
		t.Fatalf("the platform got %d messages, want the %d accepted ones", n, len(delivered))
	}
}
