package server_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/push"
)

// TestRepeatedLookupsOfAFinalResult looks a delivered push up again and again, singly and in
// batches: every answer is the first one, and the push stays invisible to another client
// however often its owner looked it up (the answers come from the front end's memory).
func TestRepeatedLookupsOfAFinalResult(t *testing.T) {
	e := newEnv(t)
	tok, other := e.token("pusher", pushSecret), e.token("other", pushSecret)
	at := e.clock.Now().UTC().Truncate(time.Millisecond)
	id := push.NewID(at)
	e.api.Notify.Remember(push.Result{
		UcsID: id, ClientID: "pusher", State: push.StateDelivered, Type: "TDL", UserID: "2020000001",
		Attempts: 1, MsgID: 4242, Accepted: at, Updated: at.Add(3 * time.Second),
		Sent: at.Add(time.Second), Finished: at.Add(3 * time.Second),
	})
	data := func(a answer) map[string]any {
		t.Helper()
		d, _ := a.json(t)["data"].(map[string]any)
		return d
	}
	foreign := func() {
		t.Helper()
		if a := e.do("GET", "/v1/infra/notification/mp/"+id, "", other, ""); a.status != 404 {
			t.Fatalf("another client's lookup: %d %s", a.status, a.body)
		}
		b, _ := json.Marshal(map[string]any{"ucsIds": []string{id}})
		a := e.doWith("POST", "/v1/infra/notification/mp/results", other, string(b), nil)
		rs, _ := data(a)["results"].([]any)
		if a.status != 200 || len(rs) != 1 || !reflect.DeepEqual(rs[0], map[string]any{"ucsId": id, "state": "not_found"}) {
			t.Fatalf("another client's batch lookup: %d %s", a.status, a.body)
		}
	}
	foreign()
	first := data(e.do("GET", "/v1/infra/notification/mp/"+id, "", tok, ""))
	if first["state"] != "delivered" || first["ucsId"] != id || first["msgId"] != "4242" || first["attempts"] != 1.0 || first["finishedAt"] == nil {
		t.Fatalf("first lookup: %v", first)
	}
	for range 3 {
		if again := data(e.do("GET", "/v1/infra/notification/mp/"+id, "", tok, "")); !reflect.DeepEqual(again, first) {
			t.Fatalf("lookup again: %v, first %v", again, first)
		}
		b, _ := json.Marshal(map[string]any{"ucsIds": []string{id, id}})
		rs, _ := data(e.doWith("POST", "/v1/infra/notification/mp/results", tok, string(b), nil))["results"].([]any)
		if len(rs) != 2 || !reflect.DeepEqual(rs[0], first) || !reflect.DeepEqual(rs[1], first) {
			t.Fatalf("batch lookup: %v, first %v", rs, first)
		}
		foreign()
	}
}
