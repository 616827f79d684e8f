package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/store"
)

// TestConcurrentRenewalsListTheSessionOnce: two tabs of one browser sign the same user
// in again at the same time. Both renew the browser's one session (same key, same sid): the
// user's list of sessions, which the account page shows and MaxSessionsPerUser counts, must
// still hold it once.
func TestConcurrentRenewalsListTheSessionOnce(t *testing.T) {
	clk := clocktest.New(at(0))
	st := embeddedtest.Store(t, clk.Now)
	ctx := context.Background()
	const rounds, tabs = 8, 2
	worst := 1
	for r := range rounds {
		user := fmt.Sprint("tabs-user-", r)
		key := fmt.Sprint("tabs-key-", r)
		if _, err := st.PutSession(ctx, store.Session{Key: key, SID: "sid-" + key, UserID: user, IDP: "local",
			AuthTime: clk.Now(), Expires: clk.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range tabs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				// Each tab's sign-in: a new auth_time and expiry, the same session.
				se := store.Session{Key: key, SID: "sid-" + key, UserID: user, IDP: "local",
					AuthTime: clk.Now().Add(time.Duration(i+1) * time.Millisecond),
					Expires:  clk.Now().Add(2*time.Hour + time.Duration(i+1)*time.Millisecond)}
				if err := st.RenewSession(ctx, se); err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		list, err := st.UserSessions(ctx, user)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > worst {
			worst = len(list)
		}
		if len(list) != 1 {
			t.Errorf("round %d: after %d simultaneous renewals of one session the account page lists %d sessions (sids %v)",
				r, tabs, len(list), sids(list))
		}
	}
	t.Logf("largest listing of one renewed session: %d", worst)
}

func sids(l []store.Session) []string {
	var out []string
	for _, s := range l {
		out = append(out, s.SID)
	}
	return out
}

// TestRenewalRacingEndLeavesItEnded: a renewal and an end of one session at the same time (a
// sign-in again in one tab, a sign-out or the account page's "end session" in another). The
// session stays ended, and off its user's list.
func TestRenewalRacingEndLeavesItEnded(t *testing.T) {
	clk := clocktest.New(at(0))
	st := embeddedtest.Store(t, clk.Now)
	ctx := context.Background()
	zombies, resurrected := 0, 0
	const rounds = 40
	for r := range rounds {
		user, key := fmt.Sprint("race-user-", r), fmt.Sprint("race-key-", r)
		se := store.Session{Key: key, SID: "sid-" + key, UserID: user, IDP: "local", AuthTime: clk.Now(), Expires: clk.Now().Add(time.Hour)}
		if _, err := st.PutSession(ctx, se); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			renewed := se
			renewed.Expires = clk.Now().Add(2 * time.Hour)
			if err := st.RenewSession(ctx, renewed); err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			if _, err := st.EndSession(ctx, se); err != nil {
				t.Error(err)
			}
		}()
		close(start)
		wg.Wait()
		if _, err := st.Session(ctx, key); !errors.Is(err, store.ErrNotFound) {
			resurrected++
		}
		refs, err := st.PutSession(ctx, store.Session{Key: key + "-2", SID: "sid2-" + key, UserID: user, IDP: "local", AuthTime: clk.Now(), Expires: clk.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range refs {
			if ref.Key == key {
				zombies++
			}
		}
	}
	if zombies > 0 || resurrected > 0 {
		t.Fatalf("of %d rounds of a renewal racing EndSession: %d leave the ended session live (Session finds it), "+
			"%d leave it on its user's list (PutSession returns it, MaxSessionsPerUser counts it)", rounds, resurrected, zombies)
	}
}

// TestTouchPastIdleEndKeepsSessionEnded: a use checked just before a session's idle end, whose
// touch reaches the store just after it, does not bring the ended session back; a touch before
// the end moves it on.
func TestTouchPastIdleEndKeepsSessionEnded(t *testing.T) {
	clk := clocktest.New(at(0))
	st := embeddedtest.Store(t, clk.Now)
	ctx := context.Background()
	se := store.Session{Key: "idle-key", SID: "idle-sid", UserID: "idle-user", IDP: "local",
		AuthTime: clk.Now(), Expires: clk.Now().Add(10 * time.Hour), Idle: clk.Now().Add(30 * time.Minute)}
	if _, err := st.PutSession(ctx, se); err != nil {
		t.Fatal(err)
	}
	clk.Advance(29 * time.Minute)
	if err := st.TouchSession(ctx, se.Key, clk.Now().Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute)
	if _, err := st.Session(ctx, se.Key); err != nil {
		t.Fatalf("a session touched 29 min into its 30 min idle limit, 2 min later: %v; want live", err)
	}
	clk.Advance(31 * time.Minute)
	if err := st.TouchSession(ctx, se.Key, clk.Now().Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Session(ctx, se.Key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a session touched after its idle end: %v; want it ended (ErrNotFound)", err)
	}
}

// TestSessionUsesWriteByID: the session writes of every refresh, code exchange and
// authorization (a touch of its idle end, a client recorded) filter by _id alone, the one
// filter the embedded FerretDB answers from its index: any other scans every session stored.
func TestSessionUsesWriteByID(t *testing.T) {
	clk := clocktest.New(at(0))
	cmds := &embeddedtest.Commands{}
	st := embeddedtest.StoreWith(t, store.Options{Now: clk.Now, Monitor: cmds.Monitor()})
	ctx := context.Background()
	se := store.Session{Key: "use-key", SID: "use-sid", UserID: "use-user", IDP: "local",
		AuthTime: clk.Now(), Expires: clk.Now().Add(10 * time.Hour), Idle: clk.Now().Add(30 * time.Minute)}
	if _, err := st.PutSession(ctx, se); err != nil {
		t.Fatal(err)
	}
	cmds.Record(true)
	if err := st.TouchSession(ctx, se.Key, clk.Now().Add(40*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := st.AddSessionClient(ctx, se.Key, "portal"); err != nil {
		t.Fatal(err)
	}
	got := cmds.Take()
	writes := 0
	for _, c := range got {
		if _, ok := c.Filters(); !ok {
			continue
		}
		for _, s := range c.NotByID() {
			t.Error(s)
		}
		if c.Name != "find" {
			writes++
		}
	}
	if writes != 2 {
		t.Fatalf("a touch and a client recorded made %d writes, want 2: %v", writes, got)
	}
	if _, err := st.EndSession(ctx, se); err != nil {
		t.Fatal(err)
	}
	if err := st.AddSessionClient(ctx, se.Key, "kiosk"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a client recorded in an ended session: %v, want ErrNotFound", err)
	}
	if err := st.TouchSession(ctx, se.Key, clk.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Session(ctx, se.Key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an ended session touched: %v, want it ended", err)
	}
}
