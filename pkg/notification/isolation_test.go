package notification_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/push"
)

// TestOtherClientsIDCostsAsUnknown: another client's ucsId reads as unknown, and costs what an
// unknown one does: a final result in memory answers its own client only, so another client's
// lookup goes to the queue and the store as for a ucsId never given out. With the store down,
// both are answered alike (results unavailable), where an answer from memory would have told
// the other client the push exists. A ucsId is a ULID, read in either case.
func TestOtherClientsIDCostsAsUnknown(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	now := time.Now()
	id := push.NewID(now)
	r.svc.Remember(push.Result{UcsID: id, ClientID: "a", State: push.StateDelivered, Attempts: 1, MsgID: 7,
		Accepted: now, Updated: now, Sent: now, Finished: now})
	for _, asked := range []string{id, strings.ToLower(id)} {
		if got, err := r.svc.Result(ctx, "a", asked); err != nil || got.State != push.StateDelivered {
			t.Fatalf("own push asked as %s: %+v %v", asked, got, err)
		}
		if got, err := r.svc.Results(ctx, "a", []string{asked}); err != nil || !got[0].Found {
			t.Fatalf("own push asked as %s in a batch: %+v %v", asked, got, err)
		}
	}
	if err := r.store.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_, errOther := r.svc.Result(ctx, "b", id)
	_, errUnknown := r.svc.Result(ctx, "b", push.NewID(now))
	if !errors.Is(errOther, notification.ErrResultsUnavailable) || !errors.Is(errUnknown, notification.ErrResultsUnavailable) {
		t.Fatalf("with the store down: another client's ucsId %v, an unknown one %v; want both results unavailable", errOther, errUnknown)
	}
	_, errOther = r.svc.Results(ctx, "b", []string{id})
	if !errors.Is(errOther, notification.ErrResultsUnavailable) {
		t.Fatalf("with the store down, another client's ucsId in a batch: %v; want results unavailable", errOther)
	}
}
