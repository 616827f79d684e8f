package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

const (
	// maxTokenSkew is how long before the end of its life a token is
	// fetched again. The platform hands out a new token in normal mode during
	// the last five minutes of the old one (both stay valid meanwhile), so
	// asking then gets the new token without invalidating anyone's.
	maxTokenSkew = 5 * time.Minute
	// forceRefreshInterval bounds forced refreshes per client: the platform
	// allows few a day (and 30 s apart), and each one invalidates the token
	// every other worker holds.
	forceRefreshInterval = time.Minute
	// tokenFetchTimeout bounds one token fetch. The fetch is shared by every
	// goroutine waiting for it, so it does not end with the context of the
	// goroutine that happened to start it.
	tokenFetchTimeout = 15 * time.Second
	// renewRetry is how long after a renewal ahead of expiry failed another is
	// tried, while the token in hand is still good.
	renewRetry = 10 * time.Second
)

// tokenCall is one token fetch in flight; waiters block on done.
type tokenCall struct {
	done  chan struct{}
	stale string // the rejected token that prompted the fetch, if any
	tok   string
	err   error
}

// tokenCache holds the account's access token. At most one goroutine fetches
// at a time; the others wait for its result.
type tokenCache struct {
	fetch func(ctx context.Context, force bool) (tok string, expiresIn time.Duration, err error)
	now   func() time.Time
	log   *slog.Logger

	mu  sync.Mutex
	tok string
	exp time.Time // when tok is renewed, ahead of its expiry
	// good is until when tok is used while its renewal runs: a little before
	// its expiry.
	good       time.Time
	renewTried time.Time
	// confirmed is a token the platform rejected and then handed out again
	// in normal mode, at confirmedAt: it is tried again (the rejection may
	// have been passing), and only a send made with it after that and
	// rejected too has it replaced by a forced refresh, which ends the token
	// of every other worker.
	confirmed   string
	confirmedAt time.Time
	lastForce   time.Time
	inflight    *tokenCall
	// waitErr is the answer of the token endpoint (a gateway in front of it) that asked to wait
	// until waitUntil (429 or 503 with Retry-After): no fetch is made before then, not even for a
	// readiness probe, and waitErr is the answer meanwhile.
	waitErr   error
	waitUntil time.Time
}

func newTokenCache(fetch func(context.Context, bool) (string, time.Duration, error), now func() time.Time, log *slog.Logger) *tokenCache {
	return &tokenCache{fetch: fetch, now: now, log: log}
}

// errForceRefreshTooSoon is returned when a rejected token would need a
// forced refresh but one was made less than a minute ago.
var errForceRefreshTooSoon = errors.New("the platform keeps handing out a token it rejects, and a forced refresh was made less than a minute ago")

// get returns a token to use. stale, when not empty, is a token the platform
// has just rejected in a call made at sentAt: get then fetches in normal mode,
// and returns the token fetched. When normal mode hands out the very same
// token, the platform holds it current: it is returned, to be tried again,
// and a refresh is forced only for a call made with it since then and
// rejected too.
func (tc *tokenCache) get(ctx context.Context, stale string, sentAt time.Time) (string, error) {
	for {
		tc.mu.Lock()
		if now := tc.now(); tc.tok != "" && tc.tok != stale && now.Before(tc.good) {
			// Due for renewal, and still good: it is renewed behind the sends, which
			// do not wait for it (each holding its share of the send budget, they
			// would all call at once when it came).
			if !now.Before(tc.exp) && tc.inflight == nil && now.Sub(tc.renewTried) >= renewRetry && !now.Before(tc.waitUntil) {
				tc.renewTried = now
				tc.inflight = &tokenCall{done: make(chan struct{})}
				go tc.run(ctx, tc.inflight, false)
			}
			tok := tc.tok
			tc.mu.Unlock()
			return tok, nil
		}
		if c := tc.inflight; c != nil {
			tc.mu.Unlock()
			select {
			case <-c.done:
			case <-ctx.Done():
				return "", fmt.Errorf("waiting for the access token: %w", ctx.Err())
			}
			if c.err != nil {
				return "", c.err
			}
			if c.tok != stale || c.stale == stale {
				// Taken as fetched even if its lifetime is already short:
				// checking it again could fetch in a loop. The rejected token
				// handed out again for this very rejection is tried again.
				return c.tok, nil
			}
			continue
		}
		if now := tc.now(); now.Before(tc.waitUntil) {
			err := tc.waitErr
			if he := (*HTTPError)(nil); errors.As(err, &he) {
				left := *he // what is left of the wait, not all of it again
				left.RetryAfter = tc.waitUntil.Sub(now)
				err = fmt.Errorf("fetch access token: %w", &left)
			}
			tc.mu.Unlock()
			return "", err
		}
		force := false
		if tc.confirmed == stale && !sentAt.Before(tc.confirmedAt.Add(forceRefreshInterval)) {
			// Handed out again long before this call: it passed since, and this rejection
			// is taken as a first one, checked in normal mode again.
			tc.confirmed = ""
		}
		if stale != "" && tc.tok == stale && tc.confirmed == stale {
			if sentAt.Before(tc.confirmedAt) {
				// Rejected in a call made before the platform handed it out
				// again: tried again, as the calls that prompted that fetch.
				tok := tc.tok
				tc.mu.Unlock()
				return tok, nil
			}
			if now := tc.now(); !tc.lastForce.IsZero() && now.Sub(tc.lastForce) < forceRefreshInterval {
				tc.mu.Unlock()
				return "", errForceRefreshTooSoon
			}
			force = true
			tc.lastForce = tc.now()
		}
		// The fetch runs on its own goroutine so that the caller that starts
		// it can give up on its context like every other waiter.
		tc.inflight = &tokenCall{done: make(chan struct{}), stale: stale}
		go tc.run(ctx, tc.inflight, force)
		tc.mu.Unlock()
	}
}

// run performs the fetch of c and publishes its result.
func (tc *tokenCache) run(ctx context.Context, c *tokenCall, force bool) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tokenFetchTimeout)
	defer cancel()
	start := tc.now()
	tok, expiresIn, err := tc.fetch(fctx, force)

	tc.mu.Lock()
	defer tc.mu.Unlock()
	defer close(c.done)
	tc.inflight = nil
	if err != nil {
		c.err = err
		tc.log.Warn("fetching the platform access token failed", "force_refresh", force, "error", err)
		if he, wait := AskedWait(err); he != nil {
			tc.waitErr, tc.waitUntil = err, tc.now().Add(wait)
		}
		return
	}
	c.tok = tok
	tc.tok = tok
	skew := min(expiresIn/10, maxTokenSkew)
	tc.exp = start.Add(expiresIn - skew)
	tc.good = start.Add(expiresIn - skew/5)
	if c.stale != "" && tok == c.stale {
		tc.confirmed, tc.confirmedAt = tok, tc.now()
	}
	tc.log.Info("fetched the platform access token", "force_refresh", force, "expires_in", expiresIn)
}

// stableTokenRequest is the body of the stable token endpoint.
type stableTokenRequest struct {
	GrantType    string `json:"grant_type"`
	AppID        string `json:"appid"`
	Secret       string `json:"secret"`
	ForceRefresh bool   `json:"force_refresh"`
}

// stableTokenAnswer is its answer: a token, or an errcode.
type stableTokenAnswer struct {
	AccessToken string `json:"access_token"`
	ExpiresIn   int64  `json:"expires_in"`
	ErrCode     int    `json:"errcode"`
	ErrMsg      string `json:"errmsg"`
}

// fetchToken asks the platform's stable token endpoint for the account's
// token. Normal mode (force=false) returns the token that is current while it
// is valid, so many worker processes share one token and never invalidate
// each other's; force=true invalidates it.
func (c *Client) fetchToken(ctx context.Context, force bool) (string, time.Duration, error) {
	body, err := json.Marshal(stableTokenRequest{
		GrantType:    "client_credential",
		AppID:        c.appID,
		Secret:       c.secret,
		ForceRefresh: force,
	})
	if err != nil {
		return "", 0, fmt.Errorf("fetch access token: %w", err)
	}
	raw, err := c.post(ctx, c.tokenURL, c.tokenURL, body)
	if err != nil {
		return "", 0, fmt.Errorf("fetch access token: %w", err)
	}
	var a stableTokenAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", 0, fmt.Errorf("fetch access token: %w", unparsable(err))
	}
	if a.ErrCode != 0 {
		return "", 0, fmt.Errorf("fetch access token: %w", &Error{Code: a.ErrCode, Msg: a.ErrMsg})
	}
	if a.AccessToken == "" || a.ExpiresIn <= 0 {
		return "", 0, fmt.Errorf("fetch access token: %w", &UnusableAnswerError{Why: "answer without access_token or expires_in"})
	}
	return a.AccessToken, time.Duration(a.ExpiresIn) * time.Second, nil
}
