package oauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/campus-it/ucs/pkg/store"
)

// exchangeCode is the authorization code grant (RFC 6749 §4.1.3, RFC 7636). Everything the
// request can get wrong (the client, redirect_uri, expiry, the PKCE verifier) is checked before
// the code is consumed: a client presenting another client's code, or a wrong verifier, changes
// nothing. Consuming is atomic (one insert keyed by the code) and comes last, once the new
// tokens are recorded (issueUserTokens); a code used before is a replay, which revokes the token
// family the code issued (its refresh tokens and its access tokens) and nothing else.
func (s *Service) exchangeCode(ctx context.Context, c *Client, form url.Values) (*TokenResponse, *Error) {
	code, redirect := form.Get("code"), form.Get("redirect_uri")
	if code == "" || redirect == "" {
		return nil, errorf(ErrInvalidRequest, "code and redirect_uri are required")
	}
	now := s.Now().Truncate(time.Millisecond) // before the revocations are read: see issueUserTokens
	hash := Hash(code)
	ac, err := s.Store.AuthCode(ctx, hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errorf(ErrInvalidGrant, "the code is unknown or expired")
	case err != nil:
		return nil, internal("the code could not be checked", fmt.Errorf("read code: %w", err))
	}
	if ac.ClientID != c.ID {
		return nil, errorf(ErrInvalidGrant, "the code was issued to another client")
	}
	if ac.Used {
		// Before any other check of the request, as Keycloak does: a used code presented
		// again by its client is a replay, whatever else it sends.
		return nil, s.codeReplayed(ctx, c, ac)
	}
	if ac.RedirectURI != redirect {
		return nil, errorf(ErrInvalidGrant, "redirect_uri differs from the authorization request's")
	}
	if !now.Before(ac.Expires) {
		return nil, errorf(ErrInvalidGrant, "the code expired")
	}
	if e := checkVerifier(ac.CodeChallenge, form.Get("code_verifier")); e != nil {
		return nil, e
	}
	se, e := s.stillGranted(ctx, c, ac.UserID, ac.SessionKey, ac.At)
	if e != nil {
		return nil, e
	}
	// The session's clients are told when it ends (back-channel logout): recorded before the
	// tokens are issued, so that no client holds tokens of a session that would not tell it.
	switch err := s.Store.AddSessionClient(ctx, se.Key, c.ID); {
	case errors.Is(err, store.ErrNotFound):
		return nil, errorf(ErrInvalidGrant, "the sign-in session ended")
	case err != nil:
		return nil, internal("the token could not be issued", err)
	}
	scope := stillAllowed(c, ac.Scope)
	return s.issueUserTokens(ctx, c, se, scope, scope, ac.Nonce, ac.Family, ac.AuthTime, now, ac.At, func(ctx context.Context) *Error {
		switch err := s.Store.ConsumeAuthCode(ctx, ac); {
		case errors.Is(err, store.ErrReplayed):
			// Another exchange of the same code won the race.
			return s.codeReplayed(ctx, c, ac)
		case err != nil:
			return internal("the code could not be checked", fmt.Errorf("consume code: %w", err))
		}
		return nil
	})
}

// codeReplayed answers a code used a second time. RFC 6749 §4.1.2: the tokens it issued are
// revoked. As in Keycloak, that ends the client's session only: the user stays signed in to
// every other application.
func (s *Service) codeReplayed(ctx context.Context, c *Client, ac store.AuthCode) *Error {
	if err := s.revokeFamily(ctx, ac.Family); err != nil {
		s.Logger.Error("revoking a replayed code's tokens failed", "client", c.ID, "err", err)
	}
	return errorf(ErrInvalidGrant, "the code was already used; the tokens it issued are revoked")
}

// checkVerifier is RFC 7636's check of code_verifier against the request's S256 challenge.
func checkVerifier(challenge, verifier string) *Error {
	switch {
	case challenge != "" && verifier == "":
		return errorf(ErrInvalidGrant, "code_verifier is required (PKCE)")
	case challenge != "" && !validChallenge(verifier):
		// RFC 7636 §4.1: 43 to 128 characters of the unreserved alphabet, as the challenge.
		return errorf(ErrInvalidGrant, "code_verifier must be 43 to 128 characters of A-Z, a-z, 0-9, '-', '.', '_' and '~'")
	case challenge != "":
		sum := sha256.Sum256([]byte(verifier))
		got := base64.RawURLEncoding.EncodeToString(sum[:])
		if subtle.ConstantTimeCompare([]byte(got), []byte(challenge)) != 1 {
			return errorf(ErrInvalidGrant, "code_verifier does not match the code_challenge")
		}
	case verifier != "":
		return errorf(ErrInvalidGrant, "code_verifier given, but the authorization request had no code_challenge")
	}
	return nil
}
