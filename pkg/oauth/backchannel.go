package oauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/campus-it/ucs/pkg/store"
)

// OpenID Connect Back-Channel Logout 1.0: when a sign-in session ends (logout, the account
// page, a client's own logout, the oldest session of a user beyond MaxSessionsPerUser), every
// client that received tokens in it and registered a backchannel_logout_uri is sent a signed
// logout token by POST, so it can end its own session of the user. Sending never holds up the
// user's logout: tokens go into a bounded queue that a few goroutines deliver; a token whose
// first post fails is retried with exponential backoff for a bounded time by a goroutine of its
// own (at most Queue of them), so that a client that is down delays only its own tokens.

// BackchannelLogoutEvent is the member of a logout token's events claim.
const BackchannelLogoutEvent = "http://schemas.openid.net/event/backchannel-logout"

// LogoutTokenType is the typ header of logout tokens (Back-Channel Logout §2.4, RFC 8725 §3.11):
// no ID token or access token check accepts one.
const LogoutTokenType = "logout+jwt"

// logoutTokenTTL bounds a logout token's life: long enough for the sender's retries.
const logoutTokenTTL = 5 * time.Minute

// LogoutClaims are the claims of a logout token: iss, aud (the client), iat, exp, jti, sub, sid
// and events; never a nonce.
type LogoutClaims struct {
	jwt.RegisteredClaims
	SID    string              `json:"sid"`
	Events map[string]struct{} `json:"events"`
}

// BackchannelConfig configures a Backchannel sender. Zero fields take their defaults.
type BackchannelConfig struct {
	// HTTPClient posts the logout tokens. Default: a 10 s timeout per attempt and no redirects
	// followed (the specification forbids following them).
	HTTPClient *http.Client
	// Queue bounds the logout tokens waiting to be sent; one more is dropped, and logged.
	// Default 1024.
	Queue int
	// Senders is how many tokens are sent at once. Default 4.
	Senders int
	// InitialInterval is the first wait before a retry; it grows to MaxInterval. Defaults
	// 500 ms and 30 s.
	InitialInterval, MaxInterval time.Duration
	// MaxElapsed bounds the retries of one token, from its first attempt. Default 2 minutes.
	MaxElapsed time.Duration
	// Logger logs tokens given up (by client, never the token). Default: nowhere.
	Logger *slog.Logger
}

// Backchannel sends logout tokens to clients.
type Backchannel struct {
	cfg      BackchannelConfig
	jobs     chan logoutJob
	retrying chan struct{} // a place for each token being retried
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.RWMutex
	closed   bool
}

type logoutJob struct {
	client, uri, token string
}

// NewBackchannel starts a sender; Close stops it.
func NewBackchannel(cfg BackchannelConfig) *Backchannel {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 1024
	}
	if cfg.Senders <= 0 {
		cfg.Senders = 4
	}
	if cfg.InitialInterval <= 0 {
		cfg.InitialInterval = 500 * time.Millisecond
	}
	if cfg.MaxInterval <= 0 {
		cfg.MaxInterval = 30 * time.Second
	}
	if cfg.MaxElapsed <= 0 {
		cfg.MaxElapsed = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Backchannel{cfg: cfg, jobs: make(chan logoutJob, cfg.Queue), retrying: make(chan struct{}, cfg.Queue), ctx: ctx, cancel: cancel}
	for range cfg.Senders {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			for j := range b.jobs {
				b.deliver(j)
			}
		}()
	}
	return b
}

// Send queues a logout token for uri without waiting; false when the queue is full or the
// sender is closed (the token is dropped and logged).
func (b *Backchannel) Send(clientID, uri, token string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return false
	}
	select {
	case b.jobs <- logoutJob{client: clientID, uri: uri, token: token}:
		return true
	default:
		b.cfg.Logger.Warn("back-channel logout dropped: the queue is full", "client", clientID, "queue", cap(b.jobs))
		return false
	}
}

// Close stops taking tokens, ends the retries under way and waits for the senders to return.
// Tokens still queued are given up.
func (b *Backchannel) Close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.jobs)
	}
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
}

// errClientRefused is a 4xx answer other than 429: the client will not take this token.
var errClientRefused = errors.New("the client refused the logout token")

// deliver posts one token; if that fails and may succeed later, the token is retried by a
// goroutine of its own (retry), which frees the sender for other clients' tokens.
func (b *Backchannel) deliver(j logoutJob) {
	if b.ctx.Err() != nil {
		return
	}
	err := b.post(j)
	var perm *backoff.PermanentError
	switch {
	case err == nil:
		return
	case errors.As(err, &perm):
		b.cfg.Logger.Warn("back-channel logout given up", "client", j.client, "attempts", 1, "err", perm.Err)
		return
	}
	select {
	case b.retrying <- struct{}{}:
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer func() { <-b.retrying }()
			b.retry(j)
		}()
	default:
		b.cfg.Logger.Warn("back-channel logout given up: too many tokens are being retried", "client", j.client, "err", err)
	}
}

// retry posts a token whose first post failed, with backoff, until it is taken, refused, or
// MaxElapsed has passed.
func (b *Backchannel) retry(j logoutJob) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = b.cfg.InitialInterval, b.cfg.MaxInterval, b.cfg.MaxElapsed
	first := bo.NextBackOff()
	select {
	case <-b.ctx.Done():
		return
	case <-time.After(first):
	}
	attempts := 1
	err := backoff.Retry(func() error { attempts++; return b.post(j) }, backoff.WithContext(bo, b.ctx))
	if err != nil && b.ctx.Err() == nil {
		b.cfg.Logger.Warn("back-channel logout given up", "client", j.client, "attempts", attempts, "err", err)
	}
}

// post posts a token once: nil when taken, a backoff.Permanent error when refused.
func (b *Backchannel) post(j logoutJob) error {
	body := url.Values{"logout_token": {j.token}}.Encode()
	req, err := http.NewRequestWithContext(b.ctx, http.MethodPost, j.uri, strings.NewReader(body))
	if err != nil {
		return backoff.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := b.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("post: %w", redactURL(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNoContent:
		return nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests:
		return backoff.Permanent(fmt.Errorf("%w: HTTP %d", errClientRefused, resp.StatusCode))
	}
	return fmt.Errorf("HTTP %d", resp.StatusCode)
}

// redactURL keeps the transport's reason of a failed post without the address's query.
func redactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// tellClients sends a logout token of session se to each of its clients that registered a
// back-channel logout address.
func (s *Service) tellClients(se store.Session) {
	if s.Backchannel == nil {
		return
	}
	for _, id := range se.Clients {
		s.tellClient(id, se)
	}
}

// tellClient sends client id a logout token for session se, if it registered a
// backchannel_logout_uri.
func (s *Service) tellClient(id string, se store.Session) {
	c, ok := s.Clients.Lookup(id)
	if s.Backchannel == nil || !ok || c.BackchannelLogoutURI == "" {
		return
	}
	tok, err := s.LogoutToken(c, se)
	if err != nil {
		s.Logger.Error("signing a logout token failed", "client", c.ID, "err", err)
		return
	}
	s.Backchannel.Send(c.ID, c.BackchannelLogoutURI, tok)
}

// LogoutToken returns the signed logout token telling c that session se ended, signed with the
// keys of c's ID tokens.
func (s *Service) LogoutToken(c *Client, se store.Session) (string, error) {
	now := s.Now()
	return s.idKeys(c).SignTyped(LogoutTokenType, &LogoutClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: s.Issuer, Subject: se.UserID, Audience: jwt.ClaimStrings{c.ID},
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(logoutTokenTTL)), ID: newJTI(),
		},
		SID: se.SID, Events: map[string]struct{}{BackchannelLogoutEvent: {}},
	})
}
