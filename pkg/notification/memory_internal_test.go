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
		rc.Add(want.UcsID, want)
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
