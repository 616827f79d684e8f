package notification

import (
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/push"
)

// The caches keep results in a compact form; what a lookup reads back must be what was kept,
// to the nanosecond, and a time never set must stay unset.
func TestCompactResultRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 23, 8, 30, 15, 123456789, time.FixedZone("CST", 8*3600))
	full := push.Result{
		UcsID: "01JD0000000000000000000000", ClientID: "jwxt", State: push.StateFailed, Type: "JDS", UserID: "20230001",
		Attempts: 3, LastError: "platform: -1 system busy", Reason: "failed:user block", MsgID: 1234567890123,
		Accepted: at, Updated: at.Add(time.Second), Sent: at.Add(2 * time.Second),
		Finished: at.Add(3 * time.Second), RetryAt: at.Add(4 * time.Second),
	}
	sparse := push.Result{UcsID: "01JD0000000000000000000001", ClientID: "jwxt", State: push.StateDelivered, Accepted: at}

	for _, want := range []push.Result{full, sparse} {
		rc, err := newResultCache(10)
		if err != nil {
			t.Fatal(err)
		}
		rc.Add(want.UcsID, want, true)
		got, ok := rc.Get(want.UcsID)
		if !ok {
			t.Fatalf("%s: not kept", want.UcsID)
		}
		same(t, got, want)

		sc, err := newSentCache(10)
		if err != nil {
			t.Fatal(err)
		}
		want.MsgID = 42
		sc.Add(want, "oFollower")
		got, openID, ok := sc.Get(42)
		if !ok || openID != "oFollower" {
			t.Fatalf("sent %d: kept %v, openid %q", want.MsgID, ok, openID)
		}
		same(t, got, want)
		sc.Remove(42)
		if sc.Seen(42) {
			t.Fatal("a removed msgid is still kept")
		}
	}
}

// A kept result is counted once, at the first announcement of it: never for a lookup's read
// of the store (which may be of a push that ended before this front end started), and the
// first final result stays whichever came first.
func TestResultCacheCountsAtTheFirstAnnouncement(t *testing.T) {
	delivered := push.Result{UcsID: "01JD0000000000000000000002", ClientID: "jwxt", State: push.StateDelivered, MsgID: 7}
	failed := delivered
	failed.State, failed.Reason = push.StateFailed, "failed:user block"
	type add struct {
		r         push.Result
		announced bool
		count     bool
		kept      push.State
	}
	for _, tc := range []struct {
		name string
		adds []add
	}{
		{"announced, then repeated", []add{
			{delivered, true, true, push.StateDelivered}, {delivered, true, false, push.StateDelivered},
			{failed, true, false, push.StateDelivered}, {delivered, false, false, push.StateDelivered}}},
		{"read by a lookup, then announced", []add{
			{delivered, false, false, push.StateDelivered}, {delivered, false, false, push.StateDelivered},
			{failed, true, true, push.StateDelivered}, {failed, true, false, push.StateDelivered}}},
		{"read by lookups only", []add{
			{failed, false, false, push.StateFailed}, {delivered, false, false, push.StateFailed}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := newResultCache(10)
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range tc.adds {
				kept, count := rc.Add(a.r.UcsID, a.r, a.announced)
				if count != a.count || kept.State != a.kept {
					t.Fatalf("add %d (%s, announced %v): kept %s, count %v; want %s, %v", i, a.r.State, a.announced,
						kept.State, count, a.kept, a.count)
				}
			}
		})
	}
}

func same(t *testing.T, got, want push.Result) {
	t.Helper()
	for _, tt := range []struct {
		name      string
		got, want time.Time
	}{
		{"accepted", got.Accepted, want.Accepted}, {"updated", got.Updated, want.Updated},
		{"sent", got.Sent, want.Sent}, {"finished", got.Finished, want.Finished}, {"retry", got.RetryAt, want.RetryAt},
	} {
		if !tt.got.Equal(tt.want) || tt.got.IsZero() != tt.want.IsZero() {
			t.Errorf("%s time: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	got.Accepted, got.Updated, got.Sent, got.Finished, got.RetryAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
	want.Accepted, want.Updated, want.Sent, want.Finished, want.RetryAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
