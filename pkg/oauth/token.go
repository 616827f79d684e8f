package oauth

import (
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/keys"
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
	Keys    *keys.Set
	Now     func() time.Time
	Logger  *slog.Logger
}

// Token handles a token request: the form of POST /v1/token, and the client's credentials
// from HTTP Basic authentication when it used that (basicOK).
func (s *Service) Token(form url.Values, basicID, basicSecret string, basicOK bool) (*TokenResponse, *Error) {
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
	grant := form.Get("grant_type")
	switch grant {
	case "":
		return nil, errorf(ErrInvalidRequest, "grant_type is required")
	case config.GrantClientCredentials:
	case "password":
		return nil, errorf(ErrUnsupportedGrantType, "the password grant is under construction; use client_credentials or authorization_code")
	case config.GrantAuthorizationCode, config.GrantRefreshToken:
		return nil, errorf(ErrUnsupportedGrantType, "grant_type %s is not enabled on this server", grant)
	default:
		return nil, errorf(ErrUnsupportedGrantType, "grant_type %q is not supported", grant)
	}
	if id == "" || secret == "" {
		return nil, errorf(ErrInvalidClient, "client_id and client_secret are required")
	}
	client, ok := s.Clients.Authenticate(id, secret)
	if !ok {
		return nil, errorf(ErrInvalidClient, "unknown client or wrong secret")
	}
	if !client.Allows(grant) {
		return nil, errorf(ErrUnauthorizedClient, "client %s may not use the %s grant", client.ID, grant)
	}
	scope, oerr := grantScope(client, form.Get("scope"), grant)
	if oerr != nil {
		return nil, oerr
	}
	tok, exp, err := s.issueAccess(client, grant, "service-account-"+client.ID, "", scope)
	if err != nil {
		s.Logger.Error("signing access token failed", "client", client.ID, "err", err)
		return nil, errorf(ErrServerError, "the token could not be issued")
	}
	return &TokenResponse{
		AccessToken: tok, ExpiresIn: int64(exp / time.Second), TokenType: "Bearer",
		NotBeforePolicy: 0, RefreshExpiresIn: 0, Scope: scope,
	}, nil
}

// grantScope settles the scope of a token: what was asked for, all of which the client must
// be allowed, or when nothing was asked, everything the client is allowed. openid is meaningful
// only with a user, so a client credentials token leaves it out unless asked for it.
func grantScope(c *Client, requested, grant string) (string, *Error) {
	if requested == "" {
		var out []string
		for _, s := range c.Scopes {
			if s == config.ScopeOpenID && grant == config.GrantClientCredentials {
				continue
			}
			out = append(out, s)
		}
		return strings.Join(out, " "), nil
	}
	var out []string
	for s := range strings.FieldsSeq(requested) {
		if !slices.Contains(c.Scopes, s) {
			return "", errorf(ErrInvalidScope, "scope %q is not granted to client %s", s, c.ID)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return strings.Join(out, " "), nil
}

func (s *Service) issueAccess(c *Client, grant, subject, userID, scope string) (string, time.Duration, error) {
	now := s.Now()
	ttl := c.AccessTokenTTL
	claims := &Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    s.Issuer,
			Subject:   subject,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			ID:        newJTI(),
		},
		Typ: "Bearer", Azp: c.ID, Scope: scope, Grant: grant, UserID: userID,
	}
	tok, err := s.Keys.Sign(claims)
	return tok, ttl, err
}

func newJTI() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
