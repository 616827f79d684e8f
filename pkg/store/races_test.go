package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/store"
)

// TestSessionClientsRecordedAtOnceAllNamed: a user signed in once opens several
// applications at the same time; each one's code exchange records its client in the one
// session (AddSessionClient). Every client must be recorded, or back-channel logout never
// tells the one lost, and it keeps working tokens of an ended session.
func TestSessionClientsRecordedAtOnceAllNamed(t *testing.T) {
	clk := clocktest.New(at(0))
	st := embeddedtest.Store(t, clk.Now)
	ctx := context.Background()
	const rounds, apps = 6, 6
	for r := range rounds {
		se := store.Session{Key: fmt.Sprint("apps-key-", r), SID: fmt.Sprint("apps-sid-", r), UserID: fmt.Sprint("apps-user-", r),
			IDP: "local", AuthTime: clk.Now(), Expires: clk.Now().Add(time.Hour)}
		if _, err := st.PutSession(ctx, se); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range apps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if err := st.AddSessionClient(ctx, se.Key, fmt.Sprint("app-", i)); err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		ended, err := st.EndSession(ctx, se)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ended.Clients)
		if len(ended.Clients) != apps {
			t.Errorf("round %d: %d clients got tokens in the session, its end names %d: %v", r, apps, len(ended.Clients), ended.Clients)
		}
	}
}

// TestSessionClientRacingItsEnd: a code exchange records its client while the
// user signs out in another tab. Either the end names the client, or AddSessionClient says the
// session ended (its documented promise); and the session stays ended.
func TestSessionClientRacingItsEnd(t *testing.T) {
	clk := clocktest.New(at(0))
	st := embeddedtest.Store(t, clk.Now)
	ctx := context.Background()
	bad := 0
	const rounds = 30
	for r := range rounds {
		se := store.Session{Key: fmt.Sprint("end-key-", r), SID: fmt.Sprint("end-sid-", r), UserID: fmt.Sprint("end-user-", r),
			IDP: "local", AuthTime: clk.Now(), Expires: clk.Now().Add(time.Hour)}
		if _, err := st.PutSession(ctx, se); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		var addErr error
		var ended store.Session
		wg.Add(2)
		go func() { defer wg.Done(); <-start; addErr = st.AddSessionClient(ctx, se.Key, "portal") }()
		go func() {
			defer wg.Done()
			<-start
			var err error
			if ended, err = st.EndSession(ctx, se); err != nil {
				t.Error(err)
			}
		}()
		close(start)
		wg.Wait()
		_, live := st.Session(ctx, se.Key)
		if live == nil {
			bad++
			t.Errorf("round %d: the session signed out of is live again", r)
			continue
		}
		if addErr == nil && !slices.Contains(ended.Clients, "portal") {
			bad++
			t.Errorf("round %d: the client was recorded in the live session (no error), but the end names only %v: it is never told", r, ended.Clients)
		}
	}
	t.Logf("%d of %d rounds wrong", bad, rounds)
}

// TestRevokedFamilyStaysRevokedWhileATokenIsStored: a refresh token is replayed (its family revoked) while
// the family's legitimate refresh stores the next token. The family must stay revoked: a leaked
// token detected is the whole point of rotation.
func TestRevokedFamilyStaysRevokedWhileATokenIsStored(t *testing.T) {
	clk := clocktest.New(at(0))
	st := embeddedtest.Store(t, clk.Now)
	ctx := context.Background()
	const rounds = 100
	lost := 0
	for r := range rounds {
		fam := fmt.Sprint("fam-", r)
		if err := st.PutRefreshToken(ctx, store.RefreshToken{Hash: fmt.Sprint("rt0-", r), Family: fam, ClientID: "portal",
			UserID: "u", SessionKey: "k", SID: "s", Expires: clk.Now().Add(time.Hour), At: clk.Now()}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			if err := st.PutRefreshToken(ctx, store.RefreshToken{Hash: fmt.Sprint("rt1-", r), Family: fam, ClientID: "portal",
				UserID: "u", SessionKey: "k", SID: "s", Expires: clk.Now().Add(2 * time.Hour), At: clk.Now()}); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			if err := st.RevokeFamily(ctx, fam); err != nil {
				t.Error(err)
			}
		}()
		close(start)
		wg.Wait()
		revoked, err := st.FamilyRevoked(ctx, fam)
		if err != nil {
			t.Fatal(err)
		}
		if !revoked {
			lost++
			t.Errorf("round %d: RevokeFamily returned nil, yet the family is not revoked", r)
		}
	}
	t.Logf("%d of %d revocations lost", lost, rounds)
}

// TestConsentKeptWhileTheGrantIsUsed: the user consents while tokens of the same grant are
// issued (a code, a refresh): the consent's scopes stay recorded, or the user is asked again.
func TestConsentKeptWhileTheGrantIsUsed(t *testing.T) {
	clk := clocktest.New(at(0))
	st := embeddedtest.Store(t, clk.Now)
	ctx := context.Background()
	for r := range 30 {
		user := fmt.Sprint("consent-user-", r)
		if err := st.UseGrant(ctx, user, "portal", "openid", clk.Now()); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(3)
		go func() {
			defer wg.Done()
			<-start
			if err := st.PutConsent(ctx, user, "portal", []string{"openid", "notification.mp"}, time.Time{}); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			if err := st.UseGrant(ctx, user, "portal", "openid", clk.Now()); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			if err := st.PutAuthCode(ctx, store.AuthCode{Hash: fmt.Sprint("code-", r), ClientID: "portal", UserID: user,
				At: clk.Now(), Expires: clk.Now().Add(time.Minute)}); err != nil {
				t.Error(err)
			}
		}()
		close(start)
		wg.Wait()
		g, err := st.Grant(ctx, user, "portal")
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Scopes) != 2 {
			t.Errorf("round %d: the consent given while the grant was used is lost: scopes %v", r, g.Scopes)
		}
	}
}

// TestSessionEndedOnceTellsOnce: two sign-outs of one session at once (two tabs, or an
// application's server-side logout with the browser's, on one front end or two): the session
// ends once, and only the end that ended it names its clients, so that each is sent one logout
// token.
func TestSessionEndedOnceTellsOnce(t *testing.T) {
	clk := clocktest.New(at(0))
	st := embeddedtest.Store(t, clk.Now)
	ctx := context.Background()
	for r := range 5 {
		se := store.Session{Key: fmt.Sprint("twice-key-", r), SID: fmt.Sprint("twice-sid-", r), UserID: "twice-user",
			IDP: "local", AuthTime: clk.Now(), Expires: clk.Now().Add(time.Hour)}
		if _, err := st.PutSession(ctx, se); err != nil {
			t.Fatal(err)
		}
		if err := st.AddSessionClient(ctx, se.Key, "shop"); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		named := 0
		start := make(chan struct{})
		for range 4 {
			wg.Go(func() {
				<-start
				ended, err := st.EndSession(ctx, se)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				named += len(ended.Clients)
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		if named != 1 {
			t.Errorf("round %d: four ends of one session named its one client %d times, want once", r, named)
		}
		if _, err := st.Session(ctx, se.Key); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("round %d: the session lives after its ends: %v", r, err)
		}
	}
}
