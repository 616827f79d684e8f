package cas_test

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/cas"
	"github.com/campus-it/ucs/pkg/cas/castest"
	"github.com/campus-it/ucs/pkg/clocktest"
)

const (
	userNumber = "2020000001"
	password   = "correct horse battery staple"
	// service is the OIDC server's CAS callback; it has a query of its own
	// so that every test checks the ticket is appended, not substituted.
	service = "https://id.example.edu/oidc/cas/callback?state=s%201&next=%2Fhome"
	// otherService is another application known to the same CAS server.
	otherService = "https://library.example.edu/cas"
)

// newClock is a fake clock at the fixed start of these tests.
func newClock() *clocktest.Clock { return clocktest.New(time.Date(2025, 9, 1, 8, 0, 0, 0, time.UTC)) }

// env is one CAS server, a client of it and a browser, all for one test.
type env struct {
	cas     *castest.Server
	clock   *clocktest.Clock
	client  *cas.Client
	browser *browser
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := newClock()
	srv := castest.New(map[string]string{userNumber: password, "2020000002": "another password"}, castest.WithClock(c.Now))
	t.Cleanup(srv.Close)
	client, err := cas.New(cas.Config{BaseURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return &env{cas: srv, clock: c, client: client, browser: newBrowser(t, srv.URL())}
}

// browser is a user agent with a cookie jar that follows redirects within
// the CAS server and stops at any other host: the service is not running,
// the test reads the ticket from the redirect instead.
type browser struct {
	t       *testing.T
	http    *http.Client
	casBase *url.URL
}

func newBrowser(t *testing.T, casBase string) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	base, err := url.Parse(casBase)
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, casBase: base}
	b.http = &http.Client{
		Jar:     jar,
		Timeout: 5 * time.Second,
		CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			if req.URL.Host != base.Host {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
	return b
}

// page is an answer as the browser saw it.
type page struct {
	status   int
	location string // of a redirect that was not followed
	body     string
	header   http.Header
}

func (b *browser) do(req *http.Request) page {
	b.t.Helper()
	p, err := b.tryDo(req)
	if err != nil {
		b.t.Fatal(err)
	}
	return p
}

// tryDo is do for goroutines other than the test's, which must not stop
// the test.
func (b *browser) tryDo(req *http.Request) (page, error) {
	resp, err := b.http.Do(req)
	if err != nil {
		return page{}, fmt.Errorf("%s %s: %w", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return page{}, err
	}
	return page{status: resp.StatusCode, location: resp.Header.Get("Location"), body: string(body), header: resp.Header}, nil
}

func (b *browser) get(u string) page {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.do(req)
}

func (b *browser) post(u string, form url.Values) page {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

// cookie returns the browser's ticket-granting cookie, or "".
func (b *browser) cookie() string {
	for _, c := range b.http.Jar.Cookies(b.casBase.JoinPath("login")) {
		if c.Name == "CASTGC" {
			return c.Value
		}
	}
	return ""
}

var (
	formRE  = regexp.MustCompile(`<form method="post" action="([^"]*)">`)
	inputRE = regexp.MustCompile(`<input type="(?:hidden|text)" name="([^"]+)" value="([^"]*)"`)
)

// loginForm reads the login form of p: where it posts and the values it
// carries (hidden fields and the user number field).
func loginForm(t *testing.T, p page) (action string, fields url.Values) {
	t.Helper()
	action, fields, err := parseForm(p)
	if err != nil {
		t.Fatal(err)
	}
	return action, fields
}

func parseForm(p page) (action string, fields url.Values, err error) {
	if p.status != http.StatusOK && p.status != http.StatusUnauthorized && p.status != http.StatusBadRequest {
		return "", nil, fmt.Errorf("login form: status %d, want a page: %s", p.status, p.body)
	}
	m := formRE.FindStringSubmatch(p.body)
	if m == nil {
		return "", nil, fmt.Errorf("no login form in:\n%s", p.body)
	}
	fields = url.Values{}
	for _, in := range inputRE.FindAllStringSubmatch(p.body, -1) {
		fields.Set(html.UnescapeString(in[1]), html.UnescapeString(in[2]))
	}
	if !strings.HasPrefix(fields.Get("lt"), "LT-") {
		return "", nil, fmt.Errorf("login form carries no login ticket: %v", fields)
	}
	return html.UnescapeString(m[1]), fields, nil
}

// submit fills the form of p with the credentials and posts it.
func (b *browser) submit(p page, user, pass string) page {
	b.t.Helper()
	req, err := b.submitRequest(p, user, pass)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.do(req)
}

func (b *browser) submitRequest(p page, user, pass string) (*http.Request, error) {
	action, fields, err := parseForm(p)
	if err != nil {
		return nil, err
	}
	fields.Set("username", user)
	fields.Set("password", pass)
	target := b.casBase.ResolveReference(&url.URL{Path: action}).String()
	req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(fields.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req, nil
}

// ticketFrom checks that p sends the browser back to svc with a ticket
// added to svc's own query, and returns the ticket.
func ticketFrom(t *testing.T, p page, svc string) string {
	t.Helper()
	if p.status != http.StatusFound {
		t.Fatalf("status %d, want 302 to the service: %s", p.status, p.body)
	}
	sep := "?"
	if strings.Contains(svc, "?") {
		sep = "&"
	}
	prefix := svc + sep + "ticket="
	if !strings.HasPrefix(p.location, prefix) {
		t.Fatalf("redirect to %q, want %q…", p.location, prefix)
	}
	ticket, err := url.QueryUnescape(strings.TrimPrefix(p.location, prefix))
	if err != nil || !strings.HasPrefix(ticket, "ST-") {
		t.Fatalf("redirect to %q carries no service ticket", p.location)
	}
	return ticket
}

// signIn signs the browser in with the password for svc and returns the
// ticket it brings back.
func (e *env) signIn(t *testing.T, svc string) string {
	t.Helper()
	form := e.browser.get(e.client.LoginURL(svc, false))
	return ticketFrom(t, e.browser.submit(form, userNumber, password), svc)
}

// ssoTicket gets a ticket for svc from the browser's single sign-on session.
func (e *env) ssoTicket(t *testing.T, svc string) string {
	t.Helper()
	return ticketFrom(t, e.browser.get(e.client.LoginURL(svc, false)), svc)
}
