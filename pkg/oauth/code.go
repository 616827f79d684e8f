package oauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/store"
)

// CodeTTL is how long an authorization code may wait for its exchange.
const CodeTTL = 60 * time.Second

// SignInStore keeps what the authorization code and refresh grants need; *store.Store
// implements it.
type SignInStore interface {
	PutAuthCode(ctx context.Context, c store.AuthCode) error
	ConsumeAuthCode(ctx context.Context, hash, newFamily string) (store.AuthCode, error)
	Session(ctx context.Context, key string) (store.Session, error)
	SessionBySID(ctx context.Context, sid string) (store.Session, error)
	EndSession(ctx context.Context, key string) error
	PutRefreshToken(ctx context.Context, t store.RefreshToken) error
	RotateRefreshToken(ctx context.Context, hash string) (store.RefreshToken, error)
	RefreshToken(ctx context.Context, hash string) (store.RefreshToken, error)
	RevokeFamily(ctx context.Context, id string) error
	FamilyRevoked(ctx context.Context, id string) (bool, error)
}

// IDClaims are the claims of an ID token: the interface's (exp, iat, typ, azp, scope, userid)
// and OpenID Connect's (iss, aud, sub, nonce, auth_time, sid).
type IDClaims struct {
	jwt.RegisteredClaims
	// Typ is "Bearer", as the interface lists it. An ID token has no grant_type claim, which is
	// what keeps it from passing as an access token.
	Typ      string `json:"typ"`
	Azp      string `json:"azp"`
	Scope    string `json:"scope"`
	UserID   string `json:"userid"`
	Nonce    string `json:"nonce,omitempty"`
	AuthTime int64  `json:"auth_time"`
	SID      string `json:"sid"`
}

// Hash is the hex SHA-256 under which codes, refresh tokens and session cookies are stored.
func Hash(secret string) string {
	s := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(s[:])
}

// NewSecret returns 256 random bits, base64url: codes, refresh tokens, cookies.
func NewSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// CodeGrant is what an issued code carries into its exchange.
type CodeGrant struct {
	ClientID, RedirectURI, Nonce, Scope, CodeChallenge string
	UserID, SessionKey, SID                            string
	AuthTime                                           time.Time
}

// IssueCode stores a new authorization code and returns it.
func (s *Service) IssueCode(ctx context.Context, g CodeGrant) (string, error) {
	code := NewSecret()
	now := s.Now()
	err := s.Store.PutAuthCode(ctx, store.AuthCode{
		Hash: Hash(code), ClientID: g.ClientID, RedirectURI: g.RedirectURI, Nonce: g.Nonce, Scope: g.Scope,
		CodeChallenge: g.CodeChallenge, UserID: g.UserID, SessionKey: g.SessionKey, SID: g.SID,
		AuthTime: g.AuthTime, Expires: now.Add(CodeTTL), At: now,
	})
	return code, err
}

// authenticateClient finds the client of a token, revocation or introspection request from
// the form or HTTP Basic credentials.
func (s *Service) authenticateClient(form url.Values, basicID, basicSecret string, basicOK bool) (*Client, *Error) {
	id, secret := form.Get("client_id"), form.Get("client_secret")
	if basicOK {
		// RFC 6749 §2.3.1: Basic credentials are form-encoded before they are joined.
		bid, err1 := url.QueryUnescape(basicID)
		bsec, err2 := url.QueryUnescape(basicSecret)
		if err1 != nil || err2 != nil {
			return nil, errorf(ErrInvalidClient, "malformed Basic credentials")
		}
		if id != "" && id != bid {
			return nil, errorf(ErrInvalidRequest, "client_id in the form differs from the Basic credentials")
		}
		if secret != "" {
			return nil, errorf(ErrInvalidRequest, "client credentials given twice: use Basic or the form, not both")
		}
		id, secret = bid, bsec
	}
	if id == "" || secret == "" {
		return nil, errorf(ErrInvalidClient, "client_id and client_secret are required")
	}
	client, ok := s.Clients.Authenticate(id, secret)
	if !ok {
		return nil, errorf(ErrInvalidClient, "unknown client or wrong secret")
	}
	return client, nil
}

func (s *Service) exchangeCode(ctx context.Context, c *Client, form url.Values) (*TokenResponse, *Error) {
	code, redirect := form.Get("code"), form.Get("redirect_uri")
	if code == "" || redirect == "" {
		return nil, errorf(ErrInvalidRequest, "code and redirect_uri are required")
	}
	fam := NewSecret()
	ac, err := s.Store.ConsumeAuthCode(ctx, Hash(code), fam)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errorf(ErrInvalidGrant, "the code is unknown or expired")
	case errors.Is(err, store.ErrReplayed):
		// RFC 6749 §4.1.2: a code used twice revokes what it issued.
		// Its refresh tokens go with their family, its access tokens with the sign-in session,
		// which a replayed code shows to be compromised.
		if rerr := s.Store.RevokeFamily(ctx, ac.Family); rerr != nil {
			s.Logger.Error("revoking a replayed code's tokens failed", "client", c.ID, "err", rerr)
		}
		if rerr := s.Store.EndSession(ctx, ac.SessionKey); rerr != nil {
			s.Logger.Error("ending a replayed code's session failed", "client", c.ID, "err", rerr)
		}
		return nil, errorf(ErrInvalidGrant, "the code was already used; the tokens it issued are revoked")
	case err != nil:
		s.Logger.Error("consuming a code failed", "err", err)
		return nil, errorf(ErrServerError, "the code could not be checked")
	}
	if ac.ClientID != c.ID {
		return nil, errorf(ErrInvalidGrant, "the code was issued to another client")
	}
	if !s.Now().Before(ac.Expires) {
		return nil, errorf(ErrInvalidGrant, "the code expired")
	}
	if ac.RedirectURI != redirect {
		return nil, errorf(ErrInvalidGrant, "redirect_uri differs from the authorization request's")
	}
	verifier := form.Get("code_verifier")
	switch {
	case ac.CodeChallenge != "" && verifier == "":
		return nil, errorf(ErrInvalidGrant, "code_verifier is required (PKCE)")
	case ac.CodeChallenge != "":
		sum := sha256.Sum256([]byte(verifier))
		got := base64.RawURLEncoding.EncodeToString(sum[:])
		if subtle.ConstantTimeCompare([]byte(got), []byte(ac.CodeChallenge)) != 1 {
			return nil, errorf(ErrInvalidGrant, "code_verifier does not match the code_challenge")
		}
	case verifier != "":
		return nil, errorf(ErrInvalidGrant, "code_verifier given, but the authorization request had no code_challenge")
	}
	se, err := s.Store.Session(ctx, ac.SessionKey)
	if err != nil {
		return nil, errorf(ErrInvalidGrant, "the sign-in session ended")
	}
	return s.issueUserTokens(ctx, c, se, ac.Scope, ac.Nonce, fam)
}

func (s *Service) refresh(ctx context.Context, c *Client, form url.Values) (*TokenResponse, *Error) {
	rt := form.Get("refresh_token")
	if rt == "" {
		return nil, errorf(ErrInvalidRequest, "refresh_token is required")
	}
	t, err := s.Store.RotateRefreshToken(ctx, Hash(rt))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errorf(ErrInvalidGrant, "the refresh token is unknown")
	case errors.Is(err, store.ErrReplayed):
		// A rotated token used again means it leaked: end the whole family.
		if rerr := s.Store.RevokeFamily(ctx, t.Family); rerr != nil {
			s.Logger.Error("revoking a reused refresh token's family failed", "client", c.ID, "err", rerr)
		}
		return nil, errorf(ErrInvalidGrant, "the refresh token was already used; its successors are revoked")
	case err != nil:
		s.Logger.Error("rotating a refresh token failed", "err", err)
		return nil, errorf(ErrServerError, "the refresh token could not be checked")
	}
	if t.ClientID != c.ID {
		return nil, errorf(ErrInvalidGrant, "the refresh token was issued to another client")
	}
	if !s.Now().Before(t.Expires) {
		return nil, errorf(ErrInvalidGrant, "the refresh token expired")
	}
	if revoked, err := s.Store.FamilyRevoked(ctx, t.Family); err != nil || revoked {
		return nil, errorf(ErrInvalidGrant, "the refresh token was revoked")
	}
	se, err := s.Store.Session(ctx, t.SessionKey)
	if err != nil {
		return nil, errorf(ErrInvalidGrant, "the sign-in session ended")
	}
	scope := t.Scope
	if asked := form.Get("scope"); asked != "" {
		have := strings.Fields(t.Scope)
		var out []string
		for sc := range strings.FieldsSeq(asked) {
			if !slices.Contains(have, sc) {
				return nil, errorf(ErrInvalidScope, "scope %q was not granted to this refresh token", sc)
			}
			out = append(out, sc)
		}
		scope = strings.Join(out, " ")
	}
	return s.issueUserTokens(ctx, c, se, scope, t.Nonce, t.Family)
}

// issueUserTokens issues an access token, a refresh token of family fam and, with openid, an
// ID token, for the user of session se.
func (s *Service) issueUserTokens(ctx context.Context, c *Client, se store.Session, scope, nonce, fam string) (*TokenResponse, *Error) {
	now := s.Now()
	access, ttl, err := s.issueAccessFor(c, config.GrantAuthorizationCode, se.UserID, se.UserID, scope, se.SID)
	if err != nil {
		s.Logger.Error("signing access token failed", "client", c.ID, "err", err)
		return nil, errorf(ErrServerError, "the token could not be issued")
	}
	resp := &TokenResponse{AccessToken: access, ExpiresIn: int64(ttl / time.Second), TokenType: "Bearer", Scope: scope, SessionState: se.SID}
	if c.Allows(config.GrantRefreshToken) {
		exp := now.Add(s.RefreshTTL)
		if se.Expires.Before(exp) {
			exp = se.Expires
		}
		rt := NewSecret()
		if err := s.Store.PutRefreshToken(ctx, store.RefreshToken{
			Hash: Hash(rt), Family: fam, ClientID: c.ID, UserID: se.UserID, SessionKey: se.Key, SID: se.SID,
			Scope: scope, Nonce: nonce, AuthTime: se.AuthTime, Expires: exp, At: now,
		}); err != nil {
			s.Logger.Error("storing refresh token failed", "client", c.ID, "err", err)
			return nil, errorf(ErrServerError, "the token could not be issued")
		}
		resp.RefreshToken, resp.RefreshExpiresIn = rt, int64(exp.Sub(now)/time.Second)
	}
	if slices.Contains(strings.Fields(scope), config.ScopeOpenID) {
		id, err := s.Keys.Sign(&IDClaims{
			RegisteredClaims: jwt.RegisteredClaims{
				Issuer: s.Issuer, Subject: se.UserID, Audience: jwt.ClaimStrings{c.ID},
				IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)), ID: newJTI(),
			},
			Typ: "Bearer", Azp: c.ID, Scope: scope, UserID: se.UserID, Nonce: nonce,
			AuthTime: se.AuthTime.Unix(), SID: se.SID,
		})
		if err != nil {
			s.Logger.Error("signing ID token failed", "client", c.ID, "err", err)
			return nil, errorf(ErrServerError, "the token could not be issued")
		}
		resp.IDToken = id
	}
	return resp, nil
}

// ParseIDToken verifies an ID token this service issued (for logout's id_token_hint). Expired
// tokens are accepted, as a hint may be old.
func (s *Service) ParseIDToken(tok string) (*IDClaims, error) {
	c := &IDClaims{}
	// The signature is checked; the times are not (a hint may have expired).
	if err := s.Keys.Parse(tok, c, jwt.WithoutClaimsValidation()); err != nil {
		return nil, err
	}
	if c.Issuer != s.Issuer || c.Azp == "" {
		return nil, errors.New("not an ID token of this issuer")
	}
	return c, nil
}

// Revoke is RFC 7009 revocation: a refresh token's whole family is revoked. Access tokens are
// self-contained JWTs that live at most their lifetime and are not revocable one by one: they
// are refused with unsupported_token_type rather than pretended revoked. An unknown token is
// not an error (RFC 7009 §2.2).
func (s *Service) Revoke(ctx context.Context, form url.Values, basicID, basicSecret string, basicOK bool) *Error {
	c, e := s.authenticateClient(form, basicID, basicSecret, basicOK)
	if e != nil {
		return e
	}
	tok := form.Get("token")
	if tok == "" {
		return errorf(ErrInvalidRequest, "token is required")
	}
	if strings.Count(tok, ".") == 2 {
		return &Error{Code: "unsupported_token_type", Description: "access tokens expire on their own and cannot be revoked; revoke the refresh token", Status: 400}
	}
	t, err := s.Store.RefreshToken(ctx, Hash(tok))
	if errors.Is(err, store.ErrNotFound) || (err == nil && t.ClientID != c.ID) {
		return nil
	}
	if err != nil {
		return errorf(ErrServerError, "the token could not be revoked")
	}
	if err := s.Store.RevokeFamily(ctx, t.Family); err != nil {
		return errorf(ErrServerError, "the token could not be revoked")
	}
	return nil
}

// Introspect is RFC 7662 introspection for confidential clients.
func (s *Service) Introspect(ctx context.Context, form url.Values, basicID, basicSecret string, basicOK bool) (map[string]any, *Error) {
	if _, e := s.authenticateClient(form, basicID, basicSecret, basicOK); e != nil {
		return nil, e
	}
	tok := form.Get("token")
	if tok == "" {
		return nil, errorf(ErrInvalidRequest, "token is required")
	}
	inactive := map[string]any{"active": false}
	if strings.Count(tok, ".") == 2 {
		c := &Claims{}
		if err := s.Keys.Parse(tok, c, jwt.WithIssuer(s.Issuer), jwt.WithTimeFunc(s.Now)); err != nil || c.Grant == "" {
			return inactive, nil
		}
		out := map[string]any{
			"active": true, "scope": c.Scope, "client_id": c.Azp, "sub": c.Subject, "token_type": "Bearer",
			"exp": c.ExpiresAt.Unix(), "iat": c.IssuedAt.Unix(), "iss": c.Issuer, "jti": c.ID, "grant_type": c.Grant,
		}
		if c.UserID != "" {
			out["userid"], out["username"] = c.UserID, c.UserID
		}
		return out, nil
	}
	t, err := s.Store.RefreshToken(ctx, Hash(tok))
	if err != nil || t.Rotated || !s.Now().Before(t.Expires) {
		return inactive, nil
	}
	if revoked, err := s.Store.FamilyRevoked(ctx, t.Family); err != nil || revoked {
		return inactive, nil
	}
	if _, err := s.Store.Session(ctx, t.SessionKey); err != nil {
		return inactive, nil
	}
	return map[string]any{
		"active": true, "scope": t.Scope, "client_id": t.ClientID, "sub": t.UserID, "userid": t.UserID,
		"token_type": "Refresh", "exp": t.Expires.Unix(), "iat": t.At.Unix(),
	}, nil
}
