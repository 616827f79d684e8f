package cas_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/cas"
)

func TestNewRefusesBadConfig(t *testing.T) {
	tests := []struct {
		base string
		want string // "" for a valid config
	}{
		{"https://cas.example.edu/cas", ""},
		{"https://cas.example.edu/cas/", ""},
		{"http://127.0.0.1:8443/cas", ""},
		{"", "cas: invalid config: BaseURL is empty"},
		{"cas.example.edu/cas", "cas: invalid config: BaseURL must be an absolute http or https URL"},
		{"ftp://cas.example.edu/cas", "cas: invalid config: BaseURL must be an absolute http or https URL"},
		{"https:///cas", "cas: invalid config: BaseURL must be an absolute http or https URL"},
		{"https://cas.example.edu/cas?x=1", "cas: invalid config: BaseURL must not have a query or fragment"},
		{"https://cas.example.edu/cas#top", "cas: invalid config: BaseURL must not have a query or fragment"},
		{"https://gw:pw@cas.example.edu/cas", "cas: invalid config: BaseURL must not have user info"},
	}
	for _, tt := range tests {
		t.Run(tt.base, func(t *testing.T) {
			c, err := cas.New(cas.Config{BaseURL: tt.base})
			if tt.want == "" {
				if err != nil || c == nil {
					t.Fatalf("New: %v, want a client", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("New: %v, want %q", err, tt.want)
			}
		})
	}
}

func TestLoginAndLogoutURL(t *testing.T) {
	// A service URL with its own query, a space, a slash and a fragment:
	// all of it must reach CAS as the one service parameter.
	const svc = "https://id.example.edu/cb?state=a b&next=/x?y=1#frag"
	const escaped = "https%3A%2F%2Fid.example.edu%2Fcb%3Fstate%3Da+b%26next%3D%2Fx%3Fy%3D1%23frag"
	tests := []struct {
		name string
		base string
		got  func(*cas.Client) string
		want string
	}{
		{"login", "https://cas.example.edu/cas",
			func(c *cas.Client) string { return c.LoginURL(svc, false) },
			"https://cas.example.edu/cas/login?service=" + escaped},
		{"login with renew", "https://cas.example.edu/cas/",
			func(c *cas.Client) string { return c.LoginURL(svc, true) },
			"https://cas.example.edu/cas/login?service=" + escaped + "&renew=true"},
		{"login without service", "https://cas.example.edu/cas",
			func(c *cas.Client) string { return c.LoginURL("", false) },
			"https://cas.example.edu/cas/login"},
		{"login without service with renew", "https://cas.example.edu/cas",
			func(c *cas.Client) string { return c.LoginURL("", true) },
			"https://cas.example.edu/cas/login?renew=true"},
		{"logout", "https://cas.example.edu/cas//",
			func(c *cas.Client) string { return c.LogoutURL(svc) },
			"https://cas.example.edu/cas/logout?service=" + escaped},
		{"logout without service", "https://cas.example.edu/cas",
			func(c *cas.Client) string { return c.LogoutURL("") },
			"https://cas.example.edu/cas/logout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := cas.New(cas.Config{BaseURL: tt.base})
			if err != nil {
				t.Fatal(err)
			}
			got := tt.got(c)
			if got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			u, err := url.Parse(got)
			if err != nil {
				t.Fatal(err)
			}
			if s := u.Query().Get("service"); strings.Contains(tt.want, "service=") && s != svc {
				t.Errorf("service parameter decodes to %q, want %q", s, svc)
			}
		})
	}
}

// TestSignIn walks the whole protocol the way the OIDC server and a browser
// do: form, password, ticket, validation; then single sign-on and renew.
func TestSignIn(t *testing.T) {
	e := newEnv(t)
	e.cas.Attributes(userNumber, map[string][]string{
		"mail":     {"zhang.san@example.edu"},
		"memberOf": {"students", "library-users"},
	})
	ctx := context.Background()

	form := e.browser.get(e.client.LoginURL(service, false))
	action, fields := loginForm(t, form)
	if action != "/cas/login" || fields.Get("service") != service {
		t.Fatalf("form posts to %q with service %q, want /cas/login with %q", action, fields.Get("service"), service)
	}
	answer := e.browser.submit(form, userNumber, password)
	first := ticketFrom(t, answer, service)
	cookie := http.Response{Header: answer.header}
	var tgc *http.Cookie
	for _, c := range cookie.Cookies() {
		if c.Name == "CASTGC" {
			tgc = c
		}
	}
	if tgc == nil || !tgc.HttpOnly || tgc.Path != "/cas" || tgc.Value == "" {
		t.Fatalf("ticket-granting cookie %+v, want CASTGC, HttpOnly, Path=/cas", tgc)
	}
	if got := e.cas.Logins(); got != 1 {
		t.Fatalf("Logins() = %d after a password, want 1", got)
	}

	p, err := e.client.Validate(ctx, first, service)
	if err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if p.User != userNumber {
		t.Errorf("User = %q, want %q", p.User, userNumber)
	}
	wantAttrs := map[string][]string{
		"mail":                                   {"zhang.san@example.edu"},
		"memberOf":                               {"students", "library-users"},
		"isFromNewLogin":                         {"true"},
		"longTermAuthenticationRequestTokenUsed": {"false"},
		"authenticationDate":                     {e.clock.Now().Format("2006-01-02T15:04:05.000Z07:00")},
	}
	checkAttributes(t, p.Attributes, wantAttrs)

	// Single sign-on: straight back with a new ticket, no password.
	second := e.ssoTicket(t, service)
	if second == first {
		t.Fatal("single sign-on issued the same ticket again")
	}
	if got := e.cas.Logins(); got != 1 {
		t.Fatalf("Logins() = %d after single sign-on, want still 1", got)
	}
	p, err = e.client.Validate(ctx, second, service)
	if err != nil {
		t.Fatalf("Validate the single sign-on ticket: %v", err)
	}
	if p.User != userNumber || !slices.Equal(p.Attributes["isFromNewLogin"], []string{"false"}) {
		t.Errorf("single sign-on principal %+v, want %s with isFromNewLogin false", p, userNumber)
	}

	// renew: the password again, even within the session.
	form = e.browser.get(e.client.LoginURL(service, true))
	if form.status != http.StatusOK || form.location != "" {
		t.Fatalf("renew: status %d to %q, want the form", form.status, form.location)
	}
	third := ticketFrom(t, e.browser.submit(form, userNumber, password), service)
	if got := e.cas.Logins(); got != 2 {
		t.Fatalf("Logins() = %d after renew, want 2", got)
	}
	if p, err = e.client.ValidateRenewed(ctx, third, service); err != nil || p.Attributes["isFromNewLogin"][0] != "true" {
		t.Fatalf("ValidateRenewed the renewed ticket: %+v, %v", p, err)
	}
	// A single sign-on ticket where a new sign-in was asked for (the browser dropped renew
	// from the login address): refused.
	sso := e.ssoTicket(t, service)
	var ce *cas.Error
	if _, err := e.client.ValidateRenewed(ctx, sso, service); !errors.As(err, &ce) {
		t.Fatalf("ValidateRenewed a single sign-on ticket: %v, want the server's refusal", err)
	}
}

func checkAttributes(t *testing.T, got, want map[string][]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("attributes %v, want %v", got, want)
	}
	for name, values := range want {
		if !slices.Equal(got[name], values) {
			t.Errorf("attribute %s = %q, want %q", name, got[name], values)
		}
	}
}

// TestValidateRefusedByServer checks the CAS server's refusals arrive as
// *cas.Error with the protocol's code, and never quote the ticket.
func TestValidateRefusedByServer(t *testing.T) {
	tests := []struct {
		name string
		// prepare returns the ticket and service to validate.
		prepare  func(t *testing.T, e *env) (ticket, svc string)
		wantCode string // "" for success
		// then runs after the validation under test, if set.
		then func(t *testing.T, e *env, ticket string)
	}{
		{
			name: "replayed ticket",
			prepare: func(t *testing.T, e *env) (string, string) {
				st := e.signIn(t, service)
				if _, err := e.client.Validate(context.Background(), st, service); err != nil {
					t.Fatalf("first validation: %v", err)
				}
				return st, service
			},
			wantCode: cas.CodeInvalidTicket,
		},
		{
			name: "ticket of another service",
			prepare: func(t *testing.T, e *env) (string, string) {
				return e.signIn(t, otherService), service
			},
			wantCode: cas.CodeInvalidService,
			then: func(t *testing.T, e *env, ticket string) {
				// The protocol has the server invalidate the ticket.
				_, err := e.client.Validate(context.Background(), ticket, otherService)
				checkCode(t, err, cas.CodeInvalidTicket, ticket)
			},
		},
		{
			name: "service differing only in its query",
			prepare: func(t *testing.T, e *env) (string, string) {
				return e.signIn(t, service), service + "&x=1"
			},
			wantCode: cas.CodeInvalidService,
		},
		{
			name: "ticket at the end of its 10 s",
			prepare: func(t *testing.T, e *env) (string, string) {
				st := e.signIn(t, service)
				e.clock.Advance(10 * time.Second)
				return st, service
			},
			wantCode: cas.CodeInvalidTicket,
		},
		{
			name: "ticket just inside its 10 s",
			prepare: func(t *testing.T, e *env) (string, string) {
				st := e.signIn(t, service)
				e.clock.Advance(10*time.Second - time.Millisecond)
				return st, service
			},
		},
		{
			name: "ticket never issued",
			prepare: func(t *testing.T, e *env) (string, string) {
				return "ST-NEVERISSUEDBYTHISSERVER0", service
			},
			wantCode: cas.CodeInvalidTicket,
		},
		{
			name: "ticket issued before logout, validated after",
			prepare: func(t *testing.T, e *env) (string, string) {
				st := e.signIn(t, service)
				e.browser.get(e.client.LogoutURL(""))
				return st, service
			},
			// Logout ends the session, not tickets already handed out: the
			// service validates what the browser brought, once.
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			ticket, svc := tt.prepare(t, e)
			p, err := e.client.Validate(context.Background(), ticket, svc)
			if tt.wantCode == "" {
				if err != nil || p.User != userNumber {
					t.Fatalf("Validate: %+v, %v; want %s", p, err, userNumber)
				}
			} else {
				checkCode(t, err, tt.wantCode, ticket)
			}
			if tt.then != nil {
				tt.then(t, e, ticket)
			}
		})
	}
}

func checkCode(t *testing.T, err error, code, ticket string) {
	t.Helper()
	var ce *cas.Error
	if !errors.As(err, &ce) || ce.Code != code {
		t.Fatalf("error %v, want a *cas.Error with code %s", err, code)
	}
	if !strings.HasPrefix(err.Error(), "cas: "+code+": ") || ce.Message == "" {
		t.Errorf("error text %q, want \"cas: %s: <the server's message>\"", err, code)
	}
	if strings.Contains(err.Error(), ticket) {
		t.Errorf("error %q quotes the ticket", err)
	}
}

// TestValidateRefusedLocally checks that what cannot be a service ticket is
// refused before any request.
func TestValidateRefusedLocally(t *testing.T) {
	tests := []struct {
		name, ticket, svc string
		wantIs            error
		want              string
	}{
		{"missing ticket", "", service, cas.ErrMalformedTicket, "cas: not a service ticket: empty"},
		{"proxy ticket", "PT-1-abc", service, cas.ErrMalformedTicket, `cas: not a service ticket: it does not start with "ST-"`},
		{"lower case prefix", "st-1-abc", service, cas.ErrMalformedTicket, `cas: not a service ticket: it does not start with "ST-"`},
		{"junk", "<script>", service, cas.ErrMalformedTicket, `cas: not a service ticket: it does not start with "ST-"`},
		{"too long", "ST-" + strings.Repeat("a", 2046), service, cas.ErrMalformedTicket, "cas: not a service ticket: longer than 2048 bytes"},
		{"missing service", "ST-1-abc", "", nil, "cas: validate: empty service"},
	}
	calls := 0
	srv := newCanned(t, func(w http.ResponseWriter, r *http.Request) { calls++ })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := srv.client.Validate(context.Background(), tt.ticket, tt.svc)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Validate: %v, want %q", err, tt.want)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("errors.Is(%v, %v) is false", err, tt.wantIs)
			}
		})
	}
	if calls != 0 {
		t.Errorf("%d requests reached the server, want none", calls)
	}
}

// TestBrowserFlows covers what the browser sees at /login and /logout.
func TestBrowserFlows(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"wrong password: the form again, no ticket, no session", func(t *testing.T, e *env) {
			p := e.browser.submit(e.browser.get(e.client.LoginURL(service, false)), userNumber, "wrong")
			refused(t, e, p, http.StatusUnauthorized, "wrong")
			// The form still works: the right password then succeeds.
			ticketFrom(t, e.browser.submit(p, userNumber, password), service)
		}},
		{"unknown user", func(t *testing.T, e *env) {
			p := e.browser.submit(e.browser.get(e.client.LoginURL(service, false)), "1999999999", password)
			refused(t, e, p, http.StatusUnauthorized, "wrong")
		}},
		{"empty password", func(t *testing.T, e *env) {
			p := e.browser.submit(e.browser.get(e.client.LoginURL(service, false)), userNumber, "")
			refused(t, e, p, http.StatusUnauthorized, "wrong")
		}},
		{"replayed login form", func(t *testing.T, e *env) {
			form := e.browser.get(e.client.LoginURL(service, false))
			refused(t, e, e.browser.submit(form, userNumber, "wrong"), http.StatusUnauthorized, "wrong")
			// The same login ticket a second time, now with the password.
			refused(t, e, e.browser.submit(form, userNumber, password), http.StatusBadRequest, "expired")
		}},
		{"login form without its login ticket", func(t *testing.T, e *env) {
			p := e.browser.post(e.cas.URL()+"/login", url.Values{
				"username": {userNumber}, "password": {password}, "service": {service},
			})
			refused(t, e, p, http.StatusBadRequest, "expired")
		}},
		{"gateway without a session: back to the service without a ticket", func(t *testing.T, e *env) {
			p := e.browser.get(e.client.LoginURL(service, false) + "&gateway=true")
			if p.status != http.StatusFound || p.location != service {
				t.Fatalf("status %d to %q, want 302 to exactly %q", p.status, p.location, service)
			}
		}},
		{"gateway with a session: a ticket", func(t *testing.T, e *env) {
			e.signIn(t, otherService)
			st := ticketFrom(t, e.browser.get(e.client.LoginURL(service, false)+"&gateway=true"), service)
			if _, err := e.client.Validate(context.Background(), st, service); err != nil {
				t.Fatal(err)
			}
		}},
		{"gateway is ignored with renew", func(t *testing.T, e *env) {
			e.signIn(t, service)
			p := e.browser.get(e.client.LoginURL(service, true) + "&gateway=true")
			loginForm(t, p)
		}},
		{"logout ends single sign-on", func(t *testing.T, e *env) {
			e.signIn(t, service)
			tgc := e.browser.cookie()
			p := e.browser.get(e.client.LogoutURL(service))
			if p.status != http.StatusFound || p.location != service {
				t.Fatalf("logout: status %d to %q, want 302 to %q", p.status, p.location, service)
			}
			if c := e.browser.cookie(); c != "" {
				t.Errorf("CASTGC %q still in the browser after logout", c)
			}
			loginForm(t, e.browser.get(e.client.LoginURL(service, false)))
			// The old cookie is forgotten by the server too, not only by
			// the browser.
			other := newBrowser(t, e.cas.URL())
			req, _ := http.NewRequest(http.MethodGet, e.client.LoginURL(service, false), nil)
			req.AddCookie(&http.Cookie{Name: "CASTGC", Value: tgc})
			loginForm(t, other.do(req))
			if got := e.cas.Logins(); got != 1 {
				t.Errorf("Logins() = %d, want 1", got)
			}
		}},
		{"logout without service shows a page", func(t *testing.T, e *env) {
			e.signIn(t, service)
			p := e.browser.get(e.client.LogoutURL(""))
			if p.status != http.StatusOK || !strings.Contains(p.body, "signed out") {
				t.Fatalf("status %d: %s", p.status, p.body)
			}
			loginForm(t, e.browser.get(e.client.LoginURL(service, false)))
		}},
		{"login without service opens a session and says so", func(t *testing.T, e *env) {
			p := e.browser.submit(e.browser.get(e.client.LoginURL("", false)), userNumber, password)
			if p.status != http.StatusOK || !strings.Contains(p.body, "signed in") || e.browser.cookie() == "" {
				t.Fatalf("status %d, cookie %q: %s", p.status, e.browser.cookie(), p.body)
			}
			// Now a service gets a ticket at once.
			e.ssoTicket(t, service)
			p = e.browser.get(e.client.LoginURL("", false))
			if p.status != http.StatusOK || !strings.Contains(p.body, "signed in to the campus single sign-on as "+userNumber) {
				t.Fatalf("status %d: %s", p.status, p.body)
			}
		}},
		{"a service that is not an http URL is refused", func(t *testing.T, e *env) {
			p := e.browser.get(e.client.LoginURL("javascript:alert(1)", false))
			if p.status != http.StatusBadRequest || p.location != "" {
				t.Fatalf("status %d to %q, want 400", p.status, p.location)
			}
		}},
		{"a service without a query gets ?ticket=", func(t *testing.T, e *env) {
			st := e.signIn(t, otherService)
			if _, err := e.client.Validate(context.Background(), st, otherService); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, newEnv(t))
		})
	}
}

// refused checks that p shows the login form again with an error and
// neither a ticket nor a session.
func refused(t *testing.T, e *env, p page, status int, problem string) {
	t.Helper()
	if p.status != status || p.location != "" {
		t.Fatalf("status %d to %q, want %d and the form", p.status, p.location, status)
	}
	loginForm(t, p)
	if !strings.Contains(p.body, `role="alert"`) || !strings.Contains(p.body, problem) {
		t.Errorf("no error message with %q in:\n%s", problem, p.body)
	}
	if strings.Contains(p.body, "ST-") {
		t.Errorf("the page carries a service ticket:\n%s", p.body)
	}
	if c := e.browser.cookie(); c != "" {
		t.Errorf("CASTGC %q set by a refused login", c)
	}
	if got := e.cas.Logins(); got != 0 {
		t.Errorf("Logins() = %d, want 0", got)
	}
}

// TestConcurrentSignIns runs many browsers against one server at once; run
// with -race it shows the server and client share nothing unguarded.
func TestConcurrentSignIns(t *testing.T) {
	e := newEnv(t)
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		b := newBrowser(t, e.cas.URL())
		svc := fmt.Sprintf("https://app%d.example.edu/cb", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := signInAndValidate(e.client, b, svc); err != nil {
				errs <- fmt.Errorf("browser %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := e.cas.Logins(); got != n {
		t.Errorf("Logins() = %d, want %d", got, n)
	}
}

// signInAndValidate is the whole flow without stopping the test, for use
// off the test's goroutine.
func signInAndValidate(c *cas.Client, b *browser, svc string) error {
	req, err := http.NewRequest(http.MethodGet, c.LoginURL(svc, false), nil)
	if err != nil {
		return err
	}
	form, err := b.tryDo(req)
	if err != nil {
		return err
	}
	if req, err = b.submitRequest(form, userNumber, password); err != nil {
		return err
	}
	p, err := b.tryDo(req)
	if err != nil {
		return err
	}
	ticket, ok := strings.CutPrefix(p.location, svc+"?ticket=")
	if p.status != http.StatusFound || !ok {
		return fmt.Errorf("status %d to %q, want 302 to %s?ticket=…", p.status, p.location, svc)
	}
	pr, err := c.Validate(context.Background(), ticket, svc)
	if err != nil {
		return err
	}
	if pr.User != userNumber {
		return fmt.Errorf("user %q, want %q", pr.User, userNumber)
	}
	return nil
}
