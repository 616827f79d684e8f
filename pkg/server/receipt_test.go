package server_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/campus-it/ucs/pkg/queue"
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
		sent := store.Result{UcsID: id, ClientID: "pusher", State: store.StateSent, Attempts: 1, MsgID: msgID, Accepted: now, Updated: now, Sent: now}
		queue.NewFinals(nc).AnnounceSent(sent, openID)
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	nonce := 0
	post := func(openID string, msgID int64) answer {
		nonce++
		n := "r" + strconv.Itoa(nonce)
		body := `<xml><ToUserName><![CDATA[gh_1]]></ToUserName><FromUserName><![CDATA[` + openID + `]]></FromUserName><CreateTime>1</CreateTime>` +
			`<MsgType><![CDATA[event]]></MsgType><Event><![CDATA[TEMPLATESENDJOBFINISH]]></Event><MsgID>` + strconv.FormatInt(msgID, 10) +
			`</MsgID><Status><![CDATA[success]]></Status></xml>`
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
	// The final result is written by the front end's group commit; poll for it.
	var final store.Result
	deadline := time.Now().Add(10 * time.Second)
	for {
		final, err = e.api.Store.Final(ctx, id)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	if err != nil || final.State != store.StateDelivered || final.MsgID != 777 {
		t.Fatalf("final result after %s: %+v, %v", time.Since(start), final, err)
	}

	// An announced message's receipt naming another follower changes nothing.
	announce(other, 778, "oB")
	if a := post("oEvil", 778); a.status != 200 {
		t.Fatalf("receipt of another follower: %d %s", a.status, a.body)
	}
	e.applied(0)
	if r, err := e.api.Store.Final(ctx, other); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a receipt of another follower was applied: %+v %v", r, err)
	}
}
