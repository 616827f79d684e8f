package server_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/store"
)

// TestConsentHoldsDoNotPileUp: every consent page a signed-in browser is shown records a hold
// in its session's record, and only an answered page dropped the holds that had ended. A browser
// sent to the authorization endpoint over and over (by its user's script, or by another site: a
// top-level GET carries the SameSite=Lax cookie), the pages never answered, grew the one record
// without bound, each read of the session decoding it all, towards MongoDB's 16 MiB. The record
// keeps at most 16 holds, none that has ended.
func TestConsentHoldsDoNotPileUp(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	// Signed in through trusted (no consent there); portal's consent is not given.
	if _, errc := e.exchange(t, "trusted", e.signInCode(t, b, "trusted")); errc != "" {
		t.Fatal(errc)
	}
	const rounds, perRound = 3, 40
	for r := range rounds {
		for i := range perRound {
			p := get(t, b, e.authURL("portal", "s"+strconv.Itoa(r*perRound+i)))
			if !strings.Contains(p.body, `name="accept"`) {
				t.Fatalf("request %d: no consent page: %d %q", r*perRound+i, p.status, p.location)
			}
		}
		e.clock.Advance(11 * time.Minute) // the consent pages so far have ended (10 minutes)
	}
	sessions, err := e.store.UserSessions(context.Background(), userID)
	if err != nil || len(sessions) != 1 {
		t.Fatalf("sessions: %d %v", len(sessions), err)
	}
	now, ended := e.clock.Now(), 0
	for _, until := range sessions[0].Holds {
		if !until.After(now) {
			ended++
		}
	}
	if n := len(sessions[0].Holds); n > store.MaxSessionHolds || ended > 0 {
		t.Errorf("after %d consent pages never answered, the session's record keeps %d holds, %d of them ended (want at most %d, none ended)",
			rounds*perRound, n, ended, store.MaxSessionHolds)
	}
}
