package simulator_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/platform/simulator"
)

const (
	appID    = "wx1234567890abcdef"
	secret   = "s3cr3t-app-secret-0123456789abcd"
	cbToken  = "callback-token"
	tplExam  = "tpl_exam_reminder"
	follower = "oFollower0000000000000000001"
)

// newClock is a fake clock at the fixed start of these tests.
func newClock() *clocktest.Clock { return clocktest.New(time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC)) }

// pushed is one event a receiver got, with the query it came with.
type pushed struct {
	ToUserName   string
	FromUserName string
	CreateTime   int64
	MsgType      string
	Event        string
	MsgID        int64
	Status       string
	SignatureOK  bool
	// QueryOpenID is the openid the push's query names.
	QueryOpenID string `xml:"-"`
}

// receiver is a callback endpoint that checks signatures on its own (not with
// simulator.Sign) and hands every event to a channel.
type receiver struct {
	srv      *httptest.Server
	events   chan pushed
	failFor  atomic.Int64 // leave this many requests unanswered first (the connection dropped)
	refuse   atomic.Int64 // then answer HTTP 500 to this many
	requests atomic.Int64
	inFlight atomic.Int64
	maxIn    atomic.Int64
	gate     chan struct{} // when not nil, each request waits for a token
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{events: make(chan pushed, 10000)}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	rc.requests.Add(1)
	n := rc.inFlight.Add(1)
	defer rc.inFlight.Add(-1)
	for {
		m := rc.maxIn.Load()
		if n <= m || rc.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	if rc.gate != nil {
		<-rc.gate
	}
	if rc.failFor.Add(-1) >= 0 {
		panic(http.ErrAbortHandler) // no answer
	}
	if rc.refuse.Add(-1) >= 0 {
		http.Error(w, "down", http.StatusInternalServerError)
		return
	}
	q := r.URL.Query()
	parts := []string{cbToken, q.Get("timestamp"), q.Get("nonce")}
	sort.Strings(parts)
	sum := sha1.Sum([]byte(strings.Join(parts, "")))
	var p pushed
	body, _ := io.ReadAll(r.Body)
	if err := xml.Unmarshal(body, &struct {
		XMLName xml.Name `xml:"xml"`
		*pushed
	}{pushed: &p}); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.SignatureOK = q.Get("signature") == hex.EncodeToString(sum[:]) && q.Get("timestamp") != "" && q.Get("nonce") != ""
	p.QueryOpenID = q.Get("openid")
	rc.events <- p
	_, _ = io.WriteString(w, "success")
}

// next waits for the next event, failing the test after a deadline.
func (rc *receiver) next(t *testing.T) pushed {
	t.Helper()
	select {
	case p := <-rc.events:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no event pushed within 5 s")
		return pushed{}
	}
}

type env struct {
	sim *simulator.Simulator
	srv *httptest.Server
}

func newEnv(t *testing.T, cfg simulator.Config) *env {
	t.Helper()
	cfg.AppID, cfg.Secret = appID, secret
	if cfg.CallbackToken == "" {
		cfg.CallbackToken = cbToken
	}
	cfg.Seed = 1
	sim := simulator.New(cfg)
	sim.AddTemplate(tplExam, []string{"thing1", "time2", "character_string3"})
	sim.AddFollower(follower)
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { srv.Close(); sim.Close() })
	return &env{sim: sim, srv: srv}
}

// answer is any JSON answer of the platform's API.
type answer struct {
	ErrCode     int    `json:"errcode"`
	ErrMsg      string `json:"errmsg"`
	MsgID       int64  `json:"msgid"`
	AccessToken string `json:"access_token"`
	ExpiresIn   int64  `json:"expires_in"`
}

func (e *env) call(t *testing.T, method, path string, body any) (int, answer) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a answer
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatalf("%s %s: unparsable answer %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, a
}

func (e *env) token(t *testing.T, force bool) answer {
	t.Helper()
	_, a := e.call(t, http.MethodPost, "/cgi-bin/stable_token", map[string]any{
		"grant_type": "client_credential", "appid": appID, "secret": secret, "force_refresh": force,
	})
	if a.ErrCode != 0 || a.AccessToken == "" {
		t.Fatalf("stable_token: %+v", a)
	}
	return a
}

func (e *env) send(t *testing.T, tok string, body any) answer {
	t.Helper()
	status, a := e.call(t, http.MethodPost, "/cgi-bin/message/template/send?access_token="+tok, body)
	if status != http.StatusOK {
		t.Fatalf("send: HTTP status %d", status)
	}
	return a
}

func examMessage(openid, clientMsgID string) map[string]any {
	return map[string]any{
		"touser":        openid,
		"template_id":   tplExam,
		"url":           "https://campus.example.edu/exams/42",
		"client_msg_id": clientMsgID,
		"data": map[string]any{
			"thing1":            map[string]string{"value": "高等数学期末考试"},
			"time2":             map[string]string{"value": "2025-01-08 09:00"},
			"character_string3": map[string]string{"value": "A-101"},
		},
	}
}

// errMsg drops the request id the simulator appends, as the platform does.
func errMsg(a answer) string {
	msg, _, _ := strings.Cut(a.ErrMsg, " rid: ")
	return msg
}

func TestStableTokenChecksCredentials(t *testing.T) {
	e := newEnv(t, simulator.Config{})
	tests := []struct {
		name   string
		method string
		body   any
		code   int
		msg    string
	}{
		{"wrong appid", "POST", map[string]any{"grant_type": "client_credential", "appid": "wxother", "secret": secret}, 40013, "invalid appid"},
		{"wrong secret", "POST", map[string]any{"grant_type": "client_credential", "appid": appID, "secret": "nope"}, 40125, "invalid appsecret"},
		{"no appid", "POST", map[string]any{"grant_type": "client_credential", "secret": secret}, 41002, "appid missing"},
		{"no secret", "POST", map[string]any{"grant_type": "client_credential", "appid": appID}, 41004, "appsecret missing"},
		{"wrong grant type", "POST", map[string]any{"grant_type": "password", "appid": appID, "secret": secret}, 40002, "invalid grant_type"},
		{"not JSON", "POST", "appid=x", 47001, "data format error"},
		{"empty body", "POST", "", 44002, "empty post data"},
		{"GET", "GET", nil, 43002, "require POST method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, a := e.call(t, tt.method, "/cgi-bin/stable_token", tt.body)
			if a.ErrCode != tt.code || errMsg(a) != tt.msg || a.AccessToken != "" {
				t.Errorf("answer %+v, want errcode %d %q", a, tt.code, tt.msg)
			}
			if !strings.Contains(a.ErrMsg, " rid: ") {
				t.Errorf("errmsg %q has no request id", a.ErrMsg)
			}
		})
	}
}

func TestStableTokenModes(t *testing.T) {
	clk := newClock()
	e := newEnv(t, simulator.Config{Now: clk.Now})

	first := e.token(t, false)
	if first.ExpiresIn != 7200 {
		t.Errorf("expires_in = %d, want 7200", first.ExpiresIn)
	}
	clk.Advance(10 * time.Minute)
	again := e.token(t, false)
	if again.AccessToken != first.AccessToken || again.ExpiresIn != 7200-600 {
		t.Errorf("normal mode answered %q (expires_in %d), want the same token with 6600 s left", again.AccessToken, again.ExpiresIn)
	}

	forced := e.token(t, true)
	if forced.AccessToken == first.AccessToken || forced.ExpiresIn != 7200 {
		t.Fatalf("force_refresh answered the old token or a wrong lifetime: %+v", forced)
	}
	if a := e.send(t, first.AccessToken, examMessage(follower, "")); a.ErrCode != 40001 {
		t.Errorf("old token after a forced refresh: %+v, want 40001", a)
	}
	if a := e.send(t, forced.AccessToken, examMessage(follower, "")); a.ErrCode != 0 {
		t.Errorf("new token: %+v", a)
	}
	if a := e.send(t, "sim_never_issued", examMessage(follower, "")); a.ErrCode != 40014 || errMsg(a) != "invalid access_token" {
		t.Errorf("unknown token: %+v, want 40014", a)
	}
	if a := e.send(t, "", examMessage(follower, "")); a.ErrCode != 41001 {
		t.Errorf("no token: %+v, want 41001", a)
	}
	st := e.sim.Stats()
	if st.TokenRequests != 3 || st.TokenForceRefreshes != 1 {
		t.Errorf("stats %+v, want 3 token requests, 1 forced", st)
	}
}

func TestTokenLifetime(t *testing.T) {
	clk := newClock()
	e := newEnv(t, simulator.Config{Now: clk.Now})
	old := e.token(t, false).AccessToken

	// In its last five minutes, normal mode hands out a new token, and the
	// old one keeps working until it expires.
	clk.Advance(7200*time.Second - 4*time.Minute)
	renewed := e.token(t, false)
	if renewed.AccessToken == old || renewed.ExpiresIn != 7200 {
		t.Fatalf("normal mode in the last minutes: %+v, want a new token", renewed)
	}
	if a := e.send(t, old, examMessage(follower, "")); a.ErrCode != 0 {
		t.Errorf("old token before its expiry: %+v", a)
	}
	clk.Advance(4 * time.Minute)
	if a := e.send(t, old, examMessage(follower, "")); a.ErrCode != 42001 || errMsg(a) != "access_token expired" {
		t.Errorf("old token after its expiry: %+v, want 42001", a)
	}
	if a := e.send(t, renewed.AccessToken, examMessage(follower, "")); a.ErrCode != 0 {
		t.Errorf("renewed token: %+v", a)
	}
}

func TestSendChecks(t *testing.T) {
	e := newEnv(t, simulator.Config{})
	e.sim.AddFollower("oUnfollowed")
	e.sim.RemoveFollower("oUnfollowed")
	e.sim.AddFollower("oRefusing")
	e.sim.SetRefusing("oRefusing", true)
	tok := e.token(t, false).AccessToken

	with := func(change func(m map[string]any)) map[string]any {
		m := examMessage(follower, "")
		change(m)
		return m
	}
	setValue := func(k, v string) func(map[string]any) {
		return func(m map[string]any) { m["data"].(map[string]any)[k] = map[string]string{"value": v} }
	}
	tests := []struct {
		name string
		body any
		code int
		msg  string
	}{
		{"accepted", examMessage(follower, ""), 0, "ok"},
		{"empty value", with(setValue("character_string3", "")), 47003, "argument invalid! data.character_string3.value invalid"},
		{"unknown openid", examMessage("oStranger", ""), 40003, "invalid openid"},
		{"no openid", with(func(m map[string]any) { delete(m, "touser") }), 40003, "invalid openid"},
		{"not following", examMessage("oUnfollowed", ""), 43004, "require subscribe"},
		{"refusing", examMessage("oRefusing", ""), 43101, "user refuse to accept the msg"},
		{"unknown template", with(func(m map[string]any) { m["template_id"] = "tpl_gone" }), 40037, "invalid template_id"},
		{"thing too long", with(setValue("thing1", strings.Repeat("考", 21))), 47003, "argument invalid! data.thing1.value invalid"},
		{"line break", with(setValue("thing1", "期末\n考试")), 47003, "argument invalid! data.thing1.value invalid"},
		{"bad time", with(setValue("time2", "明天上午")), 47003, "argument invalid! data.time2.value invalid"},
		{"Chinese string", with(setValue("character_string3", "一教101")), 47003, "argument invalid! data.character_string3.value invalid"},
		{"first bad keyword named", with(func(m map[string]any) {
			setValue("time2", "x")(m)
			setValue("thing1", strings.Repeat("x", 21))(m)
		}), 47003, "argument invalid! data.thing1.value invalid"},
		{"keyword not in template", with(setValue("amount9", "¥5")), 47003, "argument invalid! data.amount9 not exist"},
		{"no data", with(func(m map[string]any) { delete(m, "data") }), 47003, "argument invalid! data is empty"},
		{"url not http", with(func(m map[string]any) { m["url"] = "javascript:alert(1)" }), 47003, "argument invalid! url invalid"},
		{"not JSON", "{touser", 47001, "data format error"},
		{"empty body", "", 44002, "empty post data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := e.send(t, tok, tt.body)
			if a.ErrCode != tt.code || errMsg(a) != tt.msg {
				t.Errorf("answer %+v, want %d %q", a, tt.code, tt.msg)
			}
			if (a.MsgID != 0) != (tt.code == 0) {
				t.Errorf("msgid %d with errcode %d", a.MsgID, a.ErrCode)
			}
		})
	}
	// A value may also be sent as a JSON number.
	numeric := with(func(m map[string]any) {
		m["data"].(map[string]any)["character_string3"] = map[string]any{"value": 20250108}
	})
	if a := e.send(t, tok, numeric); a.ErrCode != 0 {
		t.Errorf("numeric value: %+v", a)
	}
	if got := e.sim.Sent()[1].Data["character_string3"]; got != "20250108" {
		t.Errorf("numeric value stored as %q", got)
	}

	st := e.sim.Stats()
	if st.Accepted != 2 || st.Errors["47003"] != 9 || st.Errors["40003"] != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestSendGETIsRefused(t *testing.T) {
	e := newEnv(t, simulator.Config{})
	tok := e.token(t, false).AccessToken
	if _, a := e.call(t, http.MethodGet, "/cgi-bin/message/template/send?access_token="+tok, nil); a.ErrCode != 43002 {
		t.Errorf("GET: %+v, want 43002", a)
	}
}

func TestMessageIDsIncrease(t *testing.T) {
	e := newEnv(t, simulator.Config{})
	tok := e.token(t, false).AccessToken
	var last int64
	for i := range 20 {
		a := e.send(t, tok, examMessage(follower, fmt.Sprint("ucs-", i)))
		if a.ErrCode != 0 || a.MsgID <= last {
			t.Fatalf("send %d: %+v after msgid %d", i, a, last)
		}
		last = a.MsgID
	}
	if last < 1<<53 {
		t.Errorf("msgid %d: the platform's ids exceed 2^53", last)
	}
}

func TestClientMsgIDDeduplicates(t *testing.T) {
	clk := newClock()
	rc := newReceiver(t)
	e := newEnv(t, simulator.Config{Now: clk.Now, CallbackURL: rc.srv.URL, CallbackDelay: time.Millisecond})
	e.sim.AddFollower("oOther")
	tok := e.token(t, false).AccessToken

	first := e.send(t, tok, examMessage(follower, "01JH5Z0000000000000000000A"))
	repeat := e.send(t, tok, examMessage(follower, "01JH5Z0000000000000000000A"))
	if first.ErrCode != 0 || repeat.ErrCode != 0 || repeat.MsgID != first.MsgID {
		t.Fatalf("repeat answered %+v, want errcode 0 and msgid %d", repeat, first.MsgID)
	}
	// The key is openid + client_msg_id: another follower gets their own.
	other := e.send(t, tok, examMessage("oOther", "01JH5Z0000000000000000000A"))
	if other.ErrCode != 0 || other.MsgID == first.MsgID {
		t.Errorf("other openid, same client_msg_id: %+v", other)
	}
	// Even a follower who left meanwhile is answered as before: the message
	// was sent once already.
	e.sim.RemoveFollower(follower)
	if a := e.send(t, tok, examMessage(follower, "01JH5Z0000000000000000000A")); a.MsgID != first.MsgID {
		t.Errorf("repeat after unfollowing: %+v", a)
	}
	e.sim.AddFollower(follower)
	// The window is ten minutes.
	clk.Advance(9*time.Minute + 59*time.Second)
	if a := e.send(t, tok, examMessage(follower, "01JH5Z0000000000000000000A")); a.MsgID != first.MsgID {
		t.Errorf("repeat within 10 minutes: %+v", a)
	}
	clk.Advance(time.Second)
	late := e.send(t, tok, examMessage(follower, "01JH5Z0000000000000000000A"))
	if late.ErrCode != 0 || late.MsgID == first.MsgID {
		t.Errorf("repeat after 10 minutes: %+v, want a new message", late)
	}

	e.sim.Close() // delivers everything queued
	sent := e.sim.Sent()
	if len(sent) != 3 {
		t.Errorf("%d messages accepted, want 3", len(sent))
	}
	if got := len(rc.events); got != 3 {
		t.Errorf("%d TEMPLATESENDJOBFINISH events, want 3 (none for repeats)", got)
	}
	if st := e.sim.Stats(); st.Deduplicated != 3 || st.Accepted != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestTemplateSendJobFinishEvent(t *testing.T) {
	tests := []struct {
		name   string
		faults simulator.Faults
		status string
	}{
		{"delivered", simulator.Faults{}, "success"},
		{"user block", simulator.Faults{BlockRate: 1}, "failed:user block"},
		{"system failed", simulator.Faults{SystemFailRate: 1}, "failed: system failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			rc := newReceiver(t)
			e := newEnv(t, simulator.Config{Now: clk.Now, CallbackURL: rc.srv.URL + "/wx/callback?tenant=campus"})
			e.sim.SetFaults(tt.faults)
			tok := e.token(t, false).AccessToken
			a := e.send(t, tok, examMessage(follower, "ucs-1"))
			if a.ErrCode != 0 {
				t.Fatalf("send: %+v", a)
			}
			p := rc.next(t)
			want := pushed{
				ToUserName: simulator.AccountID, FromUserName: follower, CreateTime: clk.Now().Unix(),
				MsgType: "event", Event: "TEMPLATESENDJOBFINISH", MsgID: a.MsgID, Status: tt.status, SignatureOK: true,
				QueryOpenID: follower,
			}
			if p != want {
				t.Errorf("event %+v\nwant  %+v", p, want)
			}
		})
	}
}

func TestCallbackRetries(t *testing.T) {
	tests := []struct {
		name      string
		failFor   int64 // pushes left unanswered
		refuse    int64 // pushes answered 500 after those
		requests  int64
		delivered int64
		failed    int64
	}{
		{"delivered at once", 0, 0, 1, 1, 0},
		{"third attempt", 2, 0, 3, 1, 0},
		{"last retry", 3, 0, 4, 1, 0},
		{"gives up after three retries", 10, 0, 4, 0, 1},
		{"an answer that is no success is final", 0, 1, 1, 0, 1},
		{"so after a retry", 1, 1, 2, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := newReceiver(t)
			rc.failFor.Store(tt.failFor)
			rc.refuse.Store(tt.refuse)
			e := newEnv(t, simulator.Config{CallbackURL: rc.srv.URL, CallbackDelay: time.Millisecond})
			tok := e.token(t, false).AccessToken
			if a := e.send(t, tok, examMessage(follower, "")); a.ErrCode != 0 {
				t.Fatalf("send: %+v", a)
			}
			if tt.delivered == 1 {
				rc.next(t)
			}
			e.sim.Close()
			st := e.sim.Stats()
			if rc.requests.Load() != tt.requests || st.CallbacksDelivered != tt.delivered || st.CallbacksFailed != tt.failed {
				t.Errorf("%d requests, stats %+v; want %d requests, %d delivered, %d failed",
					rc.requests.Load(), st, tt.requests, tt.delivered, tt.failed)
			}
		})
	}
}

func TestSubscribeAndUnsubscribePushEvents(t *testing.T) {
	clk := newClock()
	rc := newReceiver(t)
	e := newEnv(t, simulator.Config{Now: clk.Now, CallbackURL: rc.srv.URL})
	tok := e.token(t, false).AccessToken
	ctx := context.Background()

	if err := e.sim.Subscribe(ctx, "oNewcomer"); err != nil {
		t.Fatal(err)
	}
	// Subscribe returns after the push: the event is already there.
	select {
	case p := <-rc.events:
		want := pushed{ToUserName: simulator.AccountID, FromUserName: "oNewcomer", CreateTime: clk.Now().Unix(),
			MsgType: "event", Event: "subscribe", SignatureOK: true, QueryOpenID: "oNewcomer"}
		if p != want {
			t.Errorf("event %+v, want %+v", p, want)
		}
	default:
		t.Fatal("Subscribe returned before its event was pushed")
	}
	if a := e.send(t, tok, examMessage("oNewcomer", "")); a.ErrCode != 0 {
		t.Errorf("send after subscribing: %+v", a)
	}
	rc.next(t) // its TEMPLATESENDJOBFINISH

	if err := e.sim.Unsubscribe(ctx, "oNewcomer"); err != nil {
		t.Fatal(err)
	}
	if p := rc.next(t); p.Event != "unsubscribe" || p.FromUserName != "oNewcomer" || !p.SignatureOK {
		t.Errorf("event %+v, want a signed unsubscribe", p)
	}
	if a := e.send(t, tok, examMessage("oNewcomer", "")); a.ErrCode != 43004 {
		t.Errorf("send after unsubscribing: %+v, want 43004", a)
	}

	rc.refuse.Store(100)
	if err := e.sim.Subscribe(ctx, "oUnlucky"); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("Subscribe with a failing receiver: %v", err)
	}
}

func TestFaults(t *testing.T) {
	e := newEnv(t, simulator.Config{})
	tok := e.token(t, false).AccessToken

	e.sim.SetFaults(simulator.Faults{BusyRate: 1})
	if a := e.send(t, tok, examMessage(follower, "")); a.ErrCode != -1 || errMsg(a) != "system error" {
		t.Errorf("busy: %+v, want -1 system error", a)
	}
	e.sim.SetFaults(simulator.Faults{ServerErrorRate: 1})
	if status, _ := e.call(t, http.MethodPost, "/cgi-bin/message/template/send?access_token="+tok, examMessage(follower, "")); status != http.StatusBadGateway {
		t.Errorf("server error: HTTP %d, want 502", status)
	}
	e.sim.SetFaults(simulator.Faults{Latency: 30 * time.Millisecond, BusyRate: 7, BlockRate: -1})
	if f := e.sim.Faults(); f.BusyRate != 1 || f.BlockRate != 0 {
		t.Errorf("rates not clamped: %+v", f)
	}
	e.sim.SetFaults(simulator.Faults{Latency: 30 * time.Millisecond})
	start := time.Now()
	if a := e.send(t, tok, examMessage(follower, "")); a.ErrCode != 0 {
		t.Errorf("send: %+v", a)
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Errorf("send took %v with 30ms latency", took)
	}
	st := e.sim.Stats()
	if st.Sends != 3 || st.ServerErrors != 1 || st.Errors["-1"] != 1 || st.Accepted != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestFaultRatesAreShares(t *testing.T) {
	e := newEnv(t, simulator.Config{})
	tok := e.token(t, false).AccessToken
	e.sim.SetFaults(simulator.Faults{BusyRate: 0.3})
	busy := 0
	for range 400 {
		if e.send(t, tok, examMessage(follower, "")).ErrCode == -1 {
			busy++
		}
	}
	if busy < 80 || busy > 160 {
		t.Errorf("%d of 400 sends busy at rate 0.3", busy)
	}
}

func TestCloseDeliversQueuedEventsAtOnce(t *testing.T) {
	rc := newReceiver(t)
	e := newEnv(t, simulator.Config{CallbackURL: rc.srv.URL, CallbackDelay: time.Hour, CallbackWorkers: 4})
	tok := e.token(t, false).AccessToken
	for i := range 50 {
		if a := e.send(t, tok, examMessage(follower, fmt.Sprint(i))); a.ErrCode != 0 {
			t.Fatal(a)
		}
	}
	if st := e.sim.Stats(); st.CallbacksDelivered != 0 {
		t.Fatalf("events pushed before their delay: %+v", st)
	}
	e.sim.Close()
	if got := len(rc.events); got != 50 {
		t.Errorf("%d events after Close, want 50", got)
	}
	// Sends after Close are still answered, without pushes.
	if a := e.send(t, tok, examMessage(follower, "late")); a.ErrCode != 0 {
		t.Errorf("send after Close: %+v", a)
	}
}

func TestPushesRunOnABoundedPool(t *testing.T) {
	rc := newReceiver(t)
	rc.gate = make(chan struct{})
	e := newEnv(t, simulator.Config{CallbackURL: rc.srv.URL, CallbackDelay: time.Millisecond, CallbackWorkers: 3})
	tok := e.token(t, false).AccessToken
	const n = 300
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if a := e.send(t, tok, examMessage(follower, fmt.Sprint(i))); a.ErrCode != 0 {
				t.Error(a)
			}
		})
	}
	wg.Wait() // sends are answered while every push is held up
	if got := e.sim.Stats().CallbacksPending; got < n-3 {
		t.Errorf("%d pushes pending, want at least %d", got, n-3)
	}
	close(rc.gate)
	for range n {
		rc.next(t)
	}
	if m := rc.maxIn.Load(); m > 3 {
		t.Errorf("%d pushes at once with 3 workers", m)
	}
}

func TestAdminAPI(t *testing.T) {
	rc := newReceiver(t)
	e := newEnv(t, simulator.Config{CallbackURL: rc.srv.URL, CallbackDelay: time.Millisecond})
	admin := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(raw))
	}

	steps := []struct {
		method, path, body string
		status             int
		want               string // the answer, or a part of it
	}{
		{"POST", "/sim/templates", `{"template_id":"tpl_approval","keywords":["thing1","phrase2"]}`, 200, `"tpl_approval"`},
		{"POST", "/sim/followers", `{"openid":"oAdmin"}`, 200, `{"openid":"oAdmin"}`},
		{"POST", "/sim/followers", `{}`, 400, `{"error":"openid: required"}`},
		{"POST", "/sim/followers", `{"open_id":"x"}`, 400, `unknown field`},
		{"POST", "/sim/faults", `{"latency":"50ms","busy_rate":0.25}`, 200, `{"busy_rate":0.25,"latency":"50ms","block_rate":0,"system_fail_rate":0,"server_error_rate":0,"quota_used_up":false,"address_refused":false}`},
		{"GET", "/sim/faults", ``, 200, `{"busy_rate":0.25,"latency":"50ms","block_rate":0,"system_fail_rate":0,"server_error_rate":0,"quota_used_up":false,"address_refused":false}`},
		{"POST", "/sim/faults", `{"latency":"soon","busy_rate":2,"block_rate":-0.5}`, 400,
			`{"error":"faults: busy_rate: 2 is not between 0 and 1; block_rate: -0.5 is not between 0 and 1; latency: \"soon\" is not a duration such as \"50ms\""}`},
		{"POST", "/sim/faults", `{}`, 200, `"latency":"0s"`},
		{"POST", "/sim/subscribe", `{"openid":"oScript"}`, 200, `{"openid":"oScript"}`},
		{"POST", "/sim/unsubscribe", `{"openid":"oScript"}`, 200, `{"openid":"oScript"}`},
		{"POST", "/sim/refusing", `{"openid":"oAdmin","refusing":false}`, 200, `{"openid":"oAdmin"}`},
	}
	for _, s := range steps {
		status, body := admin(s.method, s.path, s.body)
		if status != s.status || !strings.Contains(body, s.want) {
			t.Errorf("%s %s %s: %d %s\nwant %d %s", s.method, s.path, s.body, status, body, s.status, s.want)
		}
	}
	if p := rc.next(t); p.Event != "subscribe" || p.FromUserName != "oScript" {
		t.Errorf("first event %+v", p)
	}
	if p := rc.next(t); p.Event != "unsubscribe" {
		t.Errorf("second event %+v", p)
	}

	tok := e.token(t, false).AccessToken
	msg := func(openid, cid string) map[string]any {
		return map[string]any{"touser": openid, "template_id": "tpl_approval", "client_msg_id": cid,
			"data": map[string]any{"thing1": map[string]string{"value": "请假申请"}, "phrase2": map[string]string{"value": "已通过"}}}
	}
	a := e.send(t, tok, msg("oAdmin", "ucs-A"))
	e.send(t, tok, msg("oAdmin", "ucs-B"))
	e.send(t, tok, msg("oAdmin", "ucs-A"))
	if a.ErrCode != 0 {
		t.Fatalf("send: %+v", a)
	}

	status, body := admin("GET", "/sim/messages?client_msg_id=ucs-A", "")
	var msgs []simulator.SentMessage
	if err := json.Unmarshal([]byte(body), &msgs); status != 200 || err != nil {
		t.Fatalf("messages: %d %s %v", status, body, err)
	}
	if len(msgs) != 1 || msgs[0].MsgID != a.MsgID || msgs[0].ToUser != "oAdmin" || msgs[0].Data["phrase2"] != "已通过" {
		t.Errorf("messages %+v", msgs)
	}
	if !strings.Contains(body, fmt.Sprintf(`"msgid":%d`, a.MsgID)) {
		t.Errorf("msgid not written as an exact integer: %s", body)
	}
	if _, body := admin("GET", "/sim/messages", ""); strings.Count(body, `"msgid"`) != 2 {
		t.Errorf("all messages: %s", body)
	}

	if _, body := admin("DELETE", "/sim/followers", `{"openid":"oAdmin"}`); !strings.Contains(body, "oAdmin") {
		t.Errorf("delete follower: %s", body)
	}
	if a := e.send(t, tok, msg("oAdmin", "ucs-C")); a.ErrCode != 43004 {
		t.Errorf("send to a removed follower: %+v", a)
	}

	_, body = admin("GET", "/sim/stats", "")
	var st simulator.Stats
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.Sends != 4 || st.Accepted != 2 || st.Deduplicated != 1 || st.Errors["43004"] != 1 || st.TokenRequests != 1 {
		t.Errorf("stats %s", body)
	}
}

func TestSign(t *testing.T) {
	// sha1("1409304348" + "abc" + "xxxxxx") with the three sorted.
	sum := sha1.Sum([]byte("1409304348abcxxxxxx"))
	if got, want := simulator.Sign("abc", "1409304348", "xxxxxx"), hex.EncodeToString(sum[:]); got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

func TestSentIsBounded(t *testing.T) {
	s := simulator.New(simulator.Config{AppID: "wxcap", Secret: "capsecret", MaxSent: 10})
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	s.AddTemplate("tpl", []string{"thing1"})
	s.AddFollower("oCap")
	c := capClient(t, srv.URL)
	for i := range 25 {
		if _, err := c.SendTemplate(context.Background(), platform.TemplateMessage{ToUser: "oCap", TemplateID: "tpl",
			ClientMsgID: fmt.Sprintf("m%d", i), Data: map[string]string{"thing1": "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	got := s.Sent()
	if len(got) > 10 || len(got) < 9 || got[len(got)-1].ClientMsgID != "m24" {
		t.Fatalf("kept %d, last %q", len(got), got[len(got)-1].ClientMsgID)
	}
	if st := s.Stats(); st.Accepted != 25 {
		t.Fatalf("accepted %d", st.Accepted)
	}
}

func capClient(t *testing.T, base string) *platform.Client {
	t.Helper()
	c, err := platform.New(platform.Config{APIBase: base, AppID: "wxcap", Secret: "capsecret"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
