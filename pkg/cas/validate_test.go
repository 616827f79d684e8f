package cas_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/cas"
)

// canned is a stand-in CAS server that answers validation requests with
// whatever a test wants, to show how the client takes answers a real
// server would not give.
type canned struct {
	client *cas.Client
	server *httptest.Server
}

func newCanned(t *testing.T, h http.HandlerFunc) *canned {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := cas.New(cas.Config{BaseURL: srv.URL + "/cas"})
	if err != nil {
		t.Fatal(err)
	}
	return &canned{client: c, server: srv}
}

const cannedTicket = "ST-1-CANNEDTICKET-cas01.example.edu"

// answer returns a handler that checks the request is a CAS 3.0 validation
// of cannedTicket for service, then answers status and body.
func answer(t *testing.T, status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.Method != http.MethodGet || r.URL.Path != "/cas/p3/serviceValidate" ||
			q.Get("service") != service || q.Get("ticket") != cannedTicket {
			t.Errorf("request %s %s, want GET /cas/p3/serviceValidate for the ticket and service", r.Method, r.URL)
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

func TestValidateReadsAnswers(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		wantUser  string
		wantAttrs map[string][]string
	}{
		{
			name: "the specification's example, trimmed user",
			body: `<cas:serviceResponse xmlns:cas="http://www.yale.edu/tp/cas">
 <cas:authenticationSuccess>
  <cas:user>
     2020000001
  </cas:user>
  <cas:attributes>
   <cas:firstname>John</cas:firstname>
   <cas:affiliation>staff</cas:affiliation>
   <cas:affiliation>faculty</cas:affiliation>
   <cas:memberOf>
      cn=students,ou=groups
   </cas:memberOf>
  </cas:attributes>
  <cas:proxyGrantingTicket>PGTIOU-84678-8a9d</cas:proxyGrantingTicket>
 </cas:authenticationSuccess>
</cas:serviceResponse>`,
			wantUser: "2020000001",
			wantAttrs: map[string][]string{
				"firstname":   {"John"},
				"affiliation": {"staff", "faculty"},
				"memberOf":    {"cn=students,ou=groups"},
			},
		},
		{
			name:      "no attributes",
			body:      `<cas:serviceResponse xmlns:cas="http://www.yale.edu/tp/cas"><cas:authenticationSuccess><cas:user>u1</cas:user></cas:authenticationSuccess></cas:serviceResponse>`,
			wantUser:  "u1",
			wantAttrs: map[string][]string{},
		},
		{
			name: "default namespace, XML declaration, escaped text",
			body: `<?xml version="1.0" encoding="UTF-8"?>
<serviceResponse xmlns="http://www.yale.edu/tp/cas"><authenticationSuccess><user>u&amp;2</user>
<attributes><displayName>Zhang &lt;San&gt;</displayName></attributes></authenticationSuccess></serviceResponse>`,
			wantUser:  "u&2",
			wantAttrs: map[string][]string{"displayName": {"Zhang <San>"}},
		},
		{
			name: "attributes of another namespace are not CAS attributes",
			body: `<cas:serviceResponse xmlns:cas="http://www.yale.edu/tp/cas" xmlns:x="urn:other"><cas:authenticationSuccess><cas:user>u1</cas:user>
<cas:attributes><x:mail>spoof@example.com</x:mail><cas:mail>u1@example.edu</cas:mail></cas:attributes>
<cas:attributes><cas:mail>second@example.edu</cas:mail></cas:attributes></cas:authenticationSuccess></cas:serviceResponse>`,
			wantUser:  "u1",
			wantAttrs: map[string][]string{"mail": {"u1@example.edu", "second@example.edu"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCanned(t, answer(t, http.StatusOK, tt.body))
			p, err := c.client.Validate(context.Background(), cannedTicket, service)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if p.User != tt.wantUser {
				t.Errorf("User = %q, want %q", p.User, tt.wantUser)
			}
			if p.Attributes == nil {
				t.Error("Attributes is nil")
			}
			checkAttributes(t, p.Attributes, tt.wantAttrs)
		})
	}
}

func TestValidateFailureAnswers(t *testing.T) {
	tests := []struct {
		name string
		body string
		want cas.Error
		text string
	}{
		{
			name: "invalid ticket, quoting the ticket",
			body: `<cas:serviceResponse xmlns:cas="http://www.yale.edu/tp/cas">
 <cas:authenticationFailure code="INVALID_TICKET">
    Ticket ` + cannedTicket + ` not recognized
  </cas:authenticationFailure>
</cas:serviceResponse>`,
			want: cas.Error{Code: cas.CodeInvalidTicket, Message: "Ticket ST-(redacted) not recognized"},
			text: "cas: INVALID_TICKET: Ticket ST-(redacted) not recognized",
		},
		{
			name: "internal error without message",
			body: `<cas:serviceResponse xmlns:cas="http://www.yale.edu/tp/cas"><cas:authenticationFailure code="INTERNAL_ERROR"/></cas:serviceResponse>`,
			want: cas.Error{Code: cas.CodeInternalError},
			text: "cas: INTERNAL_ERROR",
		},
		{
			name: "no code",
			body: `<cas:serviceResponse xmlns:cas="http://www.yale.edu/tp/cas"><cas:authenticationFailure>no</cas:authenticationFailure></cas:serviceResponse>`,
			want: cas.Error{Message: "no"},
			text: "cas: authentication failure without a code: no",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCanned(t, answer(t, http.StatusOK, tt.body))
			_, err := c.client.Validate(context.Background(), cannedTicket, service)
			var ce *cas.Error
			if !errors.As(err, &ce) || *ce != tt.want {
				t.Fatalf("Validate: %#v, want %#v", err, tt.want)
			}
			if err.Error() != tt.text {
				t.Errorf("text %q, want %q", err, tt.text)
			}
		})
	}
}

func TestValidateBadAnswers(t *testing.T) {
	const ns = `xmlns:cas="http://www.yale.edu/tp/cas"`
	valid := `<cas:serviceResponse ` + ns + `><cas:authenticationSuccess><cas:user>u1</cas:user></cas:authenticationSuccess></cas:serviceResponse>`
	tests := []struct {
		name   string
		status int
		body   string
		want   string // in the error text, after "cas: unusable validation answer: "
	}{
		{"server error", http.StatusInternalServerError, "<html>Internal Server Error</html>", "HTTP status 500"},
		{"server error with a success body", http.StatusInternalServerError, valid, "HTTP status 500"},
		{"not found", http.StatusNotFound, "", "HTTP status 404"},
		{"HTML login page", http.StatusOK, "<!doctype html><html><body>Sign in</body></html>", "but have <html>"},
		{"empty body", http.StatusOK, "", "EOF"},
		{"truncated XML", http.StatusOK, valid[:len(valid)-20], "XML syntax error"},
		{"no CAS namespace", http.StatusOK, `<serviceResponse><authenticationSuccess><user>u1</user></authenticationSuccess></serviceResponse>`, "expected element"},
		{"another root", http.StatusOK, `<cas:response ` + ns + `/>`, "expected element"},
		{"neither success nor failure", http.StatusOK, `<cas:serviceResponse ` + ns + `></cas:serviceResponse>`, "neither authenticationSuccess nor authenticationFailure"},
		{"proxy answer", http.StatusOK, `<cas:serviceResponse ` + ns + `><cas:proxySuccess><cas:proxyTicket>PT-1</cas:proxyTicket></cas:proxySuccess></cas:serviceResponse>`, "but <proxySuccess>"},
		{"success and failure", http.StatusOK, `<cas:serviceResponse ` + ns + `><cas:authenticationSuccess><cas:user>u1</cas:user></cas:authenticationSuccess><cas:authenticationFailure code="INVALID_TICKET"/></cas:serviceResponse>`, "1 success and 1 failure elements"},
		{"two successes", http.StatusOK, `<cas:serviceResponse ` + ns + `><cas:authenticationSuccess><cas:user>u1</cas:user></cas:authenticationSuccess><cas:authenticationSuccess><cas:user>u2</cas:user></cas:authenticationSuccess></cas:serviceResponse>`, "2 success and 0 failure elements"},
		{"empty user", http.StatusOK, `<cas:serviceResponse ` + ns + `><cas:authenticationSuccess><cas:user></cas:user></cas:authenticationSuccess></cas:serviceResponse>`, "empty cas:user"},
		{"blank user", http.StatusOK, `<cas:serviceResponse ` + ns + `><cas:authenticationSuccess><cas:user> 
 </cas:user></cas:authenticationSuccess></cas:serviceResponse>`, "empty cas:user"},
		{"no user", http.StatusOK, `<cas:serviceResponse ` + ns + `><cas:authenticationSuccess><cas:attributes/></cas:authenticationSuccess></cas:serviceResponse>`, "0 cas:user elements"},
		{"user outside the namespace", http.StatusOK, `<cas:serviceResponse ` + ns + `><cas:authenticationSuccess><user>u1</user></cas:authenticationSuccess></cas:serviceResponse>`, "0 cas:user elements"},
		{"two users", http.StatusOK, `<cas:serviceResponse ` + ns + `><cas:authenticationSuccess><cas:user>u1</cas:user><cas:user>u2</cas:user></cas:authenticationSuccess></cas:serviceResponse>`, "2 cas:user elements"},
		{"over 1 MiB", http.StatusOK, valid + strings.Repeat(" ", 1<<20), "larger than 1048576 bytes"},
		{"element named after the ticket", http.StatusOK, `<cas:serviceResponse ` + ns + `><cas:` + cannedTicket + `/></cas:serviceResponse>`, "but <ST-(redacted)>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCanned(t, answer(t, tt.status, tt.body))
			p, err := c.client.Validate(context.Background(), cannedTicket, service)
			if !errors.Is(err, cas.ErrBadAnswer) {
				t.Fatalf("Validate: %+v, %v; want ErrBadAnswer", p, err)
			}
			if !strings.HasPrefix(err.Error(), "cas: unusable validation answer: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to mention %q", err, tt.want)
			}
			if strings.Contains(err.Error(), cannedTicket) {
				t.Errorf("error %q quotes the ticket", err)
			}
			var ce *cas.Error
			if errors.As(err, &ce) {
				t.Errorf("a bad answer is reported as the CAS refusal %v", ce)
			}
		})
	}
}

// TestValidateAcceptsExactly1MiB pins the limit: a body of exactly 1 MiB is
// read.
func TestValidateAcceptsExactly1MiB(t *testing.T) {
	head := `<cas:serviceResponse xmlns:cas="http://www.yale.edu/tp/cas"><cas:authenticationSuccess><cas:user>u1</cas:user></cas:authenticationSuccess></cas:serviceResponse>`
	body := head + strings.Repeat(" ", 1<<20-len(head))
	c := newCanned(t, answer(t, http.StatusOK, body))
	if p, err := c.client.Validate(context.Background(), cannedTicket, service); err != nil || p.User != "u1" {
		t.Fatalf("Validate: %+v, %v", p, err)
	}
}

func TestValidateTransportErrors(t *testing.T) {
	t.Run("server gone", func(t *testing.T) {
		c := newCanned(t, answer(t, http.StatusOK, ""))
		c.server.Close()
		_, err := c.client.Validate(context.Background(), cannedTicket, service)
		if err == nil || !strings.HasPrefix(err.Error(), "cas: validate: ") {
			t.Fatalf("Validate: %v, want a transport error", err)
		}
		if strings.Contains(err.Error(), cannedTicket) || strings.Contains(err.Error(), "CANNEDTICKET") {
			t.Errorf("error %q quotes the ticket", err)
		}
		if errors.Is(err, cas.ErrBadAnswer) {
			t.Errorf("error %q blames the answer; there was none", err)
		}
	})
	t.Run("context canceled", func(t *testing.T) {
		c := newCanned(t, answer(t, http.StatusOK, ""))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := c.client.Validate(ctx, cannedTicket, service)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Validate: %v, want context.Canceled", err)
		}
		if strings.Contains(err.Error(), "CANNEDTICKET") {
			t.Errorf("error %q quotes the ticket", err)
		}
	})
}
