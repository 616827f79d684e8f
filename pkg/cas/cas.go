// Package cas is a client of the CAS 3.0 protocol, the campus single sign-on
// that the OpenID Connect authorization server signs users in through.
//
// The flow has three steps. The browser is sent to LoginURL; the CAS server
// signs the user in (or reuses its single sign-on session) and sends the
// browser back to the service URL with a service ticket ("ST-…") in the
// "ticket" query parameter; the service then checks that ticket with
// Validate, over a direct connection to the CAS server, and learns who the
// user is. LogoutURL ends the single sign-on session.
//
// Service tickets are bearer credentials for one sign-in: this package never
// logs them and keeps them out of the errors it returns.
package cas

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"
)

const (
	// defaultHTTPTimeout bounds one validation request when Config.HTTPClient
	// is nil; the user's browser waits on it.
	defaultHTTPTimeout = 10 * time.Second
	// maxAnswerBytes bounds what is read of a validation answer, so that a
	// broken or hostile server cannot make the service buffer without limit.
	maxAnswerBytes = 1 << 20
)

// Config configures a Client.
type Config struct {
	// BaseURL is the CAS server's base address, under which /login, /logout
	// and /p3/serviceValidate live, e.g. https://cas.example.edu/cas.
	// Required: an absolute http or https URL without query or fragment. A
	// trailing slash is allowed.
	BaseURL string
	// HTTPClient sends the validation requests. Default (nil): a client with
	// a 10 s timeout. A caller that supplies its own should set a timeout as
	// well, since a user's sign-in waits on every request.
	HTTPClient *http.Client
}

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error {
	var problems []string
	u, err := url.Parse(c.BaseURL)
	switch {
	case c.BaseURL == "":
		problems = append(problems, "BaseURL is empty")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		problems = append(problems, "BaseURL must be an absolute http or https URL")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		problems = append(problems, "BaseURL must not have a query or fragment")
	case u.User != nil:
		// Browsers are sent there to sign in and out, and would read it.
		problems = append(problems, "BaseURL must not have user info")
	}
	if len(problems) > 0 {
		return errors.New("cas: invalid config: " + strings.Join(problems, "; "))
	}
	return nil
}

// Client talks to one CAS server. It holds no per-user state and is safe
// for concurrent use.
type Client struct {
	base        string // BaseURL without trailing slashes
	validateURL string // base + "/p3/serviceValidate", without query
	http        *http.Client
}

// New returns a Client for cfg, or the problems of cfg (see Config.Validate).
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: defaultHTTPTimeout}
	}
	base := strings.TrimRight(cfg.BaseURL, "/")
	return &Client{base: base, validateURL: base + "/p3/serviceValidate", http: hc}, nil
}

// LoginURL is where the browser is sent to sign in for service, the URL the
// CAS server sends it back to with a ticket:
// {base}/login?service=<escaped service>, plus &renew=true when renew is set
// so that the user must type the password again even within a single
// sign-on session. An empty service is left out; CAS then only opens a
// session and shows a "signed in" page.
func (c *Client) LoginURL(service string, renew bool) string {
	u := c.base + "/login"
	sep := "?"
	if service != "" {
		u += sep + "service=" + url.QueryEscape(service)
		sep = "&"
	}
	if renew {
		u += sep + "renew=true"
	}
	return u
}

// LogoutURL is where the browser is sent to end its single sign-on session:
// {base}/logout?service=<escaped service>, after which CAS sends the browser
// on to service. An empty service is left out; CAS then shows a "signed out"
// page.
func (c *Client) LogoutURL(service string) string {
	u := c.base + "/logout"
	if service != "" {
		u += "?service=" + url.QueryEscape(service)
	}
	return u
}
