package standalone_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/standalone"
)

// TestRestartKeepsABindingMadeOnTheBindingPage: README says of -standalone "a restart keeps
// everything", and its walk-through sends the newcomer to /bind to bind user 2020000009. A
// binding made there (store.Bind, as the page writes it), here of a seeded follower
// (2020000002's), is delivered to, and still is after a restart: the seeded bindings were put
// back over it at every start.
func TestRestartKeepsABindingMadeOnTheBindingPage(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir)
	var follower string
	for _, b := range s.Info.Bindings {
		if b.UserID == "2020000002" {
			follower = b.OpenID
		}
	}
	if _, err := s.API.Store.Bind(context.Background(), "2020000009", follower); err != nil {
		t.Fatal(err)
	}
	tok := token(t, s.Info.BaseURL, standalone.DemoClient, clientSecret(t, s.Info, standalone.DemoClient))
	if st := final(t, s.Info.BaseURL, tok, pushTo(t, s.Info.BaseURL, tok, "2020000009", todo)); st != "delivered" {
		t.Fatalf("before the restart: %s", st)
	}
	s.Close()
	raw, err := os.ReadFile(filepath.Join(dir, "standalone.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), `\u0026`) {
		t.Errorf("standalone.json escapes mongodb_uri's '&', which a copy of the value then carries:\n%s", raw)
	}

	s = start(t, dir)
	defer s.Close()
	tok = token(t, s.Info.BaseURL, standalone.DemoClient, clientSecret(t, s.Info, standalone.DemoClient))
	id := pushTo(t, s.Info.BaseURL, tok, "2020000009", todo)
	if st := final(t, s.Info.BaseURL, tok, id); st != "delivered" {
		t.Fatalf("after the restart the push to 2020000009 is %s: %v", st, lookup(t, s.Info.BaseURL, tok, id)["reason"])
	}
}

// TestBindingPageOffersAnUnboundFollower: the walk-through's binding step (user 2020000009 has
// no binding yet) needs a follower with no campus account bound: the simulated platform's
// "which follower are you" page offers one (standalone.json's unbound_followers), where every
// follower it offered was a demo user's.
func TestBindingPageOffersAnUnboundFollower(t *testing.T) {
	s := start(t, t.TempDir())
	defer s.Close()
	if len(s.Info.UnboundFollowers) == 0 {
		t.Fatal("standalone.json names no unbound follower")
	}
	spare := s.Info.UnboundFollowers[0]
	for _, b := range s.Info.Bindings {
		if b.OpenID == spare {
			t.Fatalf("the unbound follower %s is bound to %s", spare, b.UserID)
		}
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, err := c.Get(s.Info.BaseURL + "/bind")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `data-openid="`+spare+`"`) {
		t.Errorf("the platform's follower page (%s) does not offer the unbound follower %s:\n%.600s", resp.Request.URL, spare, body)
	}
}
