// Package platform is the client the delivery workers use to send template
// messages through the messaging platform (a WeChat official account).
//
// It keeps the account's access token, shared with every other worker
// process through the platform's stable token endpoint in normal mode, and
// classifies the platform's answers so that workers know which failures to
// retry (see Permanent).
package platform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

const (
	// maxAnswerBytes bounds what is read of an answer of the send and token endpoints (under
	// 200 bytes as the platform writes them), so that a broken proxy or a captive portal in
	// between cannot make a worker's concurrent sends buffer much: 256 of them hold at most
	// 16 MiB of it at once.
	maxAnswerBytes = 64 << 10
	// maxAccountAnswerBytes bounds an answer of the account's other endpoints (api admin's
	// template lists), which may be larger.
	maxAccountAnswerBytes = 1 << 20
	// defaultHTTPTimeout bounds one request when Config.HTTPClient is nil.
	defaultHTTPTimeout = 10 * time.Second
)

// DuplicateWindow is how long after a send the platform answers a send with the same
// client_msg_id with the first one's msgid, sending nothing twice. Past it, the same
// client_msg_id makes a new message.
const DuplicateWindow = 10 * time.Minute

// Config configures a Client.
type Config struct {
	// APIBase is the platform's API origin, e.g. https://api.weixin.qq.com,
	// or a simulator's. Required; an absolute http or https URL. A trailing
	// slash is allowed.
	APIBase string
	// AppID is the official account's AppID. Required.
	AppID string
	// Secret is the account's AppSecret. Required. It is sent only to the
	// token endpoint and never logged.
	Secret string
	// HTTPClient sends the requests. Default: a client with a 10 s timeout
	// whose transport keeps up to 256 idle connections to the platform, so
	// that many concurrent sends reuse connections.
	HTTPClient *http.Client
	// Now is the clock used for the token's lifetime. Default: time.Now.
	Now func() time.Time
	// Logger receives token fetches and refreshes. Default: discard. Access
	// tokens and the secret are never logged.
	Logger *slog.Logger
	// OnSend, when set, is told of each call of the template send endpoint: how long it took
	// and its error, nil when the platform took the message. A send refused for its access
	// token and made again with a new one is two calls.
	OnSend func(took time.Duration, err error)
}

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error {
	var problems []string
	if u, err := url.Parse(c.APIBase); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		problems = append(problems, "APIBase must be an absolute http or https URL")
	} else if strings.ContainsAny(c.APIBase, "?#") { // also a bare "?" or "#", which url.Parse leaves empty
		problems = append(problems, "APIBase must not have a query or fragment")
	}
	if c.AppID == "" {
		problems = append(problems, "AppID is empty")
	}
	if c.Secret == "" {
		problems = append(problems, "Secret is empty")
	}
	if len(problems) > 0 {
		return errors.New("platform: invalid config: " + strings.Join(problems, "; "))
	}
	return nil
}

// Client sends template messages. It is safe for concurrent use; one Client
// per process is enough, as it shares its token among all goroutines.
type Client struct {
	appID    string
	secret   string
	base     string // APIBase without a trailing slash
	tokenURL string
	sendURL  string // without the access_token query
	http     *http.Client
	log      *slog.Logger
	tokens   *tokenCache
	onSend   func(time.Duration, error)
}

// New returns a Client for the account in cfg, after validating cfg.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = defaultHTTPClient()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	base := strings.TrimRight(cfg.APIBase, "/")
	c := &Client{
		appID:    cfg.AppID,
		secret:   cfg.Secret,
		base:     base,
		tokenURL: base + "/cgi-bin/stable_token",
		sendURL:  base + "/cgi-bin/message/template/send",
		http:     noRedirects(cfg.HTTPClient),
		log:      cfg.Logger,
		onSend:   cfg.OnSend,
	}
	if c.onSend == nil {
		c.onSend = func(time.Duration, error) {}
	}
	c.tokens = newTokenCache(c.fetchToken, cfg.Now, cfg.Logger)
	return c, nil
}

// noRedirects is a copy of hc that follows no redirect: the platform's API never answers one,
// and following one made by a gateway in front of it would send the AppSecret (a 307 or 308
// posts the token request's body again) or the access token (in the Referer, with the send
// address's query) to whatever host it names. The 3xx is then answered as any other status
// that is not 2xx (HTTPError).
func noRedirects(hc *http.Client) *http.Client {
	c := *hc
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// defaultHTTPClient keeps many idle connections per host: every worker talks
// to one host at a high rate, and the standard two idle connections would
// make most requests open a new TLS connection.
func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &http.Client{Timeout: defaultHTTPTimeout, Transport: t}
}

// TemplateMessage is one template message to one follower.
type TemplateMessage struct {
	// ToUser is the follower's openid.
	ToUser string
	// TemplateID is the account's template id.
	TemplateID string
	// URL is where a tap on the message leads; optional.
	URL string
	// ClientMsgID is the idempotency key (the service passes the ucsId): the
	// platform sends one message per openid and ClientMsgID within ten
	// minutes, so a retry after a lost answer does not reach the user twice.
	ClientMsgID string
	// Data maps keyword names of the template (e.g. "thing1") to values.
	Data map[string]string
}

// sendAnswer is the answer of the template send endpoint.
type sendAnswer struct {
	ErrCode int    `json:"errcode"`
	ErrMsg  string `json:"errmsg"`
	MsgID   int64  `json:"msgid"`
}

// SendTemplate sends m and returns the platform's message id, which the
// platform's TEMPLATESENDJOBFINISH event later names with the final status.
//
// An errcode answer is returned as a wrapped *Error; use Permanent to decide
// whether to retry. When no access token could be had, nothing was sent: the
// error wraps a *NotSentError. When the platform rejects the access token (40001, 42001,
// 40014), SendTemplate fetches a token again and sends again, at most twice: with the token
// fetched, which may be the same (the rejection was passing), and, that rejected too, with the
// token of a forced refresh. A rejection of the last, or no token to be had, is returned as a
// *NotSentError (wrapping the rejection's *Error): the platform took no call, and nothing of the
// message caused it.
func (c *Client) SendTemplate(ctx context.Context, m TemplateMessage) (msgID int64, err error) {
	body := appendSendBody(make([]byte, 0, 512), &m)
	tok, err := c.tokens.get(ctx, "", time.Time{})
	if err != nil {
		return 0, fmt.Errorf("send template: %w", &NotSentError{Err: err})
	}
	for resend := 0; ; resend++ {
		sentAt := c.tokens.now()
		msgID, err = c.send(ctx, tok, body)
		var pe *Error
		switch {
		case err == nil || !errors.As(err, &pe) || !isTokenCode(pe.Code):
			return msgID, err
		case resend == maxTokenResends:
			return 0, fmt.Errorf("send template: a new access token rejected too: %w", &NotSentError{Err: err, Rejected: pe.Code})
		}
		c.log.Warn("the platform rejected the access token; fetching it again", "errcode", pe.Code)
		var terr error
		if tok, terr = c.tokens.get(ctx, tok, sentAt); terr != nil {
			// The rejected send sent nothing, and no other can be made: as when no token could
			// be had at first, with the token's error (an account's refusal such as 40125 among
			// them) in the chain, not the rejection's.
			return 0, fmt.Errorf("send template: access token rejected (%d), then: %w", pe.Code, &NotSentError{Err: terr, Rejected: pe.Code})
		}
	}
}

// maxTokenResends is how many times a send rejected for its access token is made again.
const maxTokenResends = 2

// send makes one call of the template send endpoint.
func (c *Client) send(ctx context.Context, tok string, body []byte) (msgID int64, err error) {
	defer func(started time.Time) { c.onSend(time.Since(started), err) }(time.Now())
	raw, err := c.post(ctx, c.sendURL+"?access_token="+url.QueryEscape(tok), c.sendURL, body)
	if err != nil {
		return 0, fmt.Errorf("send template: %w", err)
	}
	var a sendAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return 0, fmt.Errorf("send template: %w", unparsable(err))
	}
	if a.ErrCode != 0 {
		return 0, fmt.Errorf("send template: %w", &Error{Code: a.ErrCode, Msg: a.ErrMsg})
	}
	if a.MsgID <= 0 {
		// Not the platform's answer (a proxy's, cut short): whether the message was taken is
		// unknown, and a retry with the same client_msg_id gets its msgid.
		return 0, fmt.Errorf("send template: %w", &UnusableAnswerError{Why: "errcode 0 without a msgid"})
	}
	return a.MsgID, nil
}

// redacted is an address as errors name it: a password in it (api_base may carry a gateway's
// credentials) written xxxxx, as net/http's own errors write it.
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(the platform's address)"
	}
	return u.Redacted()
}

// post sends a JSON body and returns the answer's body. shownURL is what
// errors name instead of target: target may carry the access token, which the
// standard client would otherwise copy into its error text.
func (c *Client) post(ctx context.Context, target, shownURL string, body []byte) ([]byte, error) {
	return c.do(ctx, http.MethodPost, target, shownURL, body, maxAnswerBytes)
}

// unparsable is the error of an answer that does not decode as the platform's JSON.
func unparsable(err error) error {
	return &UnusableAnswerError{Why: "unparsable answer: " + err.Error()}
}

// do makes one request (a JSON body with POST, none with GET) and returns the
// answer's body, at most limit bytes of it, naming shownURL in errors.
func (c *Client) do(ctx context.Context, method, target, shownURL string, body []byte, limit int) ([]byte, error) {
	var rd io.Reader
	if method == http.MethodPost {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		// Named as net/http names its operations ("Post", "Get").
		op := method[:1] + strings.ToLower(method[1:])
		return nil, &url.Error{Op: op, URL: redacted(shownURL), Err: errors.New("cannot build the request")}
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return nil, &url.Error{Op: ue.Op, URL: redacted(shownURL), Err: ue.Err}
		}
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		he := &HTTPError{Status: resp.Status, Code: resp.StatusCode}
		if he.Code == http.StatusTooManyRequests || he.Code == http.StatusServiceUnavailable {
			he.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), c.tokens.now())
		}
		return nil, he
	}
	if len(raw) > limit {
		return nil, &UnusableAnswerError{Why: fmt.Sprintf("answer longer than %d bytes", limit)}
	}
	return raw, nil
}

// Ready reports whether the account's access token can be had: the one held, or a new one
// from the platform. Workers' readiness rests on it.
func (c *Client) Ready(ctx context.Context) error {
	if _, err := c.tokens.get(ctx, "", time.Time{}); err != nil {
		return fmt.Errorf("platform access token: %w", err)
	}
	return nil
}
