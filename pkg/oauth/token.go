package oauth

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/oklog/ulid/v2"

	"github.com/campus-it/ucs/pkg/keys"
	"github.com/campus-it/ucs/pkg/metrics"
)

// Claims are the claims of the service's access tokens.
type Claims struct {
	jwt.RegisteredClaims
	// Typ is "Bearer" for access tokens, as Keycloak writes it.
	Typ string `json:"typ"`
	// Azp is the client the token was issued to.
	Azp string `json:"azp"`
	// Scope is the granted scopes, space separated.
	Scope string `json:"scope"`
	// Grant is the grant type the token was obtained with, so each interface can accept only
	// the grants it supports.
	Grant string `json:"grant_type"`
	// UserID is the campus user number, for tokens obtained through a user's sign-in.
	UserID string `json:"userid,omitempty"`
	// SID is the sign-in session the token belongs to.
	SID string `json:"sid,omitempty"`
	// Family is the token family of a user's token: one client's tokens from one code exchange
	// and the refreshes that followed it, revoked together.
	Family string `json:"fam,omitempty"`
}

// HasScope reports whether the token grants scope.
func (c *Claims) HasScope(scope string) bool {
	for s := range strings.FieldsSeq(c.Scope) {
		if s == scope {
			return true
		}
	}
	return false
}

// TokenResponse is the token endpoint's answer, with the fields the interface lists.
type TokenResponse struct {
	AccessToken      string `json:"access_token"`
	ExpiresIn        int64  `json:"expires_in"`
	RefreshExpiresIn int64  `json:"refresh_expires_in"`
	RefreshToken     string `json:"refresh_token,omitempty"`
	TokenType        string `json:"token_type"`
	IDToken          string `json:"id_token,omitempty"`
	NotBeforePolicy  int64  `json:"not-before-policy"`
	SessionState     string `json:"session_state,omitempty"`
	Scope            string `json:"scope"`
}

// Service issues and verifies tokens.
type Service struct {
	Issuer  string
	Clients *Clients
	// Keys sign access tokens (ES256 by default: verified here, and fast to sign).
	Keys *keys.Set
	// IDKeys sign ID tokens, by algorithm (RS256 and ES256); nil: Keys signs them too.
	IDKeys map[string]*keys.Set
	// Store keeps codes and refresh tokens; nil turns the user grants off.
	Store SignInStore
	// RefreshTTL is the lifetime of refresh tokens (never beyond their session).
	RefreshTTL time.Duration
	// SessionTTL is the longest a sign-in session lasts from a sign-in (a sign-in again in the
	// same browser renews it): a user's revocation of an application is kept that long and a
	// day more, as the refresh tokens of its sessions are (see store.RefreshToken.Kept).
	SessionTTL time.Duration
	// Revoked holds the revocations every replica honours at once; nil: the store alone, read
	// on each recheck.
	Revoked Shared
	// Backchannel sends logout tokens to the clients of a session that ended; nil: none.
	Backchannel *Backchannel
	// Guard applies rate limits and brute-force detection; nil: none.
	Guard *Guard
	// Metrics counts refused client authentications; nil counts nothing.
	Metrics *metrics.Metrics
	Now     func() time.Time
	Logger  *slog.Logger
}

// Token handles a token request: the form of POST /v1/token, and the client's credentials
// from HTTP Basic authentication when it used that (basicOK).
func (s *Service) Token(ctx context.Context, r ClientRequest) (*TokenResponse, *Error) {
	form := r.Form
	grant := form.Get("grant_type")
	switch grant {
	case "":
		return nil, errorf(ErrInvalidRequest, "grant_type is required")
	case GrantClientCredentials, GrantAuthorizationCode, GrantRefreshToken:
	case "password":
		return nil, errorf(ErrUnsupportedGrantType, "the password grant is under construction; use client_credentials or authorization_code")
	default:
		return nil, errorf(ErrUnsupportedGrantType, "grant_type must be client_credentials, authorization_code or refresh_token")
	}
	if e := s.Guard.AllowAddress(ctx, r.Addr); e != nil {
		return nil, e
	}
	client, e := s.authenticateClient(ctx, r)
	if e != nil {
		return nil, e
	}
	if e := s.Guard.AllowClient(ctx, client); e != nil {
		return nil, e
	}
	if !client.Allows(grant) {
		return nil, errorf(ErrUnauthorizedClient, "client %s may not use the %s grant", client.ID, grant)
	}
	if (grant == GrantAuthorizationCode || grant == GrantRefreshToken) && s.Store == nil {
		return nil, errorf(ErrUnsupportedGrantType, "grant_type %s is not enabled on this server", grant)
	}
	switch grant {
	case GrantAuthorizationCode:
		return s.exchangeCode(ctx, client, form)
	case GrantRefreshToken:
		return s.refresh(ctx, client, form)
	}
	return s.clientCredentials(client, form)
}

// An access token of a session (until not zero) lives no longer than the session.
func (s *Service) issueAccessFor(c *Client, grant, subject, userID, scope, sid, family string, now, until time.Time) (string, time.Duration, error) {
	now = c.IssuedAt(now)
	ttl := c.AccessTokenTTL
	if !until.IsZero() && until.Before(now.Add(ttl)) {
		ttl = max(until.Sub(now).Truncate(time.Second), time.Second)
	}
	claims := &Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    s.Issuer,
			Subject:   subject,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			ID:        accessJTI(now),
		},
		Typ: "Bearer", Azp: c.ID, Scope: scope, Grant: grant, UserID: userID, SID: sid, Family: family,
	}
	tok, err := s.Keys.Sign(claims)
	return tok, ttl, err
}

// accessJTI is the jti of an access token issued at now: a ULID, whose first 48 bits are now
// in milliseconds and the other 80 random. iat has whole seconds; the jti tells when within
// its second the token was issued, against a revocation in that second (issuedAt).
func accessJTI(now time.Time) string {
	return ulid.MustNew(ulid.Timestamp(now), rand.Reader).String()
}

// issuedAt is the earliest time the access token c may have been issued: to the millisecond
// when its jti is the ULID of a time in its iat's second (accessJTI), else the start of that
// second (tokens of an earlier version), so that a revocation or a disable of the client
// within that second refuses it. ok is false without iat.
func issuedAt(c *Claims) (t time.Time, ok bool) {
	if c.IssuedAt == nil {
		return time.Time{}, false
	}
	sec := c.IssuedAt.Unix()
	if id, err := ulid.ParseStrict(c.ID); err == nil {
		if t := ulid.Time(id.Time()); t.Unix() == sec {
			return t, true
		}
	}
	return time.Unix(sec, 0), true
}

func newJTI() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// idKeys returns the keys that sign the ID tokens of c.
func (s *Service) idKeys(c *Client) *keys.Set {
	if k, ok := s.IDKeys[c.IDTokenAlg]; ok {
		return k
	}
	return s.Keys
}

// IDTokenAlgs are the algorithms ID tokens are signed with.
func (s *Service) IDTokenAlgs() []string {
	if len(s.IDKeys) == 0 {
		return []string{s.Keys.Alg()}
	}
	return slices.Sorted(maps.Keys(s.IDKeys))
}

// KeySets are every distinct key set, for the JWKS and for rotation.
func (s *Service) KeySets() []*keys.Set {
	out := []*keys.Set{s.Keys}
	for _, alg := range s.IDTokenAlgs() {
		if k := s.IDKeys[alg]; k != nil && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}
