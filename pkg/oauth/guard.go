package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Counter is state changed atomically by every replica: rate-limit buckets. *queue.Counters
// (a NATS key-value bucket) implements it.
type Counter interface {
	Update(ctx context.Context, key string, change func(old []byte) ([]byte, error)) ([]byte, error)
}

// RateLimits are the token endpoint's token-bucket limits (configuration: oauth.rate_limits).
type RateLimits struct {
	Disabled                        bool
	PerClient, PerAddress           float64 // tokens per second
	PerClientBurst, PerAddressBurst int
}

// BruteForce is Keycloak's brute-force detection (configuration: oauth.brute_force): after
// Failures failures a wait of WaitIncrement per Failures failures, at most MaxWait; failures
// forgotten after FailureReset without one; two failures within QuickLoginCheck impose at least
// MinQuickLoginWait.
type BruteForce struct {
	Disabled                                                                 bool
	Failures                                                                 int
	WaitIncrement, MaxWait, FailureReset, QuickLoginCheck, MinQuickLoginWait time.Duration
}

// Guard is the token endpoint's and the login form's defence: token-bucket rate limits and
// Keycloak's brute-force detection, both shared by every front-end replica. A nil *Guard
// guards nothing.
type Guard struct {
	Limits     RateLimits
	BruteForce BruteForce
	// Failures holds failure counts and blocks, read from memory on every request.
	Failures Shared
	// Buckets holds the rate-limit buckets.
	Buckets Counter
	Now     func() time.Time
	Logger  *slog.Logger

	mu     sync.Mutex
	leases *lru.Cache[string, *lease]
}

// lease is the part of a shared token bucket this replica took: tokens it may hand out until
// until, or, when the bucket was empty, the time before which asking again is pointless.
type lease struct {
	tokens     int
	until      time.Time
	emptyUntil time.Time
}

// leaseTime is how long tokens taken from a shared bucket stay usable here; unused ones lapse.
const leaseTime = time.Second

// bucket is a shared token bucket as stored.
type bucket struct {
	Tokens float64 `json:"t"`
	At     int64   `json:"at"` // unix nanoseconds of the last change
}

// allow takes one token from key's bucket (rate per second, burst at most). A replica takes a
// tenth of a second's worth of tokens from the shared bucket at a time and hands them out from
// memory, so the limit holds across replicas while a grant costs a round trip to NATS only a
// few times a second. When no token is left it returns how long until one is.
func (g *Guard) allow(ctx context.Context, key string, rate float64, burst int) (bool, time.Duration) {
	now := g.Now()
	g.mu.Lock()
	if g.leases == nil {
		g.leases, _ = lru.New[string, *lease](100_000)
	}
	if l, ok := g.leases.Get(key); ok {
		if l.tokens > 0 && now.Before(l.until) {
			l.tokens--
			g.mu.Unlock()
			return true, 0
		}
		if now.Before(l.emptyUntil) {
			g.mu.Unlock()
			return false, l.emptyUntil.Sub(now)
		}
	}
	g.mu.Unlock()

	chunk := min(max(1, int(rate/10)), burst)
	var got int
	var wait time.Duration
	_, err := g.Buckets.Update(ctx, key, func(old []byte) ([]byte, error) {
		b := bucket{Tokens: float64(burst), At: now.UnixNano()}
		if old != nil {
			_ = json.Unmarshal(old, &b)
		}
		elapsed := max(0, now.Sub(time.Unix(0, b.At)))
		tokens := math.Min(float64(burst), b.Tokens+rate*elapsed.Seconds())
		got = min(chunk, int(tokens))
		tokens -= float64(got)
		wait = 0
		if got == 0 {
			wait = time.Duration((1 - tokens) / rate * float64(time.Second))
		}
		return json.Marshal(bucket{Tokens: tokens, At: now.UnixNano()})
	})
	if err != nil {
		// The limit is a defence, not a dependency: NATS being away must not stop sign-ins.
		g.Logger.Warn("rate limit unavailable; allowing", "err", err)
		return true, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if got == 0 {
		g.leases.Add(key, &lease{emptyUntil: now.Add(wait)})
		return false, wait
	}
	l, ok := g.leases.Get(key)
	if !ok || !now.Before(l.until) {
		l = &lease{}
		g.leases.Add(key, l)
	}
	l.tokens += got - 1
	l.until = now.Add(leaseTime)
	return true, 0
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
	if ok, wait := g.allow(ctx, "addr."+keyPart(addr), g.Limits.PerAddress, g.Limits.PerAddressBurst); !ok {
		return tooMany(wait, "token requests from this address")
	}
	return nil
}

// AllowClient applies a client's limit of grants.
func (g *Guard) AllowClient(ctx context.Context, c *Client) *Error {
	if g == nil || g.Limits.Disabled {
		return nil
	}
	rate, burst := g.Limits.PerClient, g.Limits.PerClientBurst
	if c.RateLimit > 0 {
		rate, burst = c.RateLimit, max(1, int(2*c.RateLimit))
	}
	if ok, wait := g.allow(ctx, "client."+keyPart(c.ID), rate, burst); !ok {
		return tooMany(wait, "token requests from this client")
	}
	return nil
}

// failures is the brute-force record of one client id, user or address, as Keycloak keeps it.
type failures struct {
	N         int   `json:"n"`
	Last      int64 `json:"last"`       // unix ms of the last failure
	NotBefore int64 `json:"not_before"` // unix ms before which every attempt is refused
}

// Blocked reports whether any of keys is blocked now; keys come from ClientKey, UserKey and
// AddressKey. It reads memory only.
func (g *Guard) Blocked(keys ...string) bool {
	if g == nil || g.BruteForce.Disabled {
		return false
	}
	now := g.Now().UnixMilli()
	for _, k := range keys {
		if v, ok := g.Failures.Get(k); ok {
			var f failures
			if json.Unmarshal(v, &f) == nil && now < f.NotBefore {
				return true
			}
		}
	}
	return false
}

// Failed counts a failure against each of keys, and blocks those that reach a wait, as
// Keycloak does: after every Failures failures the wait grows by WaitIncrement, up to MaxWait;
// two failures closer than QuickLoginCheck impose at least MinQuickLoginWait; failures are
// forgotten after FailureReset without one.
func (g *Guard) Failed(ctx context.Context, keys ...string) {
	if g == nil || g.BruteForce.Disabled {
		return
	}
	bf := g.BruteForce
	now := g.Now()
	for _, k := range keys {
		_, err := g.Failures.Update(ctx, k, func(old []byte) ([]byte, error) {
			var f failures
			if old != nil {
				_ = json.Unmarshal(old, &f)
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
		if err != nil {
			g.Logger.Warn("recording a failed authentication failed", "err", err)
		}
	}
}

// Succeeded forgets the failures of key (a client or a user that authenticated), when it has
// any.
func (g *Guard) Succeeded(ctx context.Context, key string) {
	if g == nil || g.BruteForce.Disabled {
		return
	}
	if _, ok := g.Failures.Get(key); !ok {
		return
	}
	if err := g.Failures.Put(ctx, key, []byte("{}")); err != nil {
		g.Logger.Warn("clearing failed authentications failed", "err", err)
	}
}

// ClientKey is the brute-force record of a client id.
func ClientKey(id string) string { return "client." + keyPart(id) }

// UserKey is the brute-force record of a user of the login form.
func UserKey(user string) string { return "user." + keyPart(user) }

// AddressKey is the brute-force record of a source address at the token endpoint.
func AddressKey(addr string) string { return "addr." + keyPart(addr) }

// LoginAddressKey is the brute-force record of a source address at the login form.
func LoginAddressKey(addr string) string { return "login." + keyPart(addr) }

// keyPart makes s a valid part of a key-value key: as it is when it is short and plain,
// base64url when short, else a hash.
func keyPart(s string) string {
	switch {
	case s == "" || len(s) > 64:
		h := sha256.Sum256([]byte(s))
		return "h" + hex.EncodeToString(h[:16])
	case strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == "":
		return "p" + s
	}
	return "b" + base64.RawURLEncoding.EncodeToString([]byte(s))
}
