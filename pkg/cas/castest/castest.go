// Package castest runs a CAS 3.0 server inside a test process, over real
// HTTP on a port the OS chose (net/http/httptest), so that sign-in through
// the campus single sign-on can be tested end to end with a browser-like
// client: the login form, the ticket-granting cookie and single sign-on,
// renew and gateway, service ticket validation with attributes, and logout.
//
// It follows the CAS protocol 3.0 specification for the parts a service
// uses: /login (as credential requestor and acceptor), /logout and
// /p3/serviceValidate. Proxy tickets, SAML, the JSON format and single
// logout callbacks are not offered. Every service URL is accepted ("open
// mode") as long as it is an absolute http or https URL.
package castest

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/xml"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
)

const (
	// DefaultTicketLifetime is how long a service ticket stays valid when
	// WithTicketLifetime is not given: long enough for a browser round trip,
	// short enough that a leaked ticket is soon worthless.
	DefaultTicketLifetime = 10 * time.Second

	// cookieName is the ticket-granting cookie's name in Apereo CAS.
	cookieName = "CASTGC"
	// cookiePath keeps the cookie to the CAS paths (protocol 3.6.1).
	cookiePath = "/cas"
	// loginTicketLifetime bounds how long a login form may be left open.
	loginTicketLifetime = 10 * time.Minute
	// maxFormBytes bounds a posted login form.
	maxFormBytes = 64 << 10
	// casNamespace is the XML namespace of service responses.
	casNamespace = "http://www.yale.edu/tp/cas"
)

// Option changes a Server before it starts.
type Option func(*Server)

// WithClock makes the server read the time from now instead of time.Now,
// so that a test can let tickets expire without waiting.
func WithClock(now func() time.Time) Option {
	return func(s *Server) { s.now = now }
}

// WithTicketLifetime sets how long a service ticket may wait for its
// validation. Default: DefaultTicketLifetime. A value of zero or less
// keeps the default.
func WithTicketLifetime(d time.Duration) Option {
	return func(s *Server) {
		if d > 0 {
			s.ticketLifetime = d
		}
	}
}

// Server is a CAS 3.0 server for tests. It is safe for concurrent use;
// Close stops it.
type Server struct {
	hs             *httptest.Server
	users          map[string]string // user number -> password; read-only after New
	now            func() time.Time
	ticketLifetime time.Duration

	mu           sync.Mutex
	attrs        map[string]map[string][]string // user -> released attributes
	sessions     map[string]session             // ticket-granting ticket -> session
	tickets      map[string]serviceTicket       // service ticket -> its grant
	loginTickets map[string]time.Time           // login ticket -> expiry
	logins       int
}

// session is one single sign-on session, keyed by its ticket-granting
// ticket, the value of the CASTGC cookie.
type session struct {
	user     string
	authTime time.Time
}

// serviceTicket is what a service ticket stands for until it is validated.
type serviceTicket struct {
	user         string
	service      string
	authTime     time.Time
	expires      time.Time
	fromNewLogin bool // issued right after the password was checked, not from SSO
}

// New starts a CAS server that knows users (campus user number -> password)
// and returns it. Its base URL is URL(); stop it with Close.
func New(users map[string]string, opts ...Option) *Server {
	s := &Server{
		users:          maps.Clone(users),
		now:            time.Now,
		ticketLifetime: DefaultTicketLifetime,
		attrs:          make(map[string]map[string][]string),
		sessions:       make(map[string]session),
		tickets:        make(map[string]serviceTicket),
		loginTickets:   make(map[string]time.Time),
	}
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+cookiePath+"/login", s.loginForm)
	mux.HandleFunc("POST "+cookiePath+"/login", s.loginSubmit)
	mux.HandleFunc("GET "+cookiePath+"/logout", s.logout)
	mux.HandleFunc("GET "+cookiePath+"/p3/serviceValidate", s.serviceValidate)
	s.hs = httptest.NewServer(mux)
	return s
}

// URL returns the CAS base URL, such as http://127.0.0.1:40123/cas; the
// protocol's paths (/login, /logout, /p3/serviceValidate) are under it.
func (s *Server) URL() string { return s.hs.URL + cookiePath }

// Close stops the server and waits for its requests to finish.
func (s *Server) Close() { s.hs.Close() }

// Attributes sets the attributes released for user on top of the ones
// every validation carries (authenticationDate, isFromNewLogin,
// longTermAuthenticationRequestTokenUsed, which cannot be overridden). It
// replaces what an earlier call set for user. Each name must be a plain
// XML name (letters, digits, '_', '-', '.', not starting with a digit, '-'
// or '.'); another one is a mistake in the test and panics.
func (s *Server) Attributes(user string, attrs map[string][]string) {
	c := make(map[string][]string, len(attrs))
	for name, values := range attrs {
		if !isXMLName(name) {
			panic(fmt.Sprintf("castest: attribute name %q is not a plain XML name", name))
		}
		c[name] = slices.Clone(values)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attrs[user] = c
}

// Logins returns how many times a password was checked successfully. Single
// sign-on does not check a password, so a test can tell a reused session
// from a new login.
func (s *Server) Logins() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logins
}

// loginForm is /login as credential requestor (protocol 2.1).
func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	service := q.Get("service")
	if service != "" && !allowedService(service) {
		render(w, http.StatusBadRequest, errorPage, "This service is not allowed to use the single sign-on.")
		return
	}
	renew := isSet(q, "renew")
	// The protocol recommends ignoring gateway when renew is set.
	gateway := isSet(q, "gateway") && !renew

	s.mu.Lock()
	sess, ok := s.sessionLocked(r)
	var ticket string
	if ok && !renew && service != "" {
		ticket = s.issueLocked(sess, service, false)
	}
	s.mu.Unlock()

	switch {
	case ok && !renew && service != "":
		redirect(w, r, withTicket(service, ticket))
	case ok && !renew:
		render(w, http.StatusOK, signedInPage, sess.user)
	case gateway && service != "":
		// No session and no way to get one without asking: back to the
		// service without a ticket, which tells it the user is not signed in.
		redirect(w, r, service)
	default:
		s.showForm(w, http.StatusOK, service, "", "")
	}
}

// loginSubmit is /login as credential acceptor (protocol 2.2).
func (s *Server) loginSubmit(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		render(w, http.StatusBadRequest, errorPage, "The sign-in form could not be read.")
		return
	}
	username := r.PostForm.Get("username")
	password := r.PostForm.Get("password")
	service := r.PostForm.Get("service")
	if service != "" && !allowedService(service) {
		render(w, http.StatusBadRequest, errorPage, "This service is not allowed to use the single sign-on.")
		return
	}

	s.mu.Lock()
	ltValid := s.useLoginTicketLocked(r.PostForm.Get("lt"))
	var tgt, ticket string
	passwordOK := ltValid && s.checkPassword(username, password)
	if passwordOK {
		s.logins++
		// A new login replaces the browser's previous session, if any.
		if old, err := r.Cookie(cookieName); err == nil {
			delete(s.sessions, old.Value)
		}
		tgt = "TGT-" + rand.Text()
		sess := session{user: username, authTime: s.now()}
		s.sessions[tgt] = sess
		if service != "" {
			ticket = s.issueLocked(sess, service, true)
		}
	}
	s.mu.Unlock()

	switch {
	case !ltValid:
		// A replayed or stale form: the login ticket exists to refuse it.
		s.showForm(w, http.StatusBadRequest, service, username, "The sign-in form has expired. Please try again.")
		return
	case !passwordOK:
		s.showForm(w, http.StatusUnauthorized, service, username, "The user number or the password is wrong.")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName,
		Value:    tgt,
		Path:     cookiePath,
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteLaxMode,
	})
	if service == "" {
		render(w, http.StatusOK, signedInPage, username)
		return
	}
	redirect(w, r, withTicket(service, ticket))
}

// logout is /logout (protocol 2.3).
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(cookieName); err == nil {
		s.mu.Lock()
		delete(s.sessions, c.Value)
		s.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName,
		Value:    "",
		Path:     cookiePath,
		MaxAge:   -1,
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteLaxMode,
	})
	if service := r.URL.Query().Get("service"); allowedService(service) {
		redirect(w, r, service)
		return
	}
	render(w, http.StatusOK, signedOutPage, nil)
}

// serviceValidate is /p3/serviceValidate (protocol 2.5, with the CAS 3.0
// attributes of 2.5.5).
func (s *Server) serviceValidate(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	service, ticket := q.Get("service"), q.Get("ticket")
	if service == "" || ticket == "" {
		writeFailure(w, "INVALID_REQUEST", "Both the service and the ticket parameters are required")
		return
	}
	if f := q.Get("format"); f != "" && !strings.EqualFold(f, "XML") {
		writeFailure(w, "INVALID_REQUEST", "Only the XML format is supported")
		return
	}

	s.mu.Lock()
	st, known := s.tickets[ticket]
	// Every validation attempt uses the ticket up, whatever its outcome
	// (protocol 3.1.1); that includes INVALID_SERVICE (2.5.3).
	delete(s.tickets, ticket)
	now := s.now()
	// Safe to read after Unlock: Attributes replaces a user's map, it
	// never changes one in place.
	attrs := s.attrs[st.user]
	s.mu.Unlock()

	switch {
	case !known:
		writeFailure(w, "INVALID_TICKET", "Ticket "+ticket+" not recognized")
	case !now.Before(st.expires):
		writeFailure(w, "INVALID_TICKET", "Ticket "+ticket+" has expired")
	case st.service != service:
		writeFailure(w, "INVALID_SERVICE", "Ticket "+ticket+" was not issued for service "+service)
	case isSet(q, "renew") && !st.fromNewLogin:
		writeFailure(w, "INVALID_TICKET", "Ticket "+ticket+" was issued from single sign-on but renew was requested")
	case q.Get("pgtUrl") != "":
		writeFailure(w, "UNAUTHORIZED_SERVICE_PROXY", "This server does not issue proxy-granting tickets")
	default:
		writeSuccess(w, st, attrs)
	}
}

// sessionLocked returns the session the request's ticket-granting cookie
// names, if it is still open.
func (s *Server) sessionLocked(r *http.Request) (session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false
	}
	sess, ok := s.sessions[c.Value]
	return sess, ok
}

// issueLocked creates a service ticket for service within sess.
func (s *Server) issueLocked(sess session, service string, fromNewLogin bool) string {
	now := s.now()
	// Expired tickets are dropped here so that a long test run does not
	// accumulate them.
	for t, st := range s.tickets {
		if !now.Before(st.expires) {
			delete(s.tickets, t)
		}
	}
	t := "ST-" + rand.Text()
	s.tickets[t] = serviceTicket{
		user:         sess.user,
		service:      service,
		authTime:     sess.authTime,
		expires:      now.Add(s.ticketLifetime),
		fromNewLogin: fromNewLogin,
	}
	return t
}

// newLoginTicket creates the one-use token that the login form carries.
func (s *Server) newLoginTicket() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for lt, exp := range s.loginTickets {
		if !now.Before(exp) {
			delete(s.loginTickets, lt)
		}
	}
	lt := "LT-" + rand.Text()
	s.loginTickets[lt] = now.Add(loginTicketLifetime)
	return lt
}

// useLoginTicketLocked reports whether lt was issued and is still valid,
// and uses it up either way (protocol 3.5.1).
func (s *Server) useLoginTicketLocked(lt string) bool {
	exp, ok := s.loginTickets[lt]
	delete(s.loginTickets, lt)
	return ok && s.now().Before(exp)
}

func (s *Server) checkPassword(username, password string) bool {
	want, ok := s.users[username]
	// An empty password would otherwise match an empty entry.
	if !ok || password == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(want), []byte(password)) == 1
}

func (s *Server) showForm(w http.ResponseWriter, status int, service, username, problem string) {
	render(w, status, loginPage, loginData{
		Action:   cookiePath + "/login",
		Service:  service,
		Username: username,
		LT:       s.newLoginTicket(),
		Error:    problem,
	})
}

// isSet reports whether a flag parameter such as renew or gateway is set:
// present with any value but "false" (the protocol recommends "true").
func isSet(q url.Values, name string) bool {
	v, ok := q[name]
	return ok && (len(v) == 0 || v[0] != "false")
}

// allowedService accepts any absolute http or https URL, so that the
// server never redirects a browser to another kind of address.
func allowedService(service string) bool {
	u, err := url.Parse(service)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// withTicket appends ticket to service's query, keeping the query the
// service already had, in its own order and encoding.
func withTicket(service, ticket string) string {
	u, err := url.Parse(service)
	if err != nil {
		// allowedService has parsed it before.
		panic("castest: unparsable service " + service)
	}
	p := "ticket=" + url.QueryEscape(ticket)
	if u.RawQuery == "" {
		u.RawQuery = p
	} else {
		u.RawQuery += "&" + p
	}
	u.ForceQuery = false
	return u.String()
}

// redirect sends the browser on with 302 Found, the redirect every CAS
// client expects.
func redirect(w http.ResponseWriter, r *http.Request, target string) {
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, target, http.StatusFound)
}

func writeFailure(w http.ResponseWriter, code, message string) {
	var b bytes.Buffer
	b.WriteString(`<cas:serviceResponse xmlns:cas="` + casNamespace + `">` + "\n")
	b.WriteString(`  <cas:authenticationFailure code="` + code + `">` + "\n    ")
	escape(&b, message)
	b.WriteString("\n  </cas:authenticationFailure>\n</cas:serviceResponse>\n")
	writeXML(w, b.Bytes())
}

func writeSuccess(w http.ResponseWriter, st serviceTicket, extra map[string][]string) {
	var b bytes.Buffer
	b.WriteString(`<cas:serviceResponse xmlns:cas="` + casNamespace + `">` + "\n")
	b.WriteString("  <cas:authenticationSuccess>\n    <cas:user>")
	escape(&b, st.user)
	b.WriteString("</cas:user>\n    <cas:attributes>\n")
	standard := []struct{ name, value string }{
		{"authenticationDate", st.authTime.UTC().Format("2006-01-02T15:04:05.000Z07:00")},
		{"longTermAuthenticationRequestTokenUsed", "false"},
		{"isFromNewLogin", fmt.Sprint(st.fromNewLogin)},
	}
	reserved := make(map[string]bool, len(standard))
	for _, a := range standard {
		reserved[a.name] = true
		writeAttribute(&b, a.name, a.value)
	}
	for _, name := range slices.Sorted(maps.Keys(extra)) {
		if reserved[name] {
			continue
		}
		for _, v := range extra[name] {
			writeAttribute(&b, name, v)
		}
	}
	b.WriteString("    </cas:attributes>\n  </cas:authenticationSuccess>\n</cas:serviceResponse>\n")
	writeXML(w, b.Bytes())
}

func writeAttribute(b *bytes.Buffer, name, value string) {
	b.WriteString("      <cas:" + name + ">")
	escape(b, value)
	b.WriteString("</cas:" + name + ">\n")
}

func escape(b *bytes.Buffer, s string) {
	// Writing to a bytes.Buffer cannot fail.
	_ = xml.EscapeText(b, []byte(s))
}

func writeXML(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/xml; charset=UTF-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// isXMLName accepts the names that can follow "cas:" in an element name
// without further checks.
func isXMLName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		switch {
		case unicode.IsLetter(r) || r == '_':
		case i > 0 && (unicode.IsDigit(r) || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return true
}
