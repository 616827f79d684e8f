package server_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"

	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

// TestMigratedCopyLooksUpItsHistory: a push Migrate moves again (a run that stopped before
// deleting its legacy message, the case delivery.TestMigratedCopyOfSentPushNotSentAgain covers
// for the worker) waits on its subject behind everything the workers were handed, marked as
// moved: a lookup reads its history in the store, and a push that was sent, or delivered,
// does not go back to queued.
func TestMigratedCopyLooksUpItsHistory(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	ctx := context.Background()
	now := e.clock.Now()
	id := push.NewID(now)
	e.markSent(id, 7100, "oA")
	if d := e.result(tok, id); d["state"] != "sent" {
		t.Fatalf("lookup of the sent push: %v", d)
	}
	// The earlier layout's single: ucs.push.mp.<ucsId>, which the earlier layout's stream took.
	publishLegacy := func(m push.Message) {
		t.Helper()
		st, err := e.js.Stream(ctx, e.cfg.NATS.Stream)
		if err != nil {
			t.Fatal(err)
		}
		sc := st.CachedInfo().Config
		sc.Subjects = append(sc.Subjects, queue.SubjectPrefix+"*")
		if _, err := e.js.UpdateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.js.Publish(ctx, queue.SubjectPrefix+m.UcsID, b); err != nil {
			t.Fatal(err)
		}
	}
	m := push.Message{UcsID: id, ClientID: "pusher", UserID: "2020000001", Type: push.TypeJML,
		Data: map[string]string{"class": "高等数学", "info": "第三章"}, Accepted: now.UnixMilli()}
	publishLegacy(m)
	n, err := queue.Migrate(ctx, e.js, service.QueueConfig(e.cfg), slog.New(slog.DiscardHandler))
	if err != nil || n != 1 {
		t.Fatalf("migrate: %d %v", n, err)
	}
	d := e.result(tok, id)
	t.Logf("lookup after the migrated copy appeared: %v", d)
	if d["state"] != "sent" {
		t.Errorf("lookup went backwards: sent, then %q with attempts %v", d["state"], d["attempts"])
	}

	// The same for a delivered push, looked up before at another front end (this one, just
	// started as it is after the migration, has nothing in memory).
	other := e.replica()
	id2 := push.NewID(now)
	e.markSent(id2, 7101, "oA")
	w := e.api.Store.NewWriter(store.WriterOptions{})
	defer w.Close()
	sent := push.Result{UcsID: id2, ClientID: "pusher", State: push.StateSent, Attempts: 1, MsgID: 7101, Accepted: now, Updated: now, Sent: now}
	if err := w.Write(ctx, store.FinalRecord(store.Receipt(sent, "success", now), now)); err != nil {
		t.Fatal(err)
	}
	if d := e.lookupAt(other, tok, id2); d["state"] != "delivered" {
		t.Fatalf("lookup of the delivered push: %v", d)
	}
	m.UcsID = id2
	publishLegacy(m)
	if n, err := queue.Migrate(ctx, e.js, service.QueueConfig(e.cfg), slog.New(slog.DiscardHandler)); err != nil || n != 1 {
		t.Fatalf("migrate: %d %v", n, err)
	}
	d = e.result(tok, id2)
	t.Logf("lookup of the delivered push after the migrated copy appeared: %v", d)
	if d["state"] != "delivered" {
		t.Errorf("lookup went backwards: delivered, then %q with attempts %v", d["state"], d["attempts"])
	}
}

// lookupAt is a lookup of id through the front end at base.
func (e *env) lookupAt(base, tok, id string) map[string]any {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/infra/notification/mp/"+id, nil)
	req.Header.Set("Authorization", tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct{ Data map[string]any }
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		e.t.Fatal(err)
	}
	return m.Data
}
