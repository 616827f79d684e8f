package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

// TestForeignSentIDCostsAsUnknown: another client's ucsId reads as unknown and costs what an
// unknown one does (TestOtherClientsIDCostsAsUnknown states the rule), or the time a lookup
// takes would tell a client that a ucsId it holds is someone else's push, and that it was
// sent or delivered. A foreign push whose sent record is in the store, and one whose receipt's
// final result is too (the one read a lookup of a delivered push makes), cost the reads of the
// results an unknown ucsId costs, in a lookup of one push and in a batch lookup.
func TestForeignSentIDCostsAsUnknown(t *testing.T) {
	reads := embeddedtest.CountFinds("push_results")
	e := newEnvDeps(t, nil, service.Deps{MongoMonitor: reads.Monitor()})
	other := e.token("other", pushSecret)
	now := e.clock.Now()
	foreign := push.NewID(now)
	w := e.api.Store.NewWriter(store.WriterOptions{})
	r := push.Result{UcsID: foreign, ClientID: "pusher", State: push.StateSent, Attempts: 1, MsgID: 4242, Accepted: now, Updated: now, Sent: now}
	if err := w.Write(context.Background(), store.SentRecords(r, "oA", now)...); err != nil {
		t.Fatal(err)
	}
	delivered := r
	delivered.UcsID, delivered.MsgID = push.NewID(now), 4243
	if err := w.Write(context.Background(), store.SentRecords(delivered, "oA", now)...); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(context.Background(), store.FinalRecord(store.Receipt(delivered, "success", now), now)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	unknown := push.NewID(now)
	lookup := func(id string) (int64, answer) {
		var a answer
		n := reads.During(func() { a = e.do("GET", "/v1/infra/notification/mp/"+id, "", other, "") })
		return n, a
	}
	nForeign, aForeign := lookup(foreign)
	nDelivered, aDelivered := lookup(delivered.UcsID)
	nUnknown, aUnknown := lookup(unknown)
	if aForeign.status != http.StatusNotFound || aDelivered.status != http.StatusNotFound || aUnknown.status != http.StatusNotFound {
		t.Fatalf("lookups: foreign sent %d %s, foreign delivered %d %s, unknown %d %s",
			aForeign.status, aForeign.body, aDelivered.status, aDelivered.body, aUnknown.status, aUnknown.body)
	}
	if nForeign != nUnknown || nDelivered != nUnknown {
		t.Fatalf("another client's sent push costs %d reads of the results, its delivered push %d, an unknown ucsId %d",
			nForeign, nDelivered, nUnknown)
	}
	// A batch lookup reads the store in the other order; the same holds there.
	inBatch := func(id string) int64 {
		var a answer
		n := reads.During(func() {
			a = e.do("POST", "/v1/infra/notification/mp/results", "application/json", other, `{"ucsIds":["`+id+`"]}`)
		})
		if a.status != http.StatusOK || !strings.Contains(string(a.body), "not_found") {
			t.Fatalf("batch lookup of %s: %d %s, want it not found", id, a.status, a.body)
		}
		return n
	}
	if nForeign, nDelivered, nUnknown := inBatch(foreign), inBatch(delivered.UcsID), inBatch(unknown); nForeign != nUnknown || nDelivered != nUnknown {
		t.Fatalf("in a batch lookup, another client's sent push costs %d reads of the results, its delivered push %d, an unknown ucsId %d",
			nForeign, nDelivered, nUnknown)
	}
}

// TestInvisibleNoteheadIsBlank: a required data value that shows nothing is blank (DESIGN:
// every string free of what the platform removes; push.showsNothing lists the characters
// "that show nothing by themselves"). U+1D159 MUSICAL SYMBOL NULL NOTEHEAD is one (a spacing
// glyph with no ink, used with U+3164 and U+2800 to send "empty" messages): a main item of it
// alone is refused, as those are.
func TestInvisibleNoteheadIsBlank(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	for _, v := range []string{"\u3164", "\u2800", "\U0001D159\U0001D159"} {
		body := fmt.Sprintf(`{"userId":"2020000001","type":"JML","data":{"class":"%s","info":"x"}}`, v)
		a := e.doWith("POST", "/v1/infra/notification/mp", tok, body, nil)
		if a.status != http.StatusBadRequest || !strings.Contains(string(a.body), "data.class: must not be blank") {
			t.Errorf("data.class %+q: %d %s; want 400 data.class: must not be blank", v, a.status, a.body)
		}
	}
}

// TestUserAccessTokenWorksUntilItsExpiry: a user's access token is good until the exp it states,
// used or not (interface: clients reuse tokens until they expire). Its sign-in session ends
// once nothing refreshes it for refresh_token_ttl (Keycloak's SSO Session Idle), and a token in
// use does not move that end, so the token says it ends by then: expires_in no later than the
// refresh token's end, not the client's 7200 s. A refresh moves the session on, and the new
// token is good until its own exp.
func TestUserAccessTokenWorksUntilItsExpiry(t *testing.T) {
	e := newSignInEnv(t)
	m := e.userTokens(t, "portal")
	for round := range 2 {
		access, _ := m["access_token"].(string)
		expiresIn, _ := m["expires_in"].(float64)
		refreshIn, _ := m["refresh_expires_in"].(float64)
		if access == "" || expiresIn <= 120 || expiresIn > refreshIn {
			t.Fatalf("round %d: expires_in %v, refresh_expires_in %v, access token given %v: want expires_in over 2 minutes and no later than refresh_expires_in",
				round, m["expires_in"], m["refresh_expires_in"], access != "")
		}
		// Used every ten minutes, and last a minute before its exp.
		lived := time.Duration(expiresIn) * time.Second
		for at := time.Duration(0); ; {
			if st, why := pushAs(t, e.base, access); st != http.StatusOK {
				t.Fatalf("round %d: push with the user's access token %s after its issue (expires_in %v s): %d %s", round, at, expiresIn, st, why)
			}
			if at >= lived-time.Minute {
				break
			}
			step := min(10*time.Minute, lived-time.Minute-at)
			e.clock.Advance(step)
			at += step
		}
		rt, _ := m["refresh_token"].(string)
		var errc string
		if m, errc = e.refresh(t, "portal", rt); errc != "" {
			t.Fatalf("round %d: refresh a minute before the access token's exp: %s", round, errc)
		}
	}
}

// TestBasicSecretWithPlusSign: a client secret holding '+' (half of those `openssl rand -base64`
// makes) sent in HTTP Basic as curl -u, Python requests and Postman send it, not form-encoded
// first as RFC 6749 §2.3.1 asks, is taken: the form-decoded secret turns '+' into a space, and
// the secret as sent is tried too, as is one with a bare '%' that does not form-decode at all.
// Sent form-encoded, as the RFC says, it is taken as well; a wrong secret is still refused.
func TestBasicSecretWithPlusSign(t *testing.T) {
	const secret = "q3+Vn8r/0kH2cY7x+L1wQe9sZt4uJbMfPdA6gRiXo5E="
	const percentSecret = "fees-50%-off-for-every-student" // no form decoding of it holds
	e := newEnvWith(t, func(c *config.Config) {
		c.OAuth.Clients = append(c.OAuth.Clients, config.Client{ClientID: "registrar", ClientSecret: secret,
			Grants: []string{"client_credentials"}, Scopes: []string{"notification.mp"}},
			config.Client{ClientID: "bursar", ClientSecret: percentSecret,
				Grants: []string{"client_credentials"}, Scopes: []string{"notification.mp"}})
	})
	token := func(user, pass string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/token", strings.NewReader("grant_type=client_credentials"))
		req.Header.Set("Content-Type", form)
		req.SetBasicAuth(user, pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if st, body := token("bursar", percentSecret); st != http.StatusOK {
		t.Errorf("Basic secret with a bare %%, as sent: %d %s, want 200", st, body)
	}
	for _, c := range []struct {
		what, secret string
		want         int
	}{
		{"as curl -u sends it", secret, http.StatusOK},
		{"form-encoded (RFC 6749)", url.QueryEscape(secret), http.StatusOK},
		{"with a space for the plus", strings.ReplaceAll(secret, "+", " "), http.StatusUnauthorized},
		{"wrong", secret[:len(secret)-2] + "A=", http.StatusUnauthorized},
	} {
		if st, body := token("registrar", c.secret); st != c.want {
			t.Errorf("Basic secret %s: %d %s, want %d", c.what, st, body, c.want)
		}
	}
}
