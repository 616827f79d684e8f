package server_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	csrfField  = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	sessionRow = regexp.MustCompile(`<li id="session-([^"]+)">\s*<strong>([^<]*)`)
	grantRow   = regexp.MustCompile(`<li id="grant-([^"]+)">`)
)

// accountPage is the account page as a browser reads it.
type accountPage struct {
	page
	csrf     string
	sessions map[string]bool // sid → the browser's own session
	grants   []string
}

func (e *signInEnv) account(t *testing.T, b *http.Client) accountPage {
	t.Helper()
	p := get(t, b, e.issuer+"/account")
	if p.status != http.StatusOK || !strings.Contains(p.body, "My account") {
		t.Fatalf("account page: %d %s", p.status, p.body)
	}
	return parseAccount(t, p)
}

func parseAccount(t *testing.T, p page) accountPage {
	t.Helper()
	a := accountPage{page: p, sessions: map[string]bool{}}
	if m := csrfField.FindStringSubmatch(p.body); m != nil {
		a.csrf = html.UnescapeString(m[1])
	}
	for _, m := range sessionRow.FindAllStringSubmatch(p.body, -1) {
		a.sessions[html.UnescapeString(m[1])] = strings.HasPrefix(m[2], "当前浏览器")
	}
	for _, m := range grantRow.FindAllStringSubmatch(p.body, -1) {
		a.grants = append(a.grants, html.UnescapeString(m[1]))
	}
	return a
}

func (a accountPage) own() string {
	for sid, own := range a.sessions {
		if own {
			return sid
		}
	}
	return ""
}

func (a accountPage) other() string {
	for sid, own := range a.sessions {
		if !own {
			return sid
		}
	}
	return ""
}

// accountPost posts a form of the account page from browser b.
func (e *signInEnv) accountPost(t *testing.T, b *http.Client, action string, form url.Values) page {
	t.Helper()
	resp, err := b.PostForm(e.issuer+"/account"+action, form)
	if err != nil {
		t.Fatal(err)
	}
	return read(t, resp)
}

// revokeOnAccountPage removes client's access on the account page of browser b, signed in.
func (e *signInEnv) revokeOnAccountPage(t *testing.T, b *http.Client, client string) {
	t.Helper()
	page := e.account(t, b)
	if p := e.accountPost(t, b, "/grants/revoke", url.Values{"client_id": {client}, "csrf": {page.csrf}}); p.status != http.StatusOK {
		t.Fatalf("revocation of %s: %d %s", client, p.status, p.body)
	}
}

// grantedAgainAfterRevocation has browser b, signed in, get client's tokens, revoke its access
// on the account page, and 5 s later sign in to it again and consent anew; it returns the new
// access token, which the front end accepts.
func (e *signInEnv) grantedAgainAfterRevocation(t *testing.T, b *http.Client, client string) string {
	t.Helper()
	if _, errc := e.exchange(t, client, e.signInCode(t, b, client)); errc != "" {
		t.Fatal(errc)
	}
	e.revokeOnAccountPage(t, b, client)
	e.clock.Advance(5 * time.Second)
	ask := get(t, b, e.authURL(client, "again"))
	if !strings.Contains(ask.body, `name="accept"`) {
		t.Fatalf("no consent asked after the revocation: %d %s", ask.status, ask.location)
	}
	fresh, errc := e.exchange(t, client, callback(t, submit(t, b, ask, url.Values{"accept": {"yes"}})).Get("code"))
	if errc != "" {
		t.Fatal(errc)
	}
	access := fresh["access_token"].(string)
	if st := userinfo(t, e.issuer, access); st != http.StatusOK {
		t.Fatalf("a token granted after the revocation: userinfo %d", st)
	}
	return access
}

// aheadAdminStore opens the env's store as the admin tool would on a host whose clock is
// ahead of the front ends' by ahead.
func aheadAdminStore(t *testing.T, e *signInEnv, ahead time.Duration) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Options{URI: e.cfg.MongoDB.URI, Database: e.cfg.MongoDB.Database,
		Now: func() time.Time { return e.clock.Now().Add(ahead) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	return st
}

// signedIn signs browser b in through the account page itself.
func (e *signInEnv) signedIn(t *testing.T, b *http.Client) accountPage {
	t.Helper()
	p := get(t, b, e.issuer+"/account")
	if !strings.Contains(p.body, `name="password"`) {
		t.Fatalf("the account page of a browser not signed in: %d %s", p.status, p.body)
	}
	p = submit(t, b, p, url.Values{"username": {userID}, "password": {userPass}})
	if p.status != http.StatusOK || p.url.Path != "/auth/realms/campus/account" {
		t.Fatalf("after the sign-in: %d %s %s", p.status, p.url, p.body)
	}
	return parseAccount(t, p)
}

// TestAccountGrants: the account page lists the applications the user granted, with their
// scopes and use; removing one ends its refresh and access tokens at once (every browser of the
// user), leaves other applications alone, and makes the next sign-in ask for consent again.
func TestAccountGrants(t *testing.T) {
	e := newSignInEnv(t)
	a := browser(t)
	first := e.signedIn(t, a)
	if len(first.grants) != 0 || len(first.sessions) != 1 || first.own() == "" || !strings.Contains(first.body, userID) {
		t.Fatalf("a first visit: grants %v, sessions %v", first.grants, first.sessions)
	}
	portal, errc := e.exchange(t, "portal", e.signInCode(t, a, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	library, errc := e.exchange(t, "library", e.signInCode(t, a, "library"))
	if errc != "" {
		t.Fatal(errc)
	}
	// The same user in a second browser, to the same application.
	portal2 := e.userTokens(t, "portal")
	e.clock.Advance(time.Minute)
	if _, errc := e.refresh(t, "library", library["refresh_token"].(string)); errc != "" {
		t.Fatal(errc)
	}
	page := e.account(t, a)
	if strings.Join(page.grants, ",") != "portal,library" {
		t.Fatalf("grants listed: %v", page.grants)
	}
	for _, want := range []string{"通过信息化公众号向您发送消息", "Send you messages", "last used"} {
		if !strings.Contains(page.body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}

	// Refused: a wrong CSRF value, and a browser with no session; nothing changes.
	e.writes.take()
	if p := e.accountPost(t, a, "/grants/revoke", url.Values{"client_id": {"portal"}, "csrf": {"forged"}}); p.status != http.StatusForbidden {
		t.Fatalf("a forged form: %d", p.status)
	}
	if p := e.accountPost(t, browser(t), "/grants/revoke", url.Values{"client_id": {"portal"}, "csrf": {page.csrf}}); p.status != http.StatusForbidden {
		t.Fatalf("another browser: %d", p.status)
	}
	if p := e.accountPost(t, a, "/grants/revoke", url.Values{"client_id": {"kiosk"}, "csrf": {page.csrf}}); p.status != http.StatusNotFound {
		t.Fatalf("an application never granted: %d", p.status)
	}
	e.noWrites(t, "refused account forms")
	if st := userinfo(t, e.issuer, portal["access_token"].(string)); st != 200 {
		t.Fatalf("userinfo before the revocation: %d", st)
	}

	p := e.accountPost(t, a, "/grants/revoke", url.Values{"client_id": {"portal"}, "csrf": {page.csrf}})
	if p.status != http.StatusOK || !strings.Contains(p.body, "access is removed") {
		t.Fatalf("revocation: %d %s", p.status, p.body)
	}
	if got := parseAccount(t, p).grants; strings.Join(got, ",") != "library" {
		t.Fatalf("grants after removing portal: %v", got)
	}
	for i, tok := range []map[string]any{portal, portal2} {
		if _, errc := e.refresh(t, "portal", tok["refresh_token"].(string)); errc != "invalid_grant" {
			t.Errorf("refresh token %d after the revocation: %q", i, errc)
		}
		if st := userinfo(t, e.issuer, tok["access_token"].(string)); st != http.StatusUnauthorized {
			t.Errorf("access token %d at userinfo after the revocation: %d", i, st)
		}
		if _, m := e.postForm(t, "/token/introspect", "portal", url.Values{"token": {tok["access_token"].(string)}}); m["active"] != false {
			t.Errorf("access token %d introspects %v", i, m)
		}
	}
	if st := userinfo(t, e.issuer, library["access_token"].(string)); st != 200 {
		t.Fatalf("another application's token: %d", st)
	}

	// The next sign-in to portal asks for consent again, and its tokens work.
	e.clock.Advance(2 * time.Second)
	ask := get(t, a, e.authURL("portal", "again"))
	if !strings.Contains(ask.body, `name="accept"`) {
		t.Fatalf("no consent asked after the revocation: %d %s", ask.status, ask.location)
	}
	fresh, errc := e.exchange(t, "portal", callback(t, submit(t, a, ask, url.Values{"accept": {"yes"}})).Get("code"))
	if errc != "" {
		t.Fatal(errc)
	}
	if st := userinfo(t, e.issuer, fresh["access_token"].(string)); st != 200 {
		t.Fatalf("a token granted after the revocation: %d", st)
	}
	if _, errc := e.refresh(t, "portal", fresh["refresh_token"].(string)); errc != "" {
		t.Fatalf("refreshing a token granted after the revocation: %q", errc)
	}
}

// TestAccountSessions: the account page lists the user's sessions in every browser; ending one
// signs that browser out and ends its tokens; "everywhere else" keeps only this browser; ending
// the page's own session signs it out.
func TestAccountSessions(t *testing.T) {
	e := newSignInEnv(t)
	a, b, c := browser(t), browser(t), browser(t)
	e.signedIn(t, a)
	tokB, errc := e.exchange(t, "portal", e.signInCode(t, b, "portal"))
	if errc != "" {
		t.Fatal(errc)
	}
	page := e.account(t, a)
	if len(page.sessions) != 2 || page.own() == "" || page.other() == "" {
		t.Fatalf("sessions listed: %v", page.sessions)
	}
	sidB := page.other()

	e.writes.take()
	if p := e.accountPost(t, a, "/sessions/end", url.Values{"sid": {sidB}, "csrf": {"forged"}}); p.status != http.StatusForbidden {
		t.Fatalf("a forged form: %d", p.status)
	}
	if p := e.accountPost(t, a, "/sessions/end", url.Values{"sid": {"no-such-session"}, "csrf": {page.csrf}}); p.status != http.StatusNotFound {
		t.Fatalf("an unknown session: %d", p.status)
	}
	e.noWrites(t, "refused account forms")

	p := e.accountPost(t, a, "/sessions/end", url.Values{"sid": {sidB}, "csrf": {page.csrf}})
	if p.status != http.StatusOK || !strings.Contains(p.body, "The session has ended") {
		t.Fatalf("ending a session: %d %s", p.status, p.body)
	}
	if got := parseAccount(t, p).sessions; len(got) != 1 || got[page.own()] != true {
		t.Fatalf("sessions after ending b's: %v", got)
	}
	if st := userinfo(t, e.issuer, tokB["access_token"].(string)); st != http.StatusUnauthorized {
		t.Fatalf("b's token after its session ended: %d", st)
	}
	if _, errc := e.refresh(t, "portal", tokB["refresh_token"].(string)); errc != "invalid_grant" {
		t.Fatalf("b's refresh token: %q", errc)
	}
	if again := get(t, b, e.authURL("portal", "again")); !strings.Contains(again.body, `name="password"`) {
		t.Fatalf("b is still signed in: %d %s", again.status, again.location)
	}

	// Everywhere else: b and c signed in again, then ended together; a stays.
	e.signedIn(t, b)
	e.signedIn(t, c)
	page = e.account(t, a)
	if len(page.sessions) != 3 {
		t.Fatalf("sessions: %v", page.sessions)
	}
	p = e.accountPost(t, a, "/sessions/end", url.Values{"sid": {"others"}, "csrf": {page.csrf}})
	if got := parseAccount(t, p).sessions; p.status != http.StatusOK || len(got) != 1 || got[page.own()] != true {
		t.Fatalf("after ending every other session: %d %v", p.status, got)
	}
	for _, other := range []*http.Client{b, c} {
		if q := get(t, other, e.issuer+"/account"); !strings.Contains(q.body, `name="password"`) {
			t.Fatalf("another browser is still signed in: %d", q.status)
		}
	}

	// The page's own session: signed out.
	p = e.accountPost(t, a, "/sessions/end", url.Values{"sid": {page.own()}, "csrf": {page.csrf}})
	if p.status != http.StatusOK || !strings.Contains(p.body, "You have signed out") {
		t.Fatalf("ending the own session: %d %s", p.status, p.body)
	}
	if q := get(t, a, e.issuer+"/account"); !strings.Contains(q.body, `name="password"`) {
		t.Fatalf("still signed in after ending the own session: %d", q.status)
	}
}

// clientKnown reports whether the front end accepts an authorization request of client.
func clientKnown(t *testing.T, e *signInEnv, client string) bool {
	t.Helper()
	p := get(t, browser(t), e.authURL(client, "probe"))
	return p.status == http.StatusOK && strings.Contains(p.body, `name="password"`)
}

// TestConsentEndsWithItsClient: an operator deletes a client with `api admin clients delete`
// and later registers a new application under the same client_id with `api admin clients
// create`. The users' consents went with the old one, as Keycloak's do: the new application
// asks each user again.
func TestConsentEndsWithItsClient(t *testing.T) {
	e := newSignInEnv(t)
	st := adminStore(t, e)
	defer func() { _ = st.Close(context.Background()) }()
	ctx := context.Background()
	// The test's front end does not run the reload loop (Serve does): a front end started
	// after each change reads the clients as they are then, as every replica does within
	// oauth.ClientsReload.
	mk := func() *signInEnv {
		t.Helper()
		err := st.CreateClient(ctx, store.Client{ID: "survey", SecretSHA256: oauth.Hash(rpSecret),
			Grants: []string{"authorization_code", "refresh_token"}, Scopes: []string{"openid", "notification.mp"},
			RedirectURIs: []string{rpRedirect}, PostLogoutRedirectURIs: []string{rpRedirect}, Source: store.SourceAdmin})
		if err != nil {
			t.Fatal(err)
		}
		r := *e
		r.issuer = e.replica(t, e.cfg.OAuth.Clients)
		if !clientKnown(t, &r, "survey") {
			t.Fatal("the front end does not know the client")
		}
		return &r
	}
	r1 := mk()
	b := browser(t)
	p := get(t, b, r1.authURL("survey", "s1"))
	p = submit(t, b, p, url.Values{"username": {userID}, "password": {userPass}})
	if !strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("no consent page at the first sign-in: %d %s", p.status, p.location)
	}
	code := callback(t, submit(t, b, p, url.Values{"accept": {"yes"}})).Get("code")
	if _, errc := r1.exchange(t, "survey", code); errc != "" {
		t.Fatal(errc)
	}

	// api admin clients delete survey
	if err := st.DeleteClient(ctx, "survey"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	// api admin clients create survey: another application under the same id.
	r2 := mk()

	p = get(t, b, r2.authURL("survey", "s2"))
	if !strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("a newly registered client %q got the user's code without asking for consent: "+
			"the consent given to the deleted client of that id was kept (%d, Location %s)", "survey", p.status, p.location)
	}
}

// TestAccountShowsConsentedScopes: the account page lists what an application may do. After
// the user consented to notification.mp and fake_api, a later sign-in that asked for less (no
// consent page, rightly) takes nothing back: the page still lists fake_api, which the
// application gets again without asking.
func TestAccountShowsConsentedScopes(t *testing.T) {
	e := newSignInEnvWith(t, nil, func(cfg *config.Config) {
		cfg.OAuth.Clients = append(cfg.OAuth.Clients, config.Client{ClientID: "labs", ClientSecret: rpSecret,
			Grants: []string{"authorization_code", "refresh_token"}, Scopes: []string{"openid", "notification.mp", "fake_api"},
			RedirectURIs: []string{rpRedirect}})
	})
	b := browser(t)
	e.signedIn(t, b)
	p := get(t, b, e.authURL("labs", "wide", "scope", "openid notification.mp fake_api"))
	if !strings.Contains(p.body, `name="accept"`) || !strings.Contains(p.body, "Use the test interface") {
		t.Fatalf("consent page: %d %s", p.status, p.body)
	}
	if _, errc := e.exchange(t, "labs", callback(t, submit(t, b, p, url.Values{"accept": {"yes"}})).Get("code")); errc != "" {
		t.Fatal(errc)
	}
	e.clock.Advance(time.Minute)
	// A narrower request: no consent page (Keycloak asks only for what was not granted).
	p = get(t, b, e.authURL("labs", "narrow", "scope", "openid notification.mp"))
	if _, errc := e.exchange(t, "labs", callback(t, p).Get("code")); errc != "" {
		t.Fatal(errc)
	}
	// The consent to fake_api stands: it is granted again without asking.
	p = get(t, b, e.authURL("labs", "again", "scope", "openid notification.mp fake_api"))
	if strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("consent asked again for scopes already granted")
	}
	callback(t, p)

	page := e.account(t, b)
	start := strings.Index(page.body, `<li id="grant-labs">`)
	if start < 0 {
		t.Fatalf("labs is not listed: %v", page.grants)
	}
	row := page.body[start:]
	if end := strings.Index(row, "</form>"); end > 0 {
		row = row[:end]
	}
	if !strings.Contains(row, "Use the test interface") {
		t.Fatalf("the account page hides a scope the user consented to and the application gets without asking (fake_api); its row:\n%s", row)
	}
}

// TestTokenIssuedAfterRevocationInItsSecond: a user removes an application's access on the
// account page and signs in to it again a moment later, within the same second (an
// application that skips consent signs the user in again at once through the single sign-on).
// The revocation ends the tokens of its time, as Keycloak's does, never those of the later
// sign-in: the new access token works, though its iat (whole seconds) is the revocation's.
func TestTokenIssuedAfterRevocationInItsSecond(t *testing.T) {
	e := newSignInEnv(t)
	b := browser(t)
	e.signedIn(t, b)
	first, errc := e.exchange(t, "trusted", e.signInCode(t, b, "trusted"))
	if errc != "" {
		t.Fatal(errc)
	}
	e.revokeOnAccountPage(t, b, "trusted")
	if st := userinfo(t, e.issuer, first["access_token"].(string)); st != http.StatusUnauthorized {
		t.Fatalf("the token from before the revocation: %d", st)
	}
	// 300 ms later, the user signs in to the application again.
	e.clock.Advance(300 * time.Millisecond)
	again, errc := e.exchange(t, "trusted", e.signInCode(t, b, "trusted"))
	if errc != "" {
		t.Fatal(errc)
	}
	st := userinfo(t, e.issuer, again["access_token"].(string))
	_, m := e.postForm(t, "/token/introspect", "trusted", url.Values{"token": {again["access_token"].(string)}})
	if st != http.StatusOK || m["active"] != true {
		t.Fatalf("an access token issued 300 ms after the revocation, from a new sign-in: userinfo %d, introspection %v", st, m)
	}
}

// TestConsentToADeletedClientIsNotKept: a user has the consent page of an application open
// when the operator deletes the application (`api admin clients delete`). The user then
// presses "accept" at a front end that has reloaded the registry since: no consent is stored,
// and an application registered later under the same client_id asks the user.
func TestConsentToADeletedClientIsNotKept(t *testing.T) {
	e := newSignInEnv(t)
	st := adminStore(t, e)
	defer func() { _ = st.Close(context.Background()) }()
	ctx := context.Background()
	create := func() {
		t.Helper()
		err := st.CreateClient(ctx, store.Client{ID: "survey", SecretSHA256: oauth.Hash(rpSecret),
			Grants: []string{"authorization_code", "refresh_token"}, Scopes: []string{"openid", "notification.mp"},
			RedirectURIs: []string{rpRedirect}, PostLogoutRedirectURIs: []string{rpRedirect}, Source: store.SourceAdmin})
		if err != nil {
			t.Fatal(err)
		}
	}
	create()
	r1 := *e
	r1.issuer = e.replica(t, e.cfg.OAuth.Clients)

	b := browser(t)
	p := get(t, b, r1.authURL("survey", "s1"))
	p = submit(t, b, p, url.Values{"username": {userID}, "password": {userPass}})
	if !strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("no consent page at the first sign-in: %d %s", p.status, p.location)
	}

	// api admin clients delete survey, while the user reads the consent page.
	if err := st.DeleteClient(ctx, "survey"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(5 * time.Second)
	// A front end that has read the registry since (every one has within ClientsReload).
	after := e.replica(t, e.cfg.OAuth.Clients)
	answer := submitAt(t, b, p, after, url.Values{"accept": {"yes"}}) // the user accepts there
	if answer.status != http.StatusBadRequest || answer.location != "" {
		t.Errorf("the consent form for the deleted client was answered %d %s", answer.status, answer.location)
	}

	if sc, err := st.Consent(ctx, userID, "survey", time.Time{}); err != nil || len(sc) != 0 {
		t.Errorf("a consent to the deleted client %q was stored after its deletion: %v (err %v)", "survey", sc, err)
	}

	// Later: api admin clients create survey, another application under the same id.
	e.clock.Advance(time.Minute)
	create()
	r2 := *e
	r2.issuer = e.replica(t, e.cfg.OAuth.Clients)
	p = get(t, b, r2.authURL("survey", "s2"))
	if strings.Contains(p.body, `name="password"`) {
		p = submit(t, b, p, url.Values{"username": {userID}, "password": {userPass}})
	}
	if !strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("a newly registered client %q got the user's code without asking for consent: the consent given, "+
			"after the deletion, to the deleted client of that id was kept (%d, Location %s)\n%.600s", "survey", p.status, p.location, p.body)
	}
}

// oldAccessRevoked is the check of the previous release (13a9e5f, pkg/oauth/account.go,
// accessRevoked), verbatim but for its receiver: what a front end of that release, still running
// during a rolling update on the same NATS, decides from the value in ucs_revocations.
func oldAccessRevoked(iat *jwt.NumericDate, v []byte) bool {
	at, err := strconv.ParseInt(string(v), 10, 64)
	return err != nil || iat.Unix() <= at
}

// TestRevocationAsThePreviousReleaseReadsIt: a user removes an application's access on a front
// end of this release, then signs in to it again a few seconds later. A front end of the
// previous release, running beside it during a rolling update, reads the shared key
// grant.<user>.<client> as a Unix second: it must accept the token issued after the
// revocation (this release keeps the millisecond under another key).
func TestRevocationAsThePreviousReleaseReadsIt(t *testing.T) {
	e := newSignInEnv(t)
	a := browser(t)
	e.signedIn(t, a)
	// Seconds after the revocation the user signs in to portal again and consents anew.
	access := e.grantedAgainAfterRevocation(t, a, "portal")

	// What an old front end reads from the shared bucket.
	nc, err := nats.Connect(e.cfg.NATS.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, service.RevocationsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := "grant.p" + userID + ".pportal" // revokedGrantKey: keyPart of plain names is "p"+name
	ent, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatalf("the revocation under %s: %v", key, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var claims jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(access, &claims); err != nil {
		t.Fatal(err)
	}
	if oldAccessRevoked(claims.IssuedAt, ent.Value()) {
		at, _ := strconv.ParseInt(string(ent.Value()), 10, 64)
		t.Fatalf("a front end of the previous release refuses the token issued at %s, %s after the revocation: "+
			"it reads %s=%s as Unix seconds (%s), and keeps refusing every token of this user and application until the key expires (bucket TTL %s)",
			claims.IssuedAt.Time.UTC().Format(time.RFC3339), 5*time.Second, key, ent.Value(), time.Unix(at, 0).UTC().Format("2006-01-02"), st.TTL())
	}
}

// TestConsentFormOfAClientRegisteredAgainMeanwhile: a user is on the consent page of
// client "survey" when an operator deletes it and registers another application under the same
// id (another secret, another redirect URI). Submitting the old page records nothing and sends
// no code: the sign-in belongs to the client it began with, as Keycloak's does.
func TestConsentFormOfAClientRegisteredAgainMeanwhile(t *testing.T) {
	e := newSignInEnv(t)
	st := adminStore(t, e)
	defer func() { _ = st.Close(context.Background()) }()
	ctx := context.Background()
	const secret2 = "the-new-application-secret-02"
	survey := func(secret, redirect string) store.Client {
		return store.Client{ID: "survey", SecretSHA256: oauth.Hash(secret), Grants: []string{"authorization_code", "refresh_token"},
			Scopes: []string{"openid", "notification.mp"}, RedirectURIs: []string{redirect}, Source: store.SourceAdmin}
	}
	if err := st.CreateClient(ctx, survey(rpSecret, rpRedirect)); err != nil {
		t.Fatal(err)
	}
	// A front end that has read the registry (every one does within ClientsReload).
	r1 := *e
	r1.issuer = e.replica(t, e.cfg.OAuth.Clients)

	b := browser(t)
	p := get(t, b, r1.authURL("survey", "st"))
	if strings.Contains(p.body, `name="password"`) {
		p = submit(t, b, p, url.Values{"username": {userID}, "password": {userPass}})
	}
	if !strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("no consent page: %d %s", p.status, p.body)
	}

	// Meanwhile: api admin clients delete survey; api admin clients create survey (another app).
	if err := st.DeleteClient(ctx, "survey"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Second)
	const otherRedirect = "https://other.example.edu/cb"
	if err := st.CreateClient(ctx, survey(secret2, otherRedirect)); err != nil {
		t.Fatal(err)
	}
	newer, err := st.Client(ctx, "survey")
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Second)
	// The user now accepts the page shown for the earlier application, at a front end that has
	// read the registry since.
	after := e.replica(t, e.cfg.OAuth.Clients)
	answer := submitAt(t, b, p, after, url.Values{"accept": {"yes"}}) // the user accepts there
	p = answer
	sc, err := st.Consent(ctx, userID, "survey", newer.Created)
	if err != nil {
		t.Fatal(err)
	}
	var code string
	if strings.HasPrefix(p.location, rpRedirect) {
		if u, err := url.Parse(p.location); err == nil {
			code = u.Query().Get("code")
		}
	}
	if len(sc) > 0 || code != "" {
		t.Fatalf("the consent given on the page of the deleted client counts for the application registered under its id since "+
			"(its consent: %v), and the answer went to %q (code %q), a redirect URI the new client did not register (it has %s)",
			sc, p.location, code, otherRedirect)
	}
}

// TestRevocationByThePreviousReleaseAfterOneByThisRelease: during a rolling update a user
// removes an application's access on a front end of this release, signs in to it again, and
// later removes its access again, this time on a front end of the previous release (which
// writes only grant.<user>.<client>, in Unix seconds). The token granted in between is refused
// by every front end: this release reads both keys, and the later revocation counts.
func TestRevocationByThePreviousReleaseAfterOneByThisRelease(t *testing.T) {
	e := newSignInEnv(t)
	a := browser(t)
	e.signedIn(t, a)
	access := e.grantedAgainAfterRevocation(t, a, "portal") // revoked by this release: grantms and grant

	// Ten seconds later the user removes the access again, on a front end of the previous
	// release (13a9e5f RevokeGrant: the store's revocation, then grant.<user>.<client> = Unix
	// second). RevokeGrant promises the access tokens are refused by every replica at once; the
	// store is asked again only every oauth.SessionRecheck (a minute).
	e.clock.Advance(10 * time.Second)
	now := e.clock.Now()
	st := adminStore(t, e)
	defer func() { _ = st.Close(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := st.RevokeGrant(ctx, userID, "portal", now, now.Add(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(e.cfg.NATS.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, service.RevocationsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := "grant.p" + userID + ".pportal"
	if _, err := kv.Put(ctx, key, strconv.AppendInt(nil, now.Unix(), 10)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 5*time.Second, "the token refused after the revocation by the previous release", func() bool {
		return userinfo(t, e.issuer, access) == http.StatusUnauthorized
	})
}

// TestSignInOfANewClientOnAReplicaBehind: the admin tool registers a client on a host
// whose clock is 10 s ahead of a front end's (clocks agree within 15 s, deployments/README.md).
// A user who starts a sign-in to it on that front end after it has read the registry gets the
// consent page: no time of the front end's clock is compared with the admin tool's.
func TestSignInOfANewClientOnAReplicaBehind(t *testing.T) {
	e := newSignInEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := aheadAdminStore(t, e, 10*time.Second)
	if err := admin.CreateClient(ctx, store.Client{ID: "survey", SecretSHA256: oauth.Hash(rpSecret),
		Grants: []string{"authorization_code", "refresh_token"}, Scopes: []string{"openid", "notification.mp"},
		RedirectURIs: []string{rpRedirect}, Source: store.SourceAdmin}); err != nil {
		t.Fatal(err)
	}
	// A second later a front end (clock e.clock) that has read the registry since.
	e.clock.Advance(time.Second)
	r := *e
	r.issuer = e.replica(t, e.cfg.OAuth.Clients)
	b := browser(t)
	p := get(t, b, r.authURL("survey", "st"))
	if strings.Contains(p.body, `name="password"`) {
		p = submit(t, b, p, url.Values{"username": {userID}, "password": {userPass}})
	}
	if !strings.Contains(p.body, `name="accept"`) {
		t.Fatalf("the sign-in to a client registered a second ago, on a front end whose clock is 10 s behind the admin tool's, "+
			"ends without a consent page: %d %s\n%.300s", p.status, p.location, p.body)
	}
}

// TestAccountPageShowsTimesInTheConfiguredZone: the account page shows when a session began
// in the front end's time_zone, as its answers' time fields are: China Standard Time by
// default, UTC when configured so.
func TestAccountPageShowsTimesInTheConfiguredZone(t *testing.T) {
	for _, zone := range []string{"", "UTC"} {
		t.Run("time_zone="+zone, func(t *testing.T) {
			e := newSignInEnvWith(t, nil, func(c *config.Config) { c.TimeZone = zone })
			a := browser(t)
			page := e.signedIn(t, a)
			name := zone
			if name == "" {
				name = config.DefaultTimeZone
			}
			loc, err := time.LoadLocation(name)
			if err != nil {
				t.Fatal(err)
			}
			want := "Signed in " + e.clock.Now().In(loc).Format("2006-01-02 15:04")
			if !strings.Contains(page.body, want) {
				t.Fatalf("time_zone %q: the account page does not say %q:\n%.2000s", zone, want, page.body)
			}
		})
	}
}
