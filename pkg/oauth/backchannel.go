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
// user's logout: each client's tokens go into a bounded queue of its own that a few goroutines
// of its own deliver, so that a client that does not answer (each post waits up to the HTTP
// client's time-out) delays only its own tokens; a token whose first post fails is retried with
// exponential backoff for a bounded time by a goroutine of its own (at most Queue of them), so
// that a client that is down does not hold its senders either.

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
	// Queue bounds the logout tokens of one client waiting to be sent; one more is dropped,
	// and logged. It bounds the tokens being retried too, of all clients. Default 1024.
	Queue int
	// Senders is how many tokens of one client are sent at once. Default 4.
	Senders int
	// InitialInterval is the first wait before a retry; it grows to MaxInterval. Defaults
	// 500 ms and 30 s.
	InitialInterval, MaxInterval time.Duration
	// MaxElapsed bounds the retries of one token, from its first attempt. Default 2 minutes.
	MaxElapsed time.Duration
	// Logger logs tokens given up (by client, never the token). Default: nowhere.
	Logger *slog.Logger
	// CloseWait is how long Close lets the senders post the tokens still queued (a stop comes
	// just after the sign-outs it served) before it gives up the rest. Default 1 s.
	CloseWait time.Duration
}

// Backchannel sends logout tokens to clients.
type Backchannel struct {
	cfg      BackchannelConfig
	retrying chan struct{} // a place for each token being retried
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup // senders and retries
	senders  sync.WaitGroup
	mu       sync.Mutex
	queues   map[string]chan logoutJob // by client, with their senders; under mu
	closed   bool                      // under mu
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
	if cfg.CloseWait <= 0 {
		cfg.CloseWait = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Backchannel{cfg: cfg, retrying: make(chan struct{}, cfg.Queue), ctx: ctx, cancel: cancel, queues: map[string]chan logoutJob{}}
}

// queue is the queue of clientID's tokens, made with its senders on first use. Called under
// b.mu, before Close.
func (b *Backchannel) queue(clientID string) chan logoutJob {
	q, ok := b.queues[clientID]
	if !ok {
		q = make(chan logoutJob, b.cfg.Queue)
		b.queues[clientID] = q
		for range b.cfg.Senders {
			b.wg.Add(1)
			b.senders.Add(1)
			go func() {
				defer b.wg.Done()
				defer b.senders.Done()
				for j := range q {
					b.deliver(j)
				}
			}()
		}
	}
	return q
}

// Send queues a logout token for uri without waiting; false when the queue is full or the
// sender is closed (the token is dropped and logged).
func (b *Backchannel) Send(clientID, uri, token string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		b.cfg.Logger.Warn("back-channel logout given up: the server is stopping", "client", clientID)
		return false
	}
	q := b.queue(clientID)
	select {
	case q <- logoutJob{client: clientID, uri: uri, token: token}:
		return true
	default:
		b.cfg.Logger.Warn("back-channel logout dropped: the client's queue is full", "client", clientID, "queue", cap(q))
		return false
	}
}

// Close stops taking tokens, lets the senders post those still queued for CloseWait, then ends
// the posts and retries under way and waits for them. Each token given up is logged with its
// client.
func (b *Backchannel) Close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		for _, q := range b.queues {
			close(q)
		}
	}
	b.mu.Unlock()
	drained := make(chan struct{})
	go func() { b.senders.Wait(); close(drained) }()
	t := time.NewTimer(b.cfg.CloseWait)
	select {
	case <-drained:
	case <-t.C:
	}
	t.Stop()
	b.cancel()
	b.wg.Wait()
}

// errClientRefused is a 4xx answer other than 429: the client will not take this token.
var errClientRefused = errors.New("the client refused the logout token")

// deliver posts one token; if that fails and may succeed later, the token is retried by a
// goroutine of its own (retry), which frees the sender for other clients' tokens.
func (b *Backchannel) deliver(j logoutJob) {
	if b.ctx.Err() != nil {
		b.cfg.Logger.Warn("back-channel logout given up: the server is stopping", "client", j.client)
		return
	}
	since := time.Now()
	err := b.post(j)
	var perm *backoff.PermanentError
	switch {
	case err == nil:
		return
	case b.ctx.Err() != nil:
		b.cfg.Logger.Warn("back-channel logout given up: the server is stopping", "client", j.client, "attempts", 1)
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
			b.retry(j, since, err)
		}()
	default:
		b.cfg.Logger.Warn("back-channel logout given up: too many tokens are being retried", "client", j.client, "err", err)
	}
}

// retry posts a token whose first post, made at since, failed (err), with backoff, until it is
// taken, refused, or MaxElapsed has passed since: no retry starts later.
func (b *Backchannel) retry(j logoutJob, since time.Time, err error) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval = b.cfg.InitialInterval, b.cfg.MaxInterval
	first := bo.NextBackOff()
	attempts := 1
	if time.Since(since)+first < b.cfg.MaxElapsed {
		select {
		case <-b.ctx.Done():
			b.cfg.Logger.Warn("back-channel logout given up: the server is stopping", "client", j.client, "attempts", attempts)
			return
		case <-time.After(first):
		}
		// backoff.Retry counts the elapsed time from its own start, and makes its first call
		// whatever that time.
		bo.MaxElapsedTime = b.cfg.MaxElapsed - time.Since(since)
		err = backoff.Retry(func() error { attempts++; return b.post(j) }, backoff.WithContext(bo, b.ctx))
		switch {
		case err == nil:
			return
		case b.ctx.Err() != nil:
			b.cfg.Logger.Warn("back-channel logout given up: the server is stopping", "client", j.client, "attempts", attempts)
			return
		}
	}
	b.cfg.Logger.Warn("back-channel logout given up", "client", j.client, "attempts", attempts, "err", err)
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
