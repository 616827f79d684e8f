package oauth

import (
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/golang-jwt/jwt/v5"
	lru "github.com/hashicorp/golang-lru/v2"
)

// Verifier checks bearer tokens. A verified token is kept, keyed by the SHA-256 of the token,
// until it expires, so the push hot path checks a signature once per token rather than once per
// request (clients reuse a token for up to its whole lifetime, as the interface tells them to).
type Verifier struct {
	svc   *Service
	cache *lru.Cache[[32]byte, cached]
}

// cached is a verified token; checked is when its sign-in session was last found alive. An
// entry is never changed in place: a recheck stores a new one.
type cached struct {
	c       *Claims
	checked time.Time
}

// SessionRecheck is how often a token of a user's sign-in (one with a sid) is checked against
// the store: its session and its family. Logout and revocations reach every replica within
// milliseconds through the shared revocations; this recheck also catches a session that simply expired,
// and a revocation the shared state missed. Client credentials tokens have no session and are
// never rechecked.
const SessionRecheck = time.Minute

// NewVerifier returns a verifier keeping at most maxCached tokens (default 100000).
func NewVerifier(svc *Service, maxCached int) *Verifier {
	if maxCached <= 0 {
		maxCached = 100_000
	}
	cache, err := lru.New[[32]byte, cached](maxCached)
	if err != nil {
		panic(err) // only for a size below 1, excluded above
	}
	return &Verifier{svc: svc, cache: cache}
}

// Requirement is what an interface demands of a token.
type Requirement struct {
	// Scope the token must grant; empty for none.
	Scope string
	// Grants the token may have been obtained with; empty for any.
	Grants []string
}

// Verify checks the Authorization header value against req and returns the token's claims.
// A refusal is an *Error with code invalid_request, invalid_token or insufficient_scope.
func (v *Verifier) Verify(authorization string, req Requirement) (*Claims, *Error) {
	tok, ok := bearerToken(authorization)
	if !ok {
		if authorization == "" {
			return nil, &Error{Code: "", Description: "an access token is required", Status: 401}
		}
		return nil, errorf(ErrInvalidRequest, "the Authorization header must be: Bearer <access token>")
	}
	c, err := v.claims(tok)
	if err != nil {
		return nil, err
	}
	if req.Scope != "" && !c.HasScope(req.Scope) {
		return nil, errorf(ErrInsufficientScope, "the token lacks scope %s", req.Scope)
	}
	if len(req.Grants) > 0 && !slices.Contains(req.Grants, c.Grant) {
		return nil, errorf(ErrInsufficientScope, "tokens of the %s grant are not accepted here", c.Grant)
	}
	return c, nil
}

func (v *Verifier) claims(tok string) (*Claims, *Error) {
	// Hash the token's bytes in place: Sum256 only reads them, and a copy would be one
	// allocation per request on the push hot path.
	key := sha256.Sum256(unsafe.Slice(unsafe.StringData(tok), len(tok)))
	now := v.svc.Now()
	if e, ok := v.cache.Get(key); ok {
		if !now.Before(e.c.ExpiresAt.Time) {
			v.cache.Remove(key)
			return nil, errorf(ErrInvalidToken, "the access token expired")
		}
		// Revocations and removed clients are read from memory on every use; the store is
		// asked again only every SessionRecheck.
		recheck := e.c.SID != "" && now.Sub(e.checked) >= SessionRecheck
		if oerr := v.svc.live(e.c, recheck); oerr != nil {
			v.cache.Remove(key)
			return nil, oerr
		}
		if recheck {
			v.cache.Add(key, cached{c: e.c, checked: now})
		}
		return e.c, nil
	}
	c, oerr := v.svc.parseAccess(tok)
	if oerr != nil {
		return nil, oerr
	}
	if oerr := v.svc.live(c, true); oerr != nil {
		return nil, oerr
	}
	// When full, the least recently used token goes; it is only verified again on its next use.
	v.cache.Add(key, cached{c: c, checked: now})
	return c, nil
}

// parseAccess verifies an access token's signature, issuer and expiry, and that it is an
// access token. Every published key set verifies, each with its own algorithm pinned: a token
// signed before oauth.signing_alg changed, or by a front end whose setting differs during a
// rolling restart, holds while its key is published, as in Keycloak.
func (s *Service) parseAccess(tok string) (*Claims, *Error) {
	var c *Claims
	var err error
	for _, ks := range s.KeySets() {
		c = &Claims{}
		if err = ks.Parse(tok, c, jwt.WithIssuer(s.Issuer), jwt.WithTimeFunc(s.Now)); err == nil || errors.Is(err, jwt.ErrTokenExpired) {
			break
		}
	}
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, errorf(ErrInvalidToken, "the access token expired")
	case err != nil:
		return nil, errorf(ErrInvalidToken, "the access token is invalid")
	case c.Typ != "Bearer" || c.Grant == "":
		// ID tokens carry no grant_type: they are not accepted as access tokens.
		return nil, errorf(ErrInvalidToken, "the token is not an access token")
	}
	return c, nil
}

func bearerToken(h string) (string, bool) {
	const p = "Bearer "
	if len(h) <= len(p) || !strings.EqualFold(h[:len(p)], p) {
		return "", false
	}
	t := strings.TrimSpace(h[len(p):])
	return t, t != "" && !strings.ContainsAny(t, " \t")
}
