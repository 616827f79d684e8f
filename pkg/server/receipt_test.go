package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/campus-it/ucs/pkg/announce"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

// A worker announces each message the platform accepted; the front end applies its receipt
// from that announcement, without the sent record in the store, and still only for the
// follower the message went to.
func TestReceiptFromAnnouncement(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	nc, err := nats.Connect(e.nats.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	now := e.clock.Now()
	announce := func(id string, msgID int64, openID string) {
		sent := push.Result{UcsID: id, ClientID: "pusher", State: push.StateSent, Attempts: 1, MsgID: msgID, Accepted: now, Updated: now, Sent: now}
		announce.NewFinals(nc).AnnounceSent(sent, openID)
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	nonce := 0
	post := func(openID string, msgID int64) answer {
		nonce++
		n := "r" + strconv.Itoa(nonce)
		body := receiptEvent(openID, msgID, simulator.StatusSuccess)
		return e.do("POST", "/v1/infra/notification/mp/callback?signature="+sign(cbToken, ts, n)+"&timestamp="+ts+"&nonce="+n, "text/xml", "", body)
	}

	const id, other = "01KBBBBBBBBBBBBBBBBBBBBBBB", "01KCCCCCCCCCCCCCCCCCCCCCCC"
	announce(id, 777, "oB")
	start := time.Now()
	if a := post("oB", 777); a.status != 200 || string(a.body) != "success" {
		t.Fatalf("receipt of an announced message: %d %s", a.status, a.body)
	}
	if _, _, err := e.api.Store.SentByMsgID(ctx, 777); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the sent record is in the store (%v): the test would not show the announcement's use", err)
	}
	// The final result is written by the front end's group commit; poll for it. The worker's
	// sent record is not in the store (yet), so the final result is read from the push's
	// history.
	var final push.Result
	embeddedtest.Eventually(t, 10*time.Second, "the final result is in the store", func() bool {
		final, err = storedFinal(ctx, e.api.Store, id)
		return err == nil
	})
	if err != nil || final.State != push.StateDelivered || final.MsgID != 777 {
		t.Fatalf("final result after %s: %+v, %v", time.Since(start), final, err)
	}

	// An announced message's receipt naming another follower changes nothing.
	announce(other, 778, "oB")
	if a := post("oEvil", 778); a.status != 200 {
		t.Fatalf("receipt of another follower: %d %s", a.status, a.body)
	}
	e.applied(0)
	if r, err := storedFinal(ctx, e.api.Store, other); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a receipt of another follower was applied: %+v %v", r, err)
	}
}

// storedFinal returns the final result the store holds of id, whatever else it holds.
func storedFinal(ctx context.Context, st *store.Store, id string) (push.Result, error) {
	h, err := st.History(ctx, id)
	if err != nil {
		return push.Result{}, err
	}
	for _, r := range h {
		if r.Kind == store.RecordFinal {
			return r.Result, nil
		}
	}
	return push.Result{}, store.ErrNotFound
}

// TestUnknownReceiptsDroppedCheaply: on an account other systems send through too, a receipt
// for a msgid this service never sent is answered success at once, looked up in the store twice
// (when it comes, and once more at the end of its wait), then dropped, counted and logged at
// most once a minute.
func TestUnknownReceiptsDroppedCheaply(t *testing.T) {
	var logs logLines
	// The receipts' look-ups of their msgid.
	reads := embeddedtest.CountFinds("push_msgids")
	e := newEnvDeps(t, nil, service.Deps{Logger: logs.logger(), MongoMonitor: reads.Monitor()})
	n := 0
	post := func(msgID int64) {
		t.Helper()
		n++
		start := time.Now()
		a := e.callback(e.plainQuery(cbToken, "u"+strconv.Itoa(n)), receiptEvent("oForeign", msgID, simulator.StatusSuccess))
		if a.status != 200 || string(a.body) != "success" {
			t.Fatalf("receipt of a foreign msgid: %d %s", a.status, a.body)
		}
		// The platform waits 5 s for the answer; the answer waits for no store read.
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("receipt of a foreign msgid answered after %s", d)
		}
	}
	dropped := func() []map[string]any {
		var out []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var r map[string]any
			if json.Unmarshal([]byte(line), &r) == nil &&
				strings.HasPrefix(fmt.Sprint(r["msg"]), "delivery receipts for msgids this service did not send") {
				out = append(out, r)
			}
		}
		return out
	}
	for _, id := range []int64{9001, 9002, 9003} {
		post(id)
	}
	e.applied(3)
	if got := reads.N(); got != 3 {
		t.Fatalf("%d reads of msgids for 3 receipts as they came, want 3", got)
	}
	// While they wait, nothing reads the store for them.
	e.clock.Advance(time.Minute)
	e.applied(3)
	if got := reads.N(); got != 3 {
		t.Fatalf("%d reads of msgids while 3 receipts wait, want 3", got)
	}
	e.clock.Advance(notification.DefaultReceiptWait - time.Minute + time.Second)
	e.applied(0)
	if got := reads.N(); got != 6 {
		t.Fatalf("%d reads of msgids for 3 dropped receipts, want 6", got)
	}
	if v := e.metricValue("ucs_callback_receipts_unknown_total"); v != 3 {
		t.Fatalf("ucs_callback_receipts_unknown_total %v, want 3", v)
	}
	if recs := dropped(); len(recs) != 1 || recs[0]["receipts"] != 1.0 {
		t.Fatalf("dropped receipts logged: %v", recs)
	}
	// A minute later, the next drop is logged again.
	post(9004)
	e.applied(1)
	e.clock.Advance(notification.DefaultReceiptWait + time.Second)
	e.applied(0)
	if v := e.metricValue("ucs_callback_receipts_unknown_total"); v != 4 {
		t.Fatalf("ucs_callback_receipts_unknown_total %v, want 4", v)
	}
	// The line counts the drops since the one before.
	if recs := dropped(); len(recs) != 2 || recs[1]["receipts"] != 3.0 {
		t.Fatalf("dropped receipts logged: %v", recs)
	}
	if got := strings.Count(logs.String(), "did not send"); got != 2 {
		t.Fatalf("%d log lines about receipts of msgids not sent, want 2", got)
	}
}

// TestCallbacksAnsweredWhileStoreDown: with the store unreachable, receipts and follows are
// answered success at once (they are in the stream), and applied once the store is back.
func TestCallbacksAnsweredWhileStoreDown(t *testing.T) {
	e, proxy := newEnvStoreBehindProxy(t)
	const id = "01KFFFFFFFFFFFFFFFFFFFFFFF"
	e.markSent(id, 4242, "oA")
	tok := e.token("pusher", pushSecret)
	proxy.SetDown(true)
	for i, body := range []string{receiptEvent("oA", 4242, simulator.StatusSuccess), followEvent("oA", "unsubscribe", e.clock.Now().Unix())} {
		start := time.Now()
		if a := e.callback(e.plainQuery(cbToken, "d"+strconv.Itoa(i)), body); a.status != 200 || string(a.body) != "success" {
			t.Fatalf("event %d while the store is down: %d %s", i, a.status, a.body)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("event %d while the store is down answered after %s", i, d)
		}
	}
	proxy.SetDown(false)
	embeddedtest.Eventually(t, time.Minute, "the events applied once the store is back", func() bool {
		return e.result(tok, id)["state"] == "delivered"
	})
	e.applied(0)
	if e.following("2020000001") {
		t.Fatal("the unsubscribe taken while the store was down was not applied")
	}
}

// TestFinalIsFinal: once a push is delivered, a second, different receipt for it is answered
// success and changes nothing: not the lookup at the front end that took it, not at another
// front end (which heard of the first result), not at a front end started later (which reads
// the store). And a receipt applied where memory does not know the push is final (another
// front end recorded it, its announcement was lost) leaves the stored result, and memory
// learns that one.
func TestFinalIsFinal(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	other := e.replica()
	n := 0
	post := func(msgID int64, status string) {
		t.Helper()
		n++
		if a := e.callback(e.plainQuery(cbToken, "x"+strconv.Itoa(n)), receiptEvent("oA", msgID, status)); a.status != 200 || string(a.body) != "success" {
			t.Fatalf("receipt %d %s: %d %s", msgID, status, a.status, a.body)
		}
		e.applied(0)
	}
	lookup := func(base, id string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/infra/notification/mp/"+id, nil)
		req.Header.Set("Authorization", tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m struct{ Data map[string]any }
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m.Data
	}
	const id, id2 = "01KGGGGGGGGGGGGGGGGGGGGGGG", "01KHHHHHHHHHHHHHHHHHHHHHHH"
	e.markSent(id, 900, "oA")
	post(900, simulator.StatusSuccess)
	embeddedtest.Eventually(t, 10*time.Second, "both front ends know it delivered", func() bool {
		return lookup(e.url, id)["state"] == "delivered" && lookup(other, id)["state"] == "delivered"
	})
	post(900, simulator.StatusUserBlock)
	fresh := e.replica()
	for _, base := range []string{e.url, other, fresh} {
		if d := lookup(base, id); d["state"] != "delivered" || d["reason"] != nil {
			t.Fatalf("after a second, different receipt, %s says %v", base, d)
		}
	}
	if r, err := e.api.Store.Final(context.Background(), id); err != nil || r.State != push.StateDelivered {
		t.Fatalf("stored final result: %+v %v", r, err)
	}

	// Recorded delivered by another front end, its announcement lost: memory knows nothing.
	e.markSent(id2, 901, "oA")
	w := e.api.Store.NewWriter(store.WriterOptions{})
	defer w.Close()
	now := e.clock.Now()
	sent := push.Result{UcsID: id2, ClientID: "pusher", State: push.StateSent, Attempts: 1, MsgID: 901, Accepted: now, Updated: now, Sent: now}
	if err := w.Write(context.Background(), store.FinalRecord(store.Receipt(sent, simulator.StatusSuccess, now), now)); err != nil {
		t.Fatal(err)
	}
	post(901, simulator.StatusUserBlock)
	for _, base := range []string{e.url, other} {
		if d := lookup(base, id2); d["state"] != "delivered" {
			t.Fatalf("a receipt after a result memory did not know, %s says %v", base, d)
		}
	}
}
