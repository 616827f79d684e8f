package delivery_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
)

// TestMigratedCopyOfSentPushNotSentAgain: a push sent already (its sent record in the
// store) whose legacy message Migrate moves again (a run that stopped before deleting it) is
// not sent a second time: no further platform call, attempts unchanged.
func TestMigratedCopyOfSentPushNotSentAgain(t *testing.T) {
	r := newRig(t)
	r.startWorker(quick)
	id := r.publish("u-follows", push.TypeTDL, tdl)
	first := r.waitState(id, push.StateSent)
	st, err := r.js.Stream(context.Background(), r.qcfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	empty := func() bool {
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	}
	embeddedtest.Eventually(t, 10*time.Second, "the push is acknowledged", empty)
	m := push.Message{UcsID: id, ClientID: "c1", UserID: "u-follows", Type: push.TypeTDL, Data: tdl, Accepted: first.Accepted.UnixMilli()}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	out := &nats.Msg{Subject: queue.Subject("c1", id), Data: b, Header: nats.Header{queue.HeaderMigrated: {"1"}}}
	if _, err := r.js.PublishMsg(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	calls := r.sim.Stats().Sends
	embeddedtest.Eventually(t, 10*time.Second, "the migrated copy is acknowledged", empty)
	if n := r.sim.Stats().Sends; n != calls {
		t.Fatalf("the migrated copy of a sent push called the platform again: %d sends, then %d", calls, n)
	}
	got, err := r.st.Current(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Attempts != first.Attempts || got.MsgID != first.MsgID {
		t.Fatalf("the migrated copy of a sent push was sent again: attempts %d → %d, msgId %d → %d", first.Attempts, got.Attempts, first.MsgID, got.MsgID)
	}
}
