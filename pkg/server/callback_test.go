package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/campus-it/ucs/pkg/announce"
	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/natskv"
	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/platform/safemode"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

const (
	callbackPath = "/v1/infra/notification/mp/callback"
	// aesKey is an EncodingAESKey of the tests' safe-mode account.
	aesKey    = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
	safeAppID = "wx5afe000000000001"
)

// logLines collects a service's JSON log records, safely from many goroutines.
type logLines struct{ embeddedtest.SyncBuffer }

func (l *logLines) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// events returns the records that carry event ev.
func (l *logLines) events(t testing.TB, ev string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["event"] == ev {
			out = append(out, m)
		}
	}
	return out
}

// plainQuery is a callback query signed in plain mode with token, stamped now.
func (e *env) plainQuery(token, nonce string) string {
	ts := strconv.FormatInt(e.clock.Now().Unix(), 10)
	return url.Values{"signature": {sign(token, ts, nonce)}, "timestamp": {ts}, "nonce": {nonce}}.Encode()
}

// safePost seals event in safe mode for appID and returns its query and body.
func (e *env) safePost(t testing.TB, appID, nonce, event string) (query, body string) {
	t.Helper()
	c, err := safemode.New(aesKey, appID)
	if err != nil {
		t.Fatal(err)
	}
	ts := strconv.FormatInt(e.clock.Now().Unix(), 10)
	b, msgSig, err := c.Seal(cbToken, ts, nonce, simulator.AccountID, []byte(event))
	if err != nil {
		t.Fatal(err)
	}
	return url.Values{"signature": {sign(cbToken, ts, nonce)}, "timestamp": {ts}, "nonce": {nonce},
		"encrypt_type": {"aes"}, "msg_signature": {msgSig}}.Encode(), string(b)
}

func (e *env) callback(query, body string) answer {
	e.t.Helper()
	return e.do("POST", callbackPath+"?"+query, "text/xml", "", body)
}

func followEvent(openID, event string, created int64) string {
	return `<xml><ToUserName><![CDATA[gh_1]]></ToUserName><FromUserName><![CDATA[` + openID + `]]></FromUserName><CreateTime>` +
		strconv.FormatInt(created, 10) + `</CreateTime><MsgType><![CDATA[event]]></MsgType><Event><![CDATA[` + event + `]]></Event></xml>`
}

// receiptCreated numbers the receipts the tests make: each is its own event of the platform
// (which tells one event's repeats by their follower, CreateTime and msgid), unless a test sends
// the same body again.
var receiptCreated atomic.Int64

func receiptEvent(openID string, msgID int64, status string) string {
	created := strconv.FormatInt(1_700_000_000+receiptCreated.Add(1), 10)
	return `<xml><ToUserName><![CDATA[gh_1]]></ToUserName><FromUserName><![CDATA[` + openID + `]]></FromUserName><CreateTime>` + created + `</CreateTime>` +
		`<MsgType><![CDATA[event]]></MsgType><Event><![CDATA[TEMPLATESENDJOBFINISH]]></Event><MsgID>` + strconv.FormatInt(msgID, 10) +
		`</MsgID><Status><![CDATA[` + status + `]]></Status></xml>`
}

func (e *env) following(user string) bool {
	e.t.Helper()
	b, err := e.api.Store.Binding(context.Background(), user)
	if err != nil {
		e.t.Fatal(err)
	}
	return b.Following
}

// markSent records that the platform accepted ucsID as msgID for openID, as a worker does.
func (e *env) markSent(ucsID string, msgID int64, openID string) {
	e.t.Helper()
	e.markSentOn(ucsID, msgID, openID, 1)
}

// markSentOn records ucsID as sent on the given attempt.
func (e *env) markSentOn(ucsID string, msgID int64, openID string, attempt int) {
	e.t.Helper()
	w := e.api.Store.NewWriter(store.WriterOptions{})
	defer w.Close()
	now := e.clock.Now()
	r := push.Result{UcsID: ucsID, ClientID: "pusher", State: push.StateSent, Attempts: attempt, MsgID: msgID, Accepted: now, Updated: now, Sent: now}
	if err := w.Write(context.Background(), store.SentRecords(r, openID, now)...); err != nil {
		e.t.Fatal(err)
	}
}

// applied waits until the front end applied every platform event stored so far but held,
// the number of receipts waiting for their msgid.
func (e *env) applied(held int) {
	e.t.Helper()
	ctx := context.Background()
	name := queue.PlatformEventStream(e.cfg.NATS.Stream)
	st, err := e.js.Stream(ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	si, err := st.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	last := si.State.LastSeq // every event stored so far: the consumer must have handed it out
	embeddedtest.Eventually(e.t, 20*time.Second, "platform events applied", func() bool {
		cons, err := e.js.Consumer(ctx, name, "apply")
		if err != nil {
			e.t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		return info.Delivered.Stream >= last && info.NumPending == 0 && info.NumAckPending == held &&
			e.api.Notify.ReceiptsWaiting() == held
	})
}

// result is the lookup of ucsID through the front end.
func (e *env) result(tok, ucsID string) map[string]any {
	e.t.Helper()
	a := e.do("GET", "/v1/infra/notification/mp/"+ucsID, "", tok, "")
	d, _ := a.json(e.t)["data"].(map[string]any)
	return d
}

// replica starts a second front end on the same NATS and store, and returns its address.
func (e *env) replica() string {
	e.t.Helper()
	api, err := service.NewAPI(context.Background(), e.cfg, service.Deps{Now: e.clock.Now})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(api.Close)
	ts := httptest.NewServer(api.Server)
	e.t.Cleanup(ts.Close)
	return ts.URL
}

// TestCallbackReplayRefused: a captured signed query is accepted with its own body only (the
// platform's repeat of the push), whichever front end it reaches; the address check's query
// cannot sign an event.
func TestCallbackReplayRefused(t *testing.T) {
	var logs logLines
	e := newEnvLogged(t, nil, logs.logger())
	now := e.clock.Now().Unix()
	captured := e.plainQuery(cbToken, "captured")
	if a := e.callback(captured, followEvent("oA", "unsubscribe", now)); a.status != 200 || string(a.body) != "success" {
		t.Fatalf("first use: %d %s", a.status, a.body)
	}
	e.applied(0)
	if e.following("2020000001") {
		t.Fatal("unsubscribe not applied")
	}
	// The same signed query with another body, at this front end and at another at once: left
	// unanswered (plain mode cannot tell it from another push of the platform's whose pair met
	// this one's), changes nothing.
	other := e.replica()
	var atOther atomic.Int64
	replayed := make(chan struct{})
	go func() {
		defer close(replayed)
		atOther.Store(int64(pushOnce(other+callbackPath+"?"+captured, followEvent("oA", "subscribe", now+1))))
	}()
	if st := pushOnce(e.url+callbackPath+"?"+captured, followEvent("oA", "subscribe", now+1)); st != 0 {
		t.Errorf("replay with another body answered %d; want none", st)
	}
	<-replayed
	if st := atOther.Load(); st != 0 {
		t.Fatalf("replay at another replica answered %d; want none", st)
	}
	// The address check's signed query, taken to sign an event: refused.
	check := e.plainQuery(cbToken, "check")
	if a := e.do("GET", callbackPath+"?"+check+"&echostr=abc", "", "", ""); a.status != 200 || string(a.body) != "abc" {
		t.Fatalf("address check: %d %s", a.status, a.body)
	}
	if a := e.callback(check, followEvent("oA", "subscribe", now+2)); a.status != 409 {
		t.Fatalf("an address check's query signed an event: %d %s", a.status, a.body)
	}
	e.applied(0)
	if e.following("2020000001") {
		t.Fatal("a replayed callback changed the follower")
	}
	// A receipt whose message is not recorded as sent yet is answered success at once, and
	// applied once its sent record is there (written late, and not announced: found by the one
	// read of the store at the end of its wait); its query is used up.
	repeat := e.plainQuery(cbToken, "repeat")
	body := receiptEvent("oA", 777, simulator.StatusSuccess)
	if a := e.callback(repeat, body); a.status != 200 || string(a.body) != "success" {
		t.Fatalf("receipt before its sent record: %d %s", a.status, a.body)
	}
	e.applied(1)
	// The same query with the same body, seconds later, is the platform's repeat of the push:
	// taken again, and kept once.
	if a := e.callback(repeat, body); a.status != 200 || string(a.body) != "success" {
		t.Fatalf("the platform's repeat of a kept event: %d %s", a.status, a.body)
	}
	e.applied(1)
	const id = "01KBBBBBBBBBBBBBBBBBBBBBBB"
	e.markSent(id, 777, "oA")
	e.clock.Advance(notification.DefaultReceiptWait + time.Second)
	e.applied(0)
	if d := e.result(e.token("pusher", pushSecret), id); d["state"] != "delivered" {
		t.Fatalf("after the repeat: %v", d)
	}
	if v := e.metricValue(`ucs_security_events_total{event="callback_replayed"}`); v != 2 {
		t.Fatalf("callback_replayed counted %v, want 2", v)
	}
	recs := logs.events(t, "callback_replayed")
	if len(recs) != 2 || recs[0]["level"] != "WARN" || recs[0]["addr"] != "127.0.0.1" {
		t.Fatalf("replays logged: %v", recs)
	}
}

// pushOnce posts an event push once, waiting for its answer a little longer than the platform
// does: its status, or 0 when it was left unanswered (the connection closed, or no answer in
// time).
func pushOnce(u, body string) int {
	client := &http.Client{Timeout: platformWait + 2*time.Second}
	resp, err := client.Post(u, "text/xml", strings.NewReader(body))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	return resp.StatusCode
}

// platformWait is how long the platform waits for an event push's answer.
const platformWait = 5 * time.Second

// TestForgedReceiptsIgnored: a receipt for a msgid this service has not sent stores nothing a
// later message with that msgid could pick up, and a receipt naming another follower than the
// message went to changes nothing; the real receipts then apply.
func TestForgedReceiptsIgnored(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tok := e.token("pusher", pushSecret)
	const sentID, laterID = "01KCCCCCCCCCCCCCCCCCCCCCCC", "01KDDDDDDDDDDDDDDDDDDDDDDD"
	e.markSent(sentID, 555, "oA")
	n := 0
	post := func(body string) answer {
		n++
		return e.callback(e.plainQuery(cbToken, "f"+strconv.Itoa(n)), body)
	}
	// Planted in advance for a msgid the platform will hand out later: answered, held for the
	// msgid, and stored nowhere a lookup reads.
	if a := post(receiptEvent("oA", 556, simulator.StatusUserBlock)); a.status != 200 {
		t.Fatalf("receipt of an unsent msgid: %d %s", a.status, a.body)
	}
	if _, _, err := e.api.Store.SentByMsgID(ctx, 556); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unsent msgid was recorded: %v", err)
	}
	// For the right msgid, naming another follower.
	if a := post(receiptEvent("oEvil", 555, simulator.StatusUserBlock)); a.status != 200 {
		t.Fatalf("receipt of another follower: %d %s", a.status, a.body)
	}
	e.applied(1)
	if d := e.result(tok, sentID); d["state"] != "sent" {
		t.Fatalf("a receipt of another follower changed the result: %v", d)
	}
	// The real receipts.
	if a := post(receiptEvent("oA", 555, simulator.StatusSuccess)); a.status != 200 {
		t.Fatalf("real receipt: %d %s", a.status, a.body)
	}
	e.applied(1)
	if d := e.result(tok, sentID); d["state"] != "delivered" {
		t.Fatalf("after the real receipt: %v", d)
	}
	// The platform hands msgid 556 out later, for a first attempt: the planted receipt, whose
	// wait ends now, came before that send and is not its receipt.
	e.clock.Advance(time.Minute)
	e.markSent(laterID, 556, "oA")
	e.clock.Advance(notification.DefaultReceiptWait - time.Minute + time.Second)
	e.applied(0)
	if d := e.result(tok, laterID); d["state"] != "sent" {
		t.Fatalf("the later message picked up a planted receipt: %v", d)
	}
	if a := post(receiptEvent("oA", 556, simulator.StatusSuccess)); a.status != 200 {
		t.Fatalf("real receipt of the later message: %d %s", a.status, a.body)
	}
	e.applied(0)
	if d := e.result(tok, laterID); d["state"] != "delivered" || d["reason"] != nil {
		t.Fatalf("the later message picked up a planted receipt: %v", d)
	}
}

// TestReceiptBeforeItsSentRecord: a receipt that comes before a worker announces its message
// sent is answered success, held, and applied as soon as the worker does, 20 s later:
//   - the platform took an attempt whose answer the worker never got (a time-out), and the
//     worker's next attempt learns the msgid (the platform answers a repeated client_msg_id
//     with the first msgid);
//   - the platform's answer to the message's only send reached the worker late, or the
//     worker's clock is ahead of the front end's.
//
// One for a message first sent long after the receipt came is not (TestForgedReceiptsIgnored).
func TestReceiptBeforeItsSentRecord(t *testing.T) {
	for _, c := range []struct {
		name, id, status, state string
		msgID                   int64
		attempt                 int
	}{
		{"a retried send", "01KEEEEEEEEEEEEEEEEEEEEEEE", simulator.StatusUserBlock, "failed", 777, 2},
		{"the only send's late answer", "01KEEEEEEEEEEEEEEEEEEEEEEF", simulator.StatusSuccess, "delivered", 778, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			tok := e.token("pusher", pushSecret)
			if a := e.callback(e.plainQuery(cbToken, "t1"), receiptEvent("oA", c.msgID, c.status)); a.status != 200 {
				t.Fatalf("receipt ahead of its message: %d %s", a.status, a.body)
			}
			e.applied(1)
			e.clock.Advance(20 * time.Second) // well within the receipt's wait
			e.announceSent(c.id, c.msgID, "oA", c.attempt)
			embeddedtest.Eventually(t, 20*time.Second, "the held receipt is applied", func() bool {
				return e.result(tok, c.id)["state"] == c.state
			})
			if c.state == "failed" && e.result(tok, c.id)["reason"] != c.status {
				t.Fatalf("reason %v, want %s", e.result(tok, c.id)["reason"], c.status)
			}
			e.applied(0)
		})
	}
}

// announceSent announces ucsID as sent on the given attempt, as a worker does before it
// writes the sent record.
func (e *env) announceSent(ucsID string, msgID int64, openID string, attempt int) {
	e.t.Helper()
	nc, err := nats.Connect(e.nats.URL())
	if err != nil {
		e.t.Fatal(err)
	}
	defer nc.Close()
	now := e.clock.Now()
	r := push.Result{UcsID: ucsID, ClientID: "pusher", State: push.StateSent, Attempts: attempt, MsgID: msgID, Accepted: now, Updated: now, Sent: now}
	announce.NewFinals(nc).AnnounceSent(r, openID)
	if err := nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
}

// TestFollowEventsInCreateTimeOrder: an older subscribe or unsubscribe that arrives after a
// newer one changes nothing; an event without a time, or from beyond the window, is refused.
func TestFollowEventsInCreateTimeOrder(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now().Unix()
	n := 0
	post := func(event string, created int64) int {
		n++
		return e.callback(e.plainQuery(cbToken, "o"+strconv.Itoa(n)), followEvent("oA", event, created)).status
	}
	steps := []struct {
		event   string
		created int64
		want    bool
	}{
		{"unsubscribe", now - 10, false},
		{"subscribe", now - 60, false}, // older, late: ignored
		{"subscribe", now, true},
		{"unsubscribe", now - 5, true}, // older, late: ignored
		{"unsubscribe", now + 1, false},
	}
	for i, s := range steps {
		if st := post(s.event, s.created); st != 200 {
			t.Fatalf("step %d: %d", i, st)
		}
		e.applied(0)
		if got := e.following("2020000001"); got != s.want {
			t.Fatalf("step %d (%s at %+d s): following %v, want %v", i, s.event, s.created-now, got, s.want)
		}
	}
	for _, created := range []int64{0, -1, now + 3600} {
		if st := post("subscribe", created); st != 400 {
			t.Fatalf("subscribe with CreateTime %d: %d", created, st)
		}
	}
	e.applied(0)
	if e.following("2020000001") {
		t.Fatal("a refused event changed the follower")
	}
}

// TestCallbackSafeModeWithSimulator: with an EncodingAESKey the front end takes the
// simulator's encrypted pushes (follows and a delivery receipt), checks the address in safe
// mode as the platform documents, and refuses a plaintext push, a body that is not the one
// msg_signature covers, and a message encrypted for another appid.
func TestCallbackSafeModeWithSimulator(t *testing.T) {
	var logs logLines
	e := newEnvLogged(t, func(c *config.Config) {
		c.Platform.EncodingAESKey, c.Platform.AppID = aesKey, safeAppID
	}, logs.logger())
	ctx := context.Background()
	sim := simulator.New(simulator.Config{AppID: safeAppID, Secret: "simulated-secret",
		CallbackURL: e.url + callbackPath, CallbackToken: cbToken, EncodingAESKey: aesKey})
	t.Cleanup(sim.Close)
	simSrv := httptest.NewServer(sim.Handler())
	t.Cleanup(simSrv.Close)

	pushed := func(n int64) {
		t.Helper()
		embeddedtest.Eventually(t, 10*time.Second, "the simulator's event pushes answered", func() bool {
			st := sim.Stats()
			return st.CallbacksPending == 0 && st.CallbacksDelivered >= n
		})
	}
	if err := sim.Unsubscribe(ctx, "oA"); err != nil {
		t.Fatal(err)
	}
	pushed(1)
	e.applied(0)
	if e.following("2020000001") {
		t.Fatal("encrypted unsubscribe not applied")
	}
	if err := sim.Subscribe(ctx, "oA"); err != nil {
		t.Fatal(err)
	}
	pushed(2)
	e.applied(0)
	if !e.following("2020000001") {
		t.Fatal("encrypted subscribe not applied")
	}
	// A template send, and the simulator's encrypted receipt of it.
	sim.AddTemplate("T1", []string{"thing1"})
	pc, err := platform.New(platform.Config{APIBase: simSrv.URL, AppID: safeAppID, Secret: "simulated-secret"})
	if err != nil {
		t.Fatal(err)
	}
	const id = "01KEEEEEEEEEEEEEEEEEEEEEEE"
	msgID, err := pc.SendTemplate(ctx, platform.TemplateMessage{ToUser: "oA", TemplateID: "T1", ClientMsgID: id, Data: map[string]string{"thing1": "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	e.markSent(id, msgID, "oA")
	tok := e.token("pusher", pushSecret)
	embeddedtest.Eventually(t, 10*time.Second, "the encrypted receipt applied", func() bool {
		return e.result(tok, id)["state"] == "delivered"
	})
	// The simulator counts a push once it has read the answer, which may come a moment after
	// the receipt's result is visible.
	embeddedtest.Eventually(t, 10*time.Second, "the simulator counting its three pushes answered", func() bool {
		return sim.Stats().CallbacksDelivered == 3
	})
	if st := sim.Stats(); st.CallbacksFailed != 0 || st.CallbacksDelivered != 3 {
		t.Fatalf("simulator pushes: %+v", st)
	}

	// The address check is signed as in plain mode, and echostr comes back as it came.
	if a := e.do("GET", callbackPath+"?"+e.plainQuery(cbToken, "v1")+"&echostr=hello", "", "", ""); a.status != 200 || string(a.body) != "hello" {
		t.Fatalf("address check in safe mode: %d %s", a.status, a.body)
	}
	// A plaintext push, correctly signed for plain mode: nobody signed its body.
	if a := e.callback(e.plainQuery(cbToken, "p1"), followEvent("oA", "unsubscribe", e.clock.Now().Unix())); a.status != 401 {
		t.Fatalf("plaintext push in safe mode: %d %s", a.status, a.body)
	}
	// A captured encrypted push's query with another encrypted body: msg_signature refuses it.
	// (Its events are stamped after the simulator's, which would outrank them otherwise.)
	later := e.clock.Now().Unix() + 10
	q1, body1 := e.safePost(t, safeAppID, "s1", followEvent("oA", "unsubscribe", later))
	_, body2 := e.safePost(t, safeAppID, "s2", followEvent("oA", "unsubscribe", later+1))
	if a := e.callback(q1, body2); a.status != 401 {
		t.Fatalf("another body under a captured query: %d %s", a.status, a.body)
	}
	e.applied(0)
	if !e.following("2020000001") {
		t.Fatal("a refused push changed the follower")
	}
	if a := e.callback(q1, body1); a.status != 200 {
		t.Fatalf("the push itself: %d %s", a.status, a.body)
	}
	e.applied(0)
	if e.following("2020000001") {
		t.Fatal("the push itself not applied")
	}
	// Replayed whole, it is taken for the platform's repeat of it, and changes nothing.
	if a := e.callback(q1, body1); a.status != 200 {
		t.Fatalf("the push replayed whole: %d %s", a.status, a.body)
	}
	e.applied(0)
	if e.following("2020000001") {
		t.Fatal("the push replayed whole changed the follower")
	}
	// Encrypted with our key and token, for another account: refused by its appid.
	q3, body3 := e.safePost(t, "wx0ther00000000001", "s3", followEvent("oA", "subscribe", later+20))
	if a := e.callback(q3, body3); a.status != 401 {
		t.Fatalf("another appid: %d %s", a.status, a.body)
	}
	other := simulator.New(simulator.Config{AppID: "wx0ther00000000001", Secret: "simulated-secret",
		CallbackURL: e.url + callbackPath, CallbackToken: cbToken, EncodingAESKey: aesKey,
		// Its events newer than any before: accepted, they would change the follower.
		Now: func() time.Time { return e.clock.Now().Add(time.Minute) }})
	t.Cleanup(other.Close)
	if err := other.Subscribe(ctx, "oA"); err == nil {
		t.Fatal("another appid's simulator was answered success")
	}
	e.applied(0)
	if e.following("2020000001") {
		t.Fatal("a push for another appid changed the follower")
	}
	// 1 plaintext + 1 other body + 1 other appid + 1 push of the other simulator, which, as the
	// platform, does not push again what was answered.
	if v := e.metricValue(`ucs_security_events_total{event="callback_signature_invalid"}`); v != 4 {
		t.Fatalf("callback_signature_invalid counted %v, want 4", v)
	}
	var reasons []string
	for _, r := range logs.events(t, "callback_signature_invalid") {
		reasons = append(reasons, r["reason"].(string))
	}
	want := "not encrypted (encrypt_type is not aes)|wrong msg_signature|encrypted for another appid"
	if got := strings.Join(reasons[:3], "|"); got != want {
		t.Fatalf("reasons logged %q, want %q", got, want)
	}
	if strings.Contains(logs.String(), aesKey) {
		t.Fatal("the EncodingAESKey is in the log")
	}
}

// TestCallbackRepeatAfterALostRecord: the record of a push's (timestamp, nonce) pair was
// written, but the front end never learnt it (its write timed out) and answered 503. The
// platform's repeat of the push finds the pair taken with its own mark: it is taken again, and
// the event is kept and applied.
func TestCallbackRepeatAfterALostRecord(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	body := followEvent("oA", "unsubscribe", e.clock.Now().Unix())
	ts := strconv.FormatInt(e.clock.Now().Unix(), 10)
	nonces, err := natskv.OpenRecords(ctx, e.js, service.CallbackNoncesBucket, platform.NoncesTTL, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nonces.Create(ctx, platform.NonceKey(ts, "lost"), platform.NonceMark([]byte(body))); err != nil {
		t.Fatal(err)
	}
	if a := e.callback(e.plainQuery(cbToken, "lost"), body); a.status != 200 || string(a.body) != "success" {
		t.Fatalf("the platform's repeat: %d %s", a.status, a.body)
	}
	e.applied(0)
	if e.following("2020000001") {
		t.Fatal("the repeated unsubscribe was not applied")
	}
}

// TestReceiptHeldThroughTheDuplicateWindow: the platform takes a send whose answer the worker
// never gets, and pushes its receipt at once; the worker's retry learns the msgid as late as
// the platform's duplicate window allows. The receipt waits that long, and is then applied,
// while a receipt of a message this service never sent (another system on the account) is
// still dropped once its wait is over.
func TestReceiptHeldThroughTheDuplicateWindow(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	const id, msgID, foreign = "01KEEEEEEEEEEEEEEEEEEEEEEG", 779, 990
	if a := e.callback(e.plainQuery(cbToken, "t1"), receiptEvent("oA", foreign, simulator.StatusSuccess)); a.status != 200 {
		t.Fatalf("foreign receipt: %d %s", a.status, a.body)
	}
	e.applied(1) // held: its wait counts from now
	e.clock.Advance(2 * time.Minute)
	if a := e.callback(e.plainQuery(cbToken, "t2"), receiptEvent("oA", msgID, simulator.StatusSuccess)); a.status != 200 {
		t.Fatalf("receipt ahead of its message: %d %s", a.status, a.body)
	}
	e.applied(2)
	// The foreign receipt's wait ends; the other has waited as long as a retry may take to
	// come within the duplicate window.
	e.clock.Advance(platform.DuplicateWindow)
	embeddedtest.Eventually(t, 10*time.Second, "the foreign receipt dropped, the other held", func() bool {
		return e.api.Notify.ReceiptsWaiting() == 1
	})
	e.announceSent(id, msgID, "oA", 3)
	embeddedtest.Eventually(t, 20*time.Second, "the held receipt is applied", func() bool {
		return e.result(tok, id)["state"] == "delivered"
	})
}

// TestRepeatedCallbackKeptOnce: the platform pushes a callback again when it got
// no answer in time (5 s), with the same timestamp, nonce and body; the front end takes such a
// repeat as the same push (takeNonce). A delivery receipt for a msgid this service never sent
// is one receipt, dropped after the wait: ucs_callback_receipts_unknown_total ("receipts for a
// msgid no message of this service has", deployments/README.md) must count it once, not once
// per copy the platform pushed.
func TestRepeatedCallbackKeptOnce(t *testing.T) {
	e := newEnv(t)
	q := e.plainQuery(cbToken, "repeat-1")
	body := receiptEvent("oForeign", 77001, simulator.StatusSuccess)
	for i := range 2 { // the push, and the platform's repeat of it
		if a := e.callback(q, body); a.status != 200 || string(a.body) != "success" {
			t.Fatalf("copy %d of the receipt: %d %s", i+1, a.status, a.body)
		}
	}
	st, err := e.js.Stream(context.Background(), queue.PlatformEventStream(e.cfg.NATS.Stream))
	if err != nil {
		t.Fatal(err)
	}
	if si, err := st.Info(context.Background()); err != nil || si.State.LastSeq != 1 {
		t.Fatalf("the stream of platform events stored %+v (%v) for one push the platform repeated, want it once", si.State, err)
	}
	e.clock.Advance(notification.DefaultReceiptWait + time.Second)
	e.applied(0)
	if v := e.metricValue("ucs_callback_receipts_unknown_total"); v != 1 {
		t.Fatalf("one receipt of an unknown msgid, pushed twice by the platform (its repeat, same timestamp, nonce and body): "+
			"ucs_callback_receipts_unknown_total = %v, want 1", v)
	}
}

// TestRepeatUnderANewNonceKeptOnce: the platform pushes an event again when it got no answer
// within 5 s, each attempt under its own timestamp and nonce (as the simulator does; the
// platform's documentation tells receivers to recognise an event's repeat by FromUserName +
// CreateTime, not by the query). The stream of
// platform events must keep the event once, and a receipt for a msgid this service never sent
// must be counted once in ucs_callback_receipts_unknown_total.
func TestRepeatUnderANewNonceKeptOnce(t *testing.T) {
	e := newEnv(t)
	body := receiptEvent("oForeign", 77002, simulator.StatusSuccess)
	// The push, and the platform's repeat of it 5 s later under a new timestamp and nonce.
	first := e.plainQuery(cbToken, "4101000001")
	e.clock.Advance(5 * time.Second)
	repeat := e.plainQuery(cbToken, "4101000002")
	for i, q := range []string{first, repeat} {
		if a := e.callback(q, body); a.status != 200 || string(a.body) != "success" {
			t.Fatalf("copy %d of the receipt: %d %s", i+1, a.status, a.body)
		}
	}
	st, err := e.js.Stream(context.Background(), queue.PlatformEventStream(e.cfg.NATS.Stream))
	if err != nil {
		t.Fatal(err)
	}
	si, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(notification.DefaultReceiptWait + time.Second)
	e.applied(0)
	v := e.metricValue("ucs_callback_receipts_unknown_total")
	if si.State.LastSeq != 1 || v != 1 {
		t.Fatalf("one receipt the platform pushed twice (its repeat under a new timestamp and nonce): "+
			"the stream stored %d events, ucs_callback_receipts_unknown_total = %v; want 1 and 1", si.State.LastSeq, v)
	}
}

// TestSafeModeReceiptsSharingAPairAreBothApplied: in safe mode msg_signature covers the body,
// so two pushes of different bodies under one (timestamp, nonce) are both the platform's (its
// nonces are about ten digits: at hundreds of receipts a second, two of one second meet). Both
// are taken and applied; the platform takes any answer as final, and a 409 would lose one.
func TestSafeModeReceiptsSharingAPairAreBothApplied(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) {
		c.Platform.EncodingAESKey, c.Platform.AppID = aesKey, safeAppID
	})
	const id1, id2 = "01KEEEEEEEEEEEEEEEEEEEEEE1", "01KEEEEEEEEEEEEEEEEEEEEEE2"
	e.markSent(id1, 88001, "oA")
	e.markSent(id2, 88002, "oA")
	const nonce = "1320562132"
	for i, ev := range []string{receiptEvent("oA", 88001, simulator.StatusSuccess), receiptEvent("oA", 88002, simulator.StatusSuccess)} {
		q, body := e.safePost(t, safeAppID, nonce, ev)
		if a := e.callback(q, body); a.status != 200 || string(a.body) != "success" {
			t.Errorf("receipt %d, its own body under the other's timestamp and nonce: %d %s", i+1, a.status, a.body)
		}
		if a := e.callback(q, body); a.status != 200 || string(a.body) != "success" {
			t.Errorf("receipt %d pushed again as it was: %d %s", i+1, a.status, a.body)
		}
	}
	tok := e.token("pusher", pushSecret)
	for _, id := range []string{id1, id2} {
		embeddedtest.Eventually(t, 10*time.Second, "the receipt of "+id+" applied", func() bool {
			return e.result(tok, id)["state"] == "delivered"
		})
	}
}

// TestPlainModeReceiptsSharingAPairAreBothApplied: in plain mode the signature covers the query
// only, so a second push under a (timestamp, nonce) another push took may be a replay or the
// platform's (its nonces are about ten digits: at hundreds of receipts a second, two of one
// second meet). It is left unanswered, not refused: the platform takes any answer as final,
// and pushes an unanswered one again, under a pair of its own, when it is taken.
func TestPlainModeReceiptsSharingAPairAreBothApplied(t *testing.T) {
	e := newEnv(t)
	const id1, id2 = "01KRRRRRRRRRRRRRRRRRRRRRR1", "01KRRRRRRRRRRRRRRRRRRRRRR2"
	e.markSent(id1, 99001, "oA")
	e.markSent(id2, 99002, "oA")
	shared := e.url + callbackPath + "?" + e.plainQuery(cbToken, "1320562132")
	first, second := receiptEvent("oA", 99001, simulator.StatusSuccess), receiptEvent("oA", 99002, simulator.StatusSuccess)
	if st := platformPush(t, shared, first); !slices.Equal(st, []int{200}) {
		t.Fatalf("the first receipt was answered %v", st)
	}
	if st := pushOnce(shared, second); st != 0 {
		t.Fatalf("the second receipt under the first's timestamp and nonce was answered %d, which the platform takes as final; want none", st)
	}
	// The platform's repeat, under a pair of its own.
	if a := e.callback(e.plainQuery(cbToken, "4093116672"), second); a.status != 200 || string(a.body) != "success" {
		t.Fatalf("the platform's repeat of the second receipt: %d %s", a.status, a.body)
	}
	tok := e.token("pusher", pushSecret)
	for _, id := range []string{id1, id2} {
		embeddedtest.Eventually(t, 10*time.Second, "the receipt of "+id+" applied", func() bool {
			return e.result(tok, id)["state"] == "delivered"
		})
	}
}

// nonceRecords is how many (timestamp, nonce) records the front ends keep.
func (e *env) nonceRecords() uint64 {
	e.t.Helper()
	return e.streamMsgsOf("KV_" + service.CallbackNoncesBucket)
}

// TestSafeModeReplayWithReshapedEnvelope: in safe mode msg_signature covers the Encrypt value,
// not the XML around it. A captured push posted again within the window with its envelope
// reshaped (spaces, another element) is the same push: taken as the platform's repeat, with
// no new record of its pair, however often it comes.
func TestSafeModeReplayWithReshapedEnvelope(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) {
		c.Platform.EncodingAESKey, c.Platform.AppID = aesKey, safeAppID
	})
	q, body := e.safePost(t, safeAppID, "captured", followEvent("oA", "subscribe", e.clock.Now().Unix()))
	if a := e.callback(q, body); a.status != 200 || string(a.body) != "success" {
		t.Fatalf("the push itself: %d %s", a.status, a.body)
	}
	before := e.nonceRecords()
	for i := range 20 {
		reshaped := strings.Replace(body, "<xml>", "<xml>"+strings.Repeat(" ", i+1), 1)
		if i%2 == 1 {
			reshaped = strings.Replace(body, "</xml>", "<Pad"+strconv.Itoa(i)+"/></xml>", 1)
		}
		e.callback(q, reshaped)
	}
	if grown := e.nonceRecords() - before; grown != 0 {
		t.Fatalf("one captured push posted again 20 times with its envelope reshaped: %d new records of its pair, want none", grown)
	}
}

// TestAddressCheckEchoesOnlyThePlatformsString: a query whose signature verifies (in safe mode
// a used push's carries the plain signature too) cannot make the service's origin echo markup:
// an echostr of other characters than the platform's is refused, changing nothing, and the echo
// is never sniffed as a page. The platform's repeat of the push is still taken.
func TestAddressCheckEchoesOnlyThePlatformsString(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) {
		c.Platform.EncodingAESKey, c.Platform.AppID = aesKey, safeAppID
	})
	q, body := e.safePost(t, safeAppID, "captured2", followEvent("oA", "subscribe", e.clock.Now().Unix()))
	if a := e.callback(q, body); a.status != 200 {
		t.Fatalf("the push itself: %d %s", a.status, a.body)
	}
	before := e.nonceRecords()
	a := e.do("GET", callbackPath+"?"+q+"&echostr="+url.QueryEscape("<html><script>alert(1)</script></html>"), "", "", "")
	if a.status != http.StatusBadRequest || strings.Contains(string(a.body), "<script>") || e.nonceRecords() != before {
		t.Fatalf("an address check echoing markup: %d %q, %d records of pairs more; want 400, nothing echoed or recorded", a.status, a.body, e.nonceRecords()-before)
	}
	a = e.do("GET", callbackPath+"?"+q+"&echostr=5838479218127813673", "", "", "")
	if a.status != http.StatusOK || string(a.body) != "5838479218127813673" || a.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("an address check with the platform's string: %d %q %v", a.status, a.body, a.header)
	}
	if a := e.callback(q, body); a.status != 200 || string(a.body) != "success" {
		t.Fatalf("the platform's repeat of the push: %d %s", a.status, a.body)
	}
}
