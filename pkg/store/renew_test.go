package store_test

import (
	"context"
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
