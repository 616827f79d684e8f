package castest_test

import (
	"encoding/xml"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/cas/castest"
	"github.com/campus-it/ucs/pkg/clocktest"
)

// These tests speak raw HTTP and XML to the server, independently of the
// cas client, for what the client does not exercise.

const (
	user = "2020000001"
	pass = "pa&ss<word>"
	svc  = "https://app.example.edu/cb?x=1"
)

// response is a service response read without namespace checks, keeping
// every attribute element in order.
type response struct {
	Success *struct {
		User  string `xml:"user"`
		Attrs struct {
			Items []struct {
				XMLName xml.Name
				Value   string `xml:",chardata"`
			} `xml:",any"`
		} `xml:"attributes"`
	} `xml:"authenticationSuccess"`
	Failure *struct {
		Code    string `xml:"code,attr"`
		Message string `xml:",chardata"`
	} `xml:"authenticationFailure"`
}

func validate(t *testing.T, s *castest.Server, query url.Values) response {
	t.Helper()
	resp, err := http.Get(s.URL() + "/p3/serviceValidate?" + query.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/xml") {
		t.Fatalf("status %d, type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !strings.HasPrefix(string(body), `<cas:serviceResponse xmlns:cas="http://www.yale.edu/tp/cas">`) {
		t.Fatalf("not a CAS service response:\n%s", body)
	}
	var r response
	if err := xml.Unmarshal(body, &r); err != nil {
		t.Fatalf("%v in:\n%s", err, body)
	}
	return r
}

var ltRE = regexp.MustCompile(`name="lt" value="([^"]*)"`)

// login gets a ticket for service with client (a new browser if nil): at
// once from its session, else through the form. It returns the URL the
// browser was sent back to.
func login(t *testing.T, s *castest.Server, client *http.Client, service string) string {
	t.Helper()
	if client == nil {
		client = newClient(t)
	}
	resp, err := client.Get(s.URL() + "/login?" + url.Values{"service": {service}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusFound {
		return resp.Header.Get("Location")
	}
	m := ltRE.FindSubmatch(body)
	if m == nil {
		t.Fatalf("no login ticket in:\n%s", body)
	}
	resp, err = client.PostForm(s.URL()+"/login", url.Values{
		"username": {user}, "password": {pass}, "lt": {html.UnescapeString(string(m[1]))}, "service": {service},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("login: status %d", resp.StatusCode)
	}
	return resp.Header.Get("Location")
}

func newClient(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{
		Jar:           jar,
		Timeout:       5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func ticketOf(t *testing.T, location string) string {
	t.Helper()
	u, err := url.Parse(location)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("ticket")
}

func TestServiceValidate(t *testing.T) {
	tests := []struct {
		name string
		// query builds the validation request from a ticket that was
		// issued for svc after a password login.
		query    func(ticket string) url.Values
		wantCode string // "" for success
	}{
		{"success", func(st string) url.Values { return url.Values{"service": {svc}, "ticket": {st}} }, ""},
		{"renew with a ticket from a password login", func(st string) url.Values {
			return url.Values{"service": {svc}, "ticket": {st}, "renew": {"true"}}
		}, ""},
		{"format XML", func(st string) url.Values { return url.Values{"service": {svc}, "ticket": {st}, "format": {"xml"}} }, ""},
		{"missing service", func(st string) url.Values { return url.Values{"ticket": {st}} }, "INVALID_REQUEST"},
		{"missing ticket", func(string) url.Values { return url.Values{"service": {svc}} }, "INVALID_REQUEST"},
		{"format JSON", func(st string) url.Values { return url.Values{"service": {svc}, "ticket": {st}, "format": {"JSON"}} }, "INVALID_REQUEST"},
		{"unknown ticket", func(string) url.Values { return url.Values{"service": {svc}, "ticket": {"ST-<&>"}} }, "INVALID_TICKET"},
		{"other service", func(st string) url.Values { return url.Values{"service": {svc + "&y=2"}, "ticket": {st}} }, "INVALID_SERVICE"},
		{"proxy callback", func(st string) url.Values {
			return url.Values{"service": {svc}, "ticket": {st}, "pgtUrl": {"https://app.example.edu/pgt"}}
		}, "UNAUTHORIZED_SERVICE_PROXY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := castest.New(map[string]string{user: pass})
			defer s.Close()
			s.Attributes(user, map[string][]string{
				"displayName":    {`Zhang "San" <zs> & co`},
				"isFromNewLogin": {"forged"},
			})
			r := validate(t, s, tt.query(ticketOf(t, login(t, s, nil, svc))))
			if tt.wantCode != "" {
				if r.Failure == nil || r.Failure.Code != tt.wantCode || strings.TrimSpace(r.Failure.Message) == "" || r.Success != nil {
					t.Fatalf("answer %+v, want failure %s with a message", r, tt.wantCode)
				}
				return
			}
			if r.Failure != nil || r.Success == nil || r.Success.User != user {
				t.Fatalf("answer %+v, want success for %s", r, user)
			}
			got := map[string][]string{}
			for _, it := range r.Success.Attrs.Items {
				got[it.XMLName.Local] = append(got[it.XMLName.Local], it.Value)
			}
			if v := got["displayName"]; len(v) != 1 || v[0] != `Zhang "San" <zs> & co` {
				t.Errorf("displayName %q", v)
			}
			if v := got["isFromNewLogin"]; len(v) != 1 || v[0] != "true" {
				t.Errorf("isFromNewLogin %q, want the server's own [true]", v)
			}
			if _, err := time.Parse(time.RFC3339, got["authenticationDate"][0]); err != nil {
				t.Errorf("authenticationDate: %v", err)
			}
		})
	}
}

func TestRenewValidationRefusesSingleSignOnTickets(t *testing.T) {
	s := castest.New(map[string]string{user: pass})
	defer s.Close()
	c := newClient(t)
	login(t, s, c, svc)
	st := ticketOf(t, login(t, s, c, svc)) // from the session
	r := validate(t, s, url.Values{"service": {svc}, "ticket": {st}, "renew": {"true"}})
	if r.Failure == nil || r.Failure.Code != "INVALID_TICKET" {
		t.Fatalf("answer %+v, want INVALID_TICKET", r)
	}
	if s.Logins() != 1 {
		t.Errorf("Logins() = %d, want 1", s.Logins())
	}
}

func TestTicketLifetime(t *testing.T) {
	c := clocktest.New(time.Date(2025, 9, 1, 8, 0, 0, 0, time.UTC))
	s := castest.New(map[string]string{user: pass}, castest.WithClock(c.Now), castest.WithTicketLifetime(2*time.Second))
	defer s.Close()
	st := ticketOf(t, login(t, s, nil, svc))
	c.Advance(2 * time.Second)
	r := validate(t, s, url.Values{"service": {svc}, "ticket": {st}})
	if r.Failure == nil || r.Failure.Code != "INVALID_TICKET" || !strings.Contains(r.Failure.Message, "expired") {
		t.Fatalf("answer %+v, want INVALID_TICKET for an expired ticket", r)
	}
}

func TestTicketIsAppendedToTheService(t *testing.T) {
	tests := []struct{ service, want string }{
		{"https://app.example.edu/cb", "https://app.example.edu/cb?ticket="},
		{"https://app.example.edu/cb?", "https://app.example.edu/cb?ticket="},
		{"https://app.example.edu/cb?b=2&a=1", "https://app.example.edu/cb?b=2&a=1&ticket="},
		{"https://app.example.edu/cb?q=a%20b#section", "https://app.example.edu/cb?q=a%20b&ticket="},
	}
	s := castest.New(map[string]string{user: pass})
	defer s.Close()
	for _, tt := range tests {
		t.Run(tt.service, func(t *testing.T) {
			loc := login(t, s, nil, tt.service)
			if !strings.HasPrefix(loc, tt.want+"ST-") {
				t.Fatalf("sent back to %q, want %qST-…", loc, tt.want)
			}
			if strings.Contains(tt.service, "#") && !strings.HasSuffix(loc, "#section") {
				t.Errorf("fragment lost: %q", loc)
			}
		})
	}
}

func TestMethodsAndAttributeNames(t *testing.T) {
	s := castest.New(nil)
	defer s.Close()
	resp, err := http.Post(s.URL()+"/p3/serviceValidate", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /p3/serviceValidate: status %d, want 405", resp.StatusCode)
	}
	for _, name := range []string{"", "1st", "a b", "cas:user", "x>"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Attributes accepted the name %q", name)
				}
			}()
			s.Attributes(user, map[string][]string{name: {"v"}})
		}()
	}
}
