package simulator_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/platform/simulator"
)

const returnTo = "https://campus.example.edu/bind/platform"

// webAuthEnv is a simulator whose authorization domain is campus.example.edu, and the
// platform client's web authorization pointed at it over HTTP.
func webAuthEnv(t *testing.T) (*env, *platform.WebAuth, *clocktest.Clock) {
	t.Helper()
	clk := newClock()
	e := newEnv(t, simulator.Config{WebAuthHosts: []string{"campus.example.edu"}, Now: clk.Now})
	e.sim.AddFollower("oSecondFollower0000000000002")
	wa, err := platform.NewWebAuth(platform.WebAuthConfig{OAuthBase: e.srv.URL, APIBase: e.srv.URL, AppID: appID, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return e, wa, clk
}

// noRedirects is a client that stops at the simulator's redirect back to the page.
func noRedirects() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var pickForm = regexp.MustCompile(`<form method="post" action="([^"]+)"><input type="hidden" name="openid" value="([^"]+)">`)

// TestWebAuthorization: the authorization link the client writes opens the simulator's page,
// which lists the account's followers; picking one returns to the page with a code and the
// state, and the server's exchange of that code names the follower picked. The code is then
// spent (40163), an unknown one is 40029, one older than five minutes 42003.
func TestWebAuthorization(t *testing.T) {
	e, wa, clk := webAuthEnv(t)
	link := wa.AuthorizeURL(returnTo, "abcXYZ123")
	// The platform matches the parameters in this order, and needs the fragment.
	if want := e.srv.URL + "/connect/oauth2/authorize?appid=" + appID + "&redirect_uri=" + url.QueryEscape(returnTo) +
		"&response_type=code&scope=snsapi_base&state=abcXYZ123#wechat_redirect"; link != want {
		t.Fatalf("authorize URL\n got %s\nwant %s", link, want)
	}
	resp, err := http.Get(link) // a browser drops the fragment; so does the client
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	forms := pickForm.FindAllStringSubmatch(string(body), -1)
	if resp.StatusCode != http.StatusOK || len(forms) != 2 || forms[0][2] != follower || forms[1][2] != "oSecondFollower0000000000002" {
		t.Fatalf("authorization page %d lists %v:\n%s", resp.StatusCode, forms, body)
	}

	pick := func(openid string) url.Values {
		t.Helper()
		action, _ := url.Parse(strings.ReplaceAll(forms[0][1], "&amp;", "&"))
		resp, err := noRedirects().PostForm(e.srv.URL+action.RequestURI(), url.Values{"openid": {openid}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusFound || !strings.HasPrefix(loc.String(), returnTo+"?") {
			t.Fatalf("pick: %d %q", resp.StatusCode, loc)
		}
		return loc.Query()
	}
	q := pick("oSecondFollower0000000000002")
	if q.Get("state") != "abcXYZ123" || q.Get("code") == "" {
		t.Fatalf("returned with %v", q)
	}
	ctx := context.Background()
	if openid, err := wa.OpenID(ctx, q.Get("code")); err != nil || openid != "oSecondFollower0000000000002" {
		t.Fatalf("exchange: %q %v", openid, err)
	}
	code := func(err error) int {
		var pe *platform.Error
		if !errors.As(err, &pe) {
			t.Fatalf("not a platform error: %v", err)
		}
		for _, secretish := range []string{secret, q.Get("code")} {
			if strings.Contains(err.Error(), secretish) {
				t.Fatalf("the error shows a secret or the code: %v", err)
			}
		}
		return pe.Code
	}
	if _, err := wa.OpenID(ctx, q.Get("code")); code(err) != 40163 {
		t.Fatalf("a code used twice: %v", err)
	}
	if _, err := wa.OpenID(ctx, "never-issued"); code(err) != 40029 {
		t.Fatalf("an unknown code: %v", err)
	}
	late := pick(follower).Get("code")
	clk.Advance(5*time.Minute + time.Second)
	if _, err := wa.OpenID(ctx, late); code(err) != 42003 {
		t.Fatalf("a code older than five minutes: %v", err)
	}
	// A picked openid that is not a follower is refused: the page offers only followers.
	action, _ := url.Parse(strings.ReplaceAll(forms[0][1], "&amp;", "&"))
	resp, err = noRedirects().PostForm(e.srv.URL+action.RequestURI(), url.Values{"openid": {"oStranger"}})
	if err != nil {
		t.Fatalf("picking a stranger: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("picking a stranger: %v", resp.StatusCode)
	}
}

// TestWebAuthorizationRefusals: the authorization page refuses what the platform refuses, and
// the exchange checks the account's credentials.
func TestWebAuthorizationRefusals(t *testing.T) {
	e, wa, _ := webAuthEnv(t)
	page := func(q url.Values) (int, string) {
		resp, err := http.Get(e.srv.URL + "/connect/oauth2/authorize?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	good := func() url.Values {
		return url.Values{"appid": {appID}, "redirect_uri": {returnTo}, "response_type": {"code"}, "scope": {"snsapi_base"}, "state": {"s1"}}
	}
	for name, tc := range map[string]struct {
		change func(url.Values)
		code   string
	}{
		"another host":          {func(q url.Values) { q.Set("redirect_uri", "https://evil.example.com/bind/platform") }, "10003"},
		"another appid":         {func(q url.Values) { q.Set("appid", "wxother") }, "40013"},
		"no appid":              {func(q url.Values) { q.Del("appid") }, "41002"},
		"scope not granted":     {func(q url.Values) { q.Set("scope", "snsapi_login") }, "10005"},
		"state of other things": {func(q url.Values) { q.Set("state", "a b<") }, "47001"},
	} {
		q := good()
		tc.change(q)
		if st, body := page(q); st != 400 || !strings.Contains(body, "errcode "+tc.code) || strings.Contains(body, "<form") {
			t.Errorf("%s: %d %s", name, st, body)
		}
	}
	if st, _ := page(good()); st != 200 {
		t.Fatalf("a good request: %d", st)
	}

	code := e.sim.IssueWebCode(follower)
	bad, err := platform.NewWebAuth(platform.WebAuthConfig{OAuthBase: e.srv.URL, APIBase: e.srv.URL, AppID: appID, Secret: "wrong-secret"})
	if err != nil {
		t.Fatal(err)
	}
	var pe *platform.Error
	if _, err := bad.OpenID(context.Background(), code); !errors.As(err, &pe) || pe.Code != 40125 || strings.Contains(err.Error(), "wrong-secret") {
		t.Fatalf("a wrong secret: %v", err)
	}
	// The refused exchange spent nothing: the right account still gets the follower.
	if openid, err := wa.OpenID(context.Background(), code); err != nil || openid != follower {
		t.Fatalf("after a refused exchange: %q %v", openid, err)
	}
}
