package simulator_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/platform/simulator"
)

// TestMessageIDsUniqueAcrossRestarts: a simulator started after another never
// hands out an id the first one did, so a late receipt cannot land on an
// older message.
func TestMessageIDsUniqueAcrossRestarts(t *testing.T) {
	first := newEnv(t, simulator.Config{})
	tok := first.token(t, false).AccessToken
	var ids []int64
	for range 3 {
		ids = append(ids, first.send(t, tok, examMessage(follower, "")).MsgID)
	}
	first.sim.Close()
	second := newEnv(t, simulator.Config{})
	a := second.send(t, second.token(t, false).AccessToken, examMessage(follower, ""))
	if a.ErrCode != 0 || a.MsgID <= ids[len(ids)-1] {
		t.Fatalf("after a restart msgid %d (%+v), the run before ended at %d", a.MsgID, a, ids[len(ids)-1])
	}
	if ids[0] == 3_100_000_000_000_000_001 {
		t.Fatal("ids start at the same number on every start")
	}
}

// TestIndustryTemplateCut: an old industry template's values are cut to 20
// characters without line breaks, as the platform has done since 2023-05-04,
// not refused; its first and remark are taken.
func TestIndustryTemplateCut(t *testing.T) {
	e := newEnv(t, simulator.Config{})
	e.sim.AddTemplate("tpl-old", []string{"first", "keyword1", "keyword2", "remark"})
	tok := e.token(t, false).AccessToken
	a := e.send(t, tok, map[string]any{"touser": follower, "template_id": "tpl-old", "data": map[string]any{
		"first":    map[string]string{"value": "您好"},
		"keyword1": map[string]string{"value": strings.Repeat("考", 25)},
		"keyword2": map[string]string{"value": "第一行\n第二行"},
		"remark":   map[string]string{"value": "谢谢"},
	}})
	if a.ErrCode != 0 {
		t.Fatalf("send: %+v", a)
	}
	sent := e.sim.Sent()
	got := sent[len(sent)-1].Data
	if len(got) != 4 || got["first"] != "您好" || got["keyword1"] != strings.Repeat("考", 20) || got["keyword2"] != "第一行第二行" {
		t.Fatalf("the platform keeps %q", got)
	}
	// A category template's keyword is still refused.
	if a := e.send(t, tok, map[string]any{"touser": follower, "template_id": tplExam, "data": map[string]any{
		"thing1": map[string]string{"value": strings.Repeat("考", 21)}}}); a.ErrCode != 47003 {
		t.Fatalf("category template: %+v", a)
	}
}

// TestForcedRefreshLimits: a forced refresh within 30 s of the last one
// refreshes nothing; the 21st of a day is answered 45009.
func TestForcedRefreshLimits(t *testing.T) {
	clk := newClock()
	e := newEnv(t, simulator.Config{Now: clk.Now})
	first := e.token(t, true)
	clk.Advance(10 * time.Second)
	if again := e.token(t, true); again.AccessToken != first.AccessToken {
		t.Fatal("a forced refresh 10 s after the last one made a new token")
	}
	if a := e.send(t, first.AccessToken, examMessage(follower, "")); a.ErrCode != 0 {
		t.Fatalf("the token is revoked: %+v", a)
	}
	clk.Advance(20 * time.Second)
	if again := e.token(t, true); again.AccessToken == first.AccessToken {
		t.Fatal("a forced refresh 30 s after the last one kept the token")
	}
	for i := 2; i < 20; i++ {
		clk.Advance(30 * time.Second)
		e.token(t, true)
	}
	clk.Advance(30 * time.Second)
	_, a := e.call(t, http.MethodPost, "/cgi-bin/stable_token", map[string]any{
		"grant_type": "client_credential", "appid": appID, "secret": secret, "force_refresh": true})
	if a.ErrCode != 45009 {
		t.Fatalf("21st forced refresh of the day: %+v, want 45009", a)
	}
	e.token(t, false) // normal mode still answers
	clk.Advance(24 * time.Hour)
	e.token(t, true)
}

// TestPlainTokenEndpoint: GET /cgi-bin/token makes a new token on every
// call; the one before stays valid for five minutes.
func TestPlainTokenEndpoint(t *testing.T) {
	clk := newClock()
	e := newEnv(t, simulator.Config{Now: clk.Now})
	get := func() answer {
		_, a := e.call(t, http.MethodGet, "/cgi-bin/token?grant_type=client_credential&appid="+appID+"&secret="+secret, nil)
		return a
	}
	one := get()
	two := get()
	if one.AccessToken == "" || one.AccessToken == two.AccessToken || two.ExpiresIn != 7200 {
		t.Fatalf("tokens %+v %+v", one, two)
	}
	if a := e.send(t, one.AccessToken, examMessage(follower, "")); a.ErrCode != 0 {
		t.Fatalf("old token at once: %+v", a)
	}
	clk.Advance(5 * time.Minute)
	if a := e.send(t, one.AccessToken, examMessage(follower, "")); a.ErrCode != 42001 {
		t.Fatalf("old token after 5 min: %+v, want 42001", a)
	}
	if a := e.send(t, two.AccessToken, examMessage(follower, "")); a.ErrCode != 0 {
		t.Fatalf("new token: %+v", a)
	}
	if _, a := e.call(t, http.MethodGet, "/cgi-bin/token?grant_type=client_credential&appid="+appID+"&secret=wrong", nil); a.ErrCode != 40125 {
		t.Fatalf("wrong secret: %+v", a)
	}
}

func (e *env) raw(t *testing.T, method, path, body string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %q", path, b)
	}
	return m
}

func TestPrivateTemplatesAndMenu(t *testing.T) {
	e := newEnv(t, simulator.Config{})
	tok := e.token(t, false).AccessToken
	m := e.raw(t, "GET", "/cgi-bin/template/get_all_private_template?access_token="+tok, "")
	list, _ := m["template_list"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["template_id"] != tplExam ||
		!strings.Contains(list[0].(map[string]any)["content"].(string), "{{character_string3.DATA}}") {
		t.Fatalf("templates %v", m)
	}
	if m := e.raw(t, "GET", "/cgi-bin/menu/get?access_token="+tok, ""); m["errcode"] != float64(46003) {
		t.Fatalf("no menu: %v", m)
	}
	menu := `{"button":[{"type":"view","name":"绑定学号","url":"https://campus.example.edu/bind"}]}`
	if m := e.raw(t, "POST", "/cgi-bin/menu/create?access_token="+tok, menu); m["errcode"] != float64(0) {
		t.Fatalf("menu/create: %v", m)
	}
	got := e.raw(t, "GET", "/cgi-bin/menu/get?access_token="+tok, "")
	b, _ := json.Marshal(got["menu"])
	var want any
	_ = json.Unmarshal([]byte(menu), &want)
	if w, _ := json.Marshal(want); string(b) != string(w) {
		t.Fatalf("menu/get %s, want %s", b, menu)
	}
	for _, bad := range []struct {
		body string
		code float64
	}{
		{`{"button":[]}`, 40016},
		{`{"button":[{"type":"view","name":"` + strings.Repeat("长", 6) + `","url":"https://x"}]}`, 40018},
		{`{"button":[{"type":"view","name":"a","url":"ftp://x"}]}`, 40020},
		{`{"button":[{"type":"magic","name":"a"}]}`, 40017},
		{`{"button":[{"name":"a","sub_button":[{"type":"click","name":"b","key":"k"},{"type":"click","name":"b","key":"k"},{"type":"click","name":"b","key":"k"},{"type":"click","name":"b","key":"k"},{"type":"click","name":"b","key":"k"},{"type":"click","name":"b","key":"k"}]}]}`, 40023},
	} {
		if m := e.raw(t, "POST", "/cgi-bin/menu/create?access_token="+tok, bad.body); m["errcode"] != bad.code {
			t.Errorf("%s: %v, want %v", bad.body, m, bad.code)
		}
	}
}
