package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net"
	"strings"
	"time"

	"github.com/campus-it/ucs/pkg/natskv"
)

// RateLimits are the token endpoint's token-bucket limits (configuration: oauth.rate_limits).
type RateLimits struct {
	Disabled                        bool
	PerClient, PerAddress           float64 // tokens per second
	PerClientBurst, PerAddressBurst int
}

// BruteForce is Keycloak's brute-force detection of a user (configuration: oauth.brute_force):
// after Failures failures a wait of WaitIncrement per Failures failures, at most MaxWait;
// failures forgotten after FailureReset without one; two failures within QuickLoginCheck
// impose at least MinQuickLoginWait. AddressFailures and AddressFailureBurst slow an address
// that fails too often (defaults DefaultAddressFailures and DefaultAddressFailureBurst).
type BruteForce struct {
	Disabled                                                                 bool
	Failures                                                                 int
	WaitIncrement, MaxWait, FailureReset, QuickLoginCheck, MinQuickLoginWait time.Duration
	AddressFailures                                                          float64
	AddressFailureBurst                                                      int
}

// An address may fail to authenticate (a wrong client secret, a wrong password, an unknown
// user) DefaultAddressFailureBurst times at once, then DefaultAddressFailures times a second
// (7,200 an hour); past that its attempts are answered 429 with Retry-After until it is back
// under the rate. Ten thousand people behind one campus NAT, one in five mistyping a password
// within the same ten minutes (2,000 failures), stay below it; a guesser is held to two
// attempts a second.
const (
	DefaultAddressFailures     = 2.0
	DefaultAddressFailureBurst = 1000
)

// Guard is the token endpoint's and the login form's defence, shared by every front-end
// replica:
//   - rate limits of token requests, per address and per client (429);
//   - Keycloak's brute-force detection of a user of the login form: only that user is
//     locked, temporarily, and only a user of the directory has a failure record;
//   - the slowing of an address that fails too often (429), never a lock.
//
// A client is never locked: its secret is a generated high-entropy value no one can guess, and
// its id is public, so a lock would only let anyone shut a client out. A correct secret is
// always accepted, whatever failed before, from anywhere.
//
// A nil *Guard guards nothing.
type Guard struct {
	Limits     RateLimits
	BruteForce BruteForce
	// Failures holds the failure records of users (natskv.Cache: bounded memory).
	Failures Shared
	// Buckets holds the token buckets of the rate limits and of the slowing of addresses.
	Buckets *natskv.TokenBuckets
	Logger  *slog.Logger
	Now     func() time.Time
}

// sharedWait bounds a read or change of the guard's shared records in NATS for a request
// without a deadline of its own (every request the server answers has one: RequestWait).
const sharedWait = 2 * time.Second

// shared is the context of a read or change of the guard's shared records for the request of
// ctx: not ended by the request's end (a client that half-closes its connection ends the
// request's context at once, and still reads the answer), but by its deadline.
func shared(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		d = time.Now().Add(sharedWait)
	}
	return context.WithDeadline(context.WithoutCancel(ctx), d)
}

// refuses reports whether err, of a read or change of the shared records in the context sctx
// (shared), refuses the request rather than letting it through. NATS away lets it through (an
// outage must not stop sign-ins): an error before the request's time is out. The request's time
// running out first does not: guesses sent at once by the hundred made the server slow enough to
// pass the limits uncounted that way. (NATS that does not answer at all, a stream without a
// leader, holds the request that long too; it is over then, and refused.)
func (g *Guard) refuses(sctx context.Context, err error) bool {
	return err != nil && errors.Is(sctx.Err(), context.DeadlineExceeded)
}

// take takes a token of key's bucket. NATS being away lets the request through: the limit is
// a defence, not a dependency, and must not stop sign-ins.
func (g *Guard) take(ctx context.Context, key string, r natskv.Rate) (bool, time.Duration) {
	sctx, cancel := shared(ctx)
	defer cancel()
	ok, wait, err := g.Buckets.Take(sctx, key, r)
	if g.refuses(sctx, err) {
		return false, time.Second
	}
	if err != nil {
		g.Logger.Warn("rate limit unavailable; allowing", "err", err)
		return true, 0
	}
	return ok, wait
}

// tooMany is the answer to a request over a rate limit.
func tooMany(wait time.Duration, what string) *Error {
	secs := max(1, int(math.Ceil(wait.Seconds())))
	return &Error{Code: ErrTooManyRequests, Description: "too many " + what + "; retry later", Status: 429,
		RetryAfter: time.Duration(secs) * time.Second}
}

// AllowAddress applies the per-address limit of token requests.
func (g *Guard) AllowAddress(ctx context.Context, addr string) *Error {
	if g == nil || g.Limits.Disabled || addr == "" {
		return nil
	}
	r := natskv.Rate{PerSecond: g.Limits.PerAddress, Burst: g.Limits.PerAddressBurst}
	if ok, wait := g.take(ctx, "addr."+addressPart(addr), r); !ok {
		return tooMany(wait, "token requests from this address")
	}
	return nil
}

// AllowClient applies a client's limit of grants; it is asked only once the client
// authenticated, so no one else can use up a client's grants.
func (g *Guard) AllowClient(ctx context.Context, c *Client) *Error {
	if g == nil || g.Limits.Disabled {
		return nil
	}
	r := natskv.Rate{PerSecond: g.Limits.PerClient, Burst: g.Limits.PerClientBurst}
	if c.RateLimit > 0 {
		r = natskv.Rate{PerSecond: c.RateLimit, Burst: max(1, int(2*c.RateLimit))}
	}
	if ok, wait := g.take(ctx, "client."+keyPart(c.ID), r); !ok {
		return tooMany(wait, "token requests from this client")
	}
	return nil
}

// failureRate is the rate at which an address may fail.
func (g *Guard) failureRate() natskv.Rate {
	r := natskv.Rate{PerSecond: g.BruteForce.AddressFailures, Burst: g.BruteForce.AddressFailureBurst}
	if r.PerSecond <= 0 {
		r.PerSecond = DefaultAddressFailures
	}
	if r.Burst <= 0 {
		r.Burst = DefaultAddressFailureBurst
	}
	return r
}

// failureKey is the bucket of an address's failures.
func failureKey(addr string) string { return "fail." + addressPart(addr) }

// Slowed answers 429 while addr is over its rate of failures, at any front end: the login form
// asks before it checks a password, so that a slowed address learns nothing of its guesses.
// A record that cannot be read does not slow: an outage of NATS must not stop sign-ins.
func (g *Guard) Slowed(ctx context.Context, addr string) *Error {
	if g == nil || addr == "" {
		return nil
	}
	sctx, cancel := shared(ctx)
	defer cancel()
	empty, wait, err := g.Buckets.Empty(sctx, failureKey(addr), g.failureRate())
	if g.refuses(sctx, err) {
		return tooMany(time.Second, "failed sign-ins from this address")
	}
	if err != nil {
		g.Logger.Warn("reading failed sign-ins of an address failed; not slowing it", "err", err)
		return nil
	}
	if empty {
		return tooMany(wait, "failed sign-ins from this address")
	}
	return nil
}

// AddressFailed counts a failed authentication from addr, and answers 429 when addr has
// gone over its rate of failures. This limit is fixed: BruteForce.Disabled turns off the locks
// of users, not it.
func (g *Guard) AddressFailed(ctx context.Context, addr string) *Error {
	if g == nil || addr == "" {
		return nil
	}
	if ok, wait := g.take(ctx, failureKey(addr), g.failureRate()); !ok {
		return tooMany(wait, "failed sign-ins from this address")
	}
	return nil
}

// failures is the brute-force record of one user, as Keycloak keeps it.
type failures struct {
	N         int   `json:"n"`
	Last      int64 `json:"last"`       // unix ms of the last failure
	NotBefore int64 `json:"not_before"` // unix ms before which every attempt is refused
}

// userKey is the brute-force record of a user of the login form.
func userKey(user string) string { return "user." + keyPart(user) }

// UserLocked reports whether user is temporarily locked after failed sign-ins. A record that
// cannot be read does not lock: an outage of NATS must not stop sign-ins.
func (g *Guard) UserLocked(ctx context.Context, user string) bool {
	if g == nil || g.BruteForce.Disabled {
		return false
	}
	v, ok, err := g.Failures.Get(ctx, userKey(user))
	if err != nil {
		g.Logger.Warn("reading failed sign-ins failed; not locking", "err", err)
		return false
	}
	var f failures
	return ok && json.Unmarshal(v, &f) == nil && g.Now().UnixMilli() < f.NotBefore
}

// UserAttempt is UserLocked for a user of the directory (a made-up name gets no record), who
// is about to be checked: unless the user is locked, the attempt is counted as a failure at
// once, in one atomic update of the shared record, and UserSucceeded forgets it if the password
// was right. So guesses sent at once are counted before any is checked, and none past the
// lock is checked, however many are in flight at however many front ends.
//
// A failure locks the user for a while as Keycloak does: after every Failures failures the
// wait grows by WaitIncrement, up to MaxWait; two failures closer than QuickLoginCheck impose
// at least MinQuickLoginWait; failures are forgotten after FailureReset without one.
func (g *Guard) UserAttempt(ctx context.Context, user string) (locked bool) {
	if g == nil || g.BruteForce.Disabled {
		return false
	}
	bf := g.BruteForce
	var now time.Time
	sctx, cancel := shared(ctx)
	defer cancel()
	_, err := g.Failures.Update(sctx, userKey(user), func(old []byte) ([]byte, error) {
		now, locked = g.Now(), false // read at each try
		var f failures
		if old != nil {
			_ = json.Unmarshal(old, &f)
		}
		if now.UnixMilli() < f.NotBefore {
			locked = true
			return nil, errLocked // not counted, nothing written
		}
		var delta time.Duration
		if f.Last > 0 {
			delta = now.Sub(time.UnixMilli(f.Last))
			if delta > bf.FailureReset {
				f = failures{}
			}
		}
		f.N++
		f.Last = now.UnixMilli()
		wait := bf.WaitIncrement * time.Duration(f.N/bf.Failures)
		if delta > 0 && delta < bf.QuickLoginCheck {
			wait = max(wait, bf.MinQuickLoginWait)
		}
		wait = min(wait, bf.MaxWait)
		if wait > 0 {
			f.NotBefore = now.Add(wait).UnixMilli()
		}
		return json.Marshal(f)
	})
	if err != nil && !errors.Is(err, errLocked) {
		if g.refuses(sctx, err) {
			// Out of time, NATS not away: the attempt counts as locked, never as checked
			// uncounted.
			return true
		}
		g.Logger.Warn("counting a sign-in attempt failed; not locking", "err", err)
		return false
	}
	return locked
}

// errLocked ends the update of a locked user's record without a write.
var errLocked = errors.New("locked")

// UserSucceeded forgets the failures of a user who signed in, when there are any.
func (g *Guard) UserSucceeded(ctx context.Context, user string) {
	if g == nil || g.BruteForce.Disabled {
		return
	}
	if v, ok, err := g.Failures.Get(ctx, userKey(user)); err != nil || !ok || string(v) == "{}" {
		return
	}
	if err := g.Failures.Put(ctx, userKey(user), []byte("{}")); err != nil {
		g.Logger.Warn("clearing failed sign-ins failed", "err", err)
	}
}

// addressPart is the key part of a source address: an IPv6 address stands for its /64, the
// block one subscriber gets, so that a host cannot escape its limits by changing address
// within it.
func addressPart(addr string) string {
	if ip := net.ParseIP(addr); ip != nil && ip.To4() == nil {
		return keyPart(ip.Mask(net.CIDRMask(64, 128)).String())
	}
	return keyPart(addr)
}

// keyPart makes s a valid part of a key-value key: as it is when it is short and plain,
// base64url when short, else a hash. It is at most 65 bytes.
func keyPart(s string) string {
	switch {
	case s == "" || len(s) > 45:
		h := sha256.Sum256([]byte(s))
		return "h" + hex.EncodeToString(h[:16])
	case strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == "":
		return "p" + s
	}
	return "b" + base64.RawURLEncoding.EncodeToString([]byte(s))
}
