package oauth_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/store"
)

// TestIdleEndedSessionsLeaveTheLimit: a student keeps one session in use (an application
// refreshes its tokens, which moves the session's idle end on) and signs in on lab computers
// left alone, whose sessions end after refresh_token_ttl (SSO Session Idle). Ended, they count
// no more among the user's MaxSessionsPerUser live sessions: the 101st sign-in ends none, and
// the session in use goes on.
func TestIdleEndedSessionsLeaveTheLimit(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC))
	st := embeddedtest.Store(t, clk.Now)
	ctx := context.Background()
	const idle = 30 * time.Minute
	svc := &oauth.Service{Store: st, RefreshTTL: idle, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	const user = "2020000001"
	newSession := func(key string) store.Session {
		now := clk.Now()
		se := store.Session{Key: key, SID: "sid-" + key, UserID: user, IDP: "local", AuthTime: now,
			Expires: now.Add(720 * time.Hour), At: now}
		se.Idle = svc.IdleEnd(se)
		return se
	}
	phone := newSession("phone")
	if err := svc.StartSession(ctx, phone); err != nil {
		t.Fatal(err)
	}
	for i := range oauth.MaxSessionsPerUser {
		clk.Advance(10 * time.Minute)
		// The phone's application refreshes: a use of its session.
		live, err := st.Session(ctx, phone.Key)
		if err != nil {
			t.Fatalf("after %d lab sign-ins the phone's session, used every 10 minutes, ended: %v", i, err)
		}
		svc.Touch(ctx, live)
		if err := svc.StartSession(ctx, newSession(fmt.Sprint("lab-", i))); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(10 * time.Minute)
	list, err := st.UserSessions(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("live sessions of the user (account page): %d", len(list))
	if _, err := st.Session(ctx, phone.Key); err != nil {
		t.Fatalf("the phone's session, used every 10 minutes, was ended by sign-in number %d, while only %d other sessions of the user are live (the rest ended idle): %v",
			oauth.MaxSessionsPerUser+1, len(list), err)
	}
}
