package oauth

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/campus-it/ucs/pkg/store"
)

// refresh is the refresh token grant (RFC 6749 §6) with rotation. The client, the expiry and
// the scope are checked before the token is used up: a client presenting another client's
// token, or asking for a scope it was not granted, changes nothing. A token used a second time
// has leaked, and its whole family is revoked.
func (s *Service) refresh(ctx context.Context, c *Client, form url.Values) (*TokenResponse, *Error) {
	rt := form.Get("refresh_token")
	if rt == "" {
		return nil, errorf(ErrInvalidRequest, "refresh_token is required")
	}
	now := s.Now().Truncate(time.Millisecond) // before the revocations are read: see issueUserTokens
	hash := Hash(rt)
	t, err := s.Store.RefreshToken(ctx, hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errorf(ErrInvalidGrant, "the refresh token is unknown")
	case err != nil:
		return nil, internal("the refresh token could not be checked", fmt.Errorf("read refresh token: %w", err))
	}
	if t.ClientID != c.ID {
		return nil, errorf(ErrInvalidGrant, "the refresh token was issued to another client")
	}
	if t.Rotated {
		return nil, s.refreshReplayed(ctx, c, t)
	}
	if !now.Before(t.Expires) {
		return nil, errorf(ErrInvalidGrant, "the refresh token expired")
	}
	// As in Keycloak, a scope the client may no longer ask for is dropped from the grant.
	grant := stillAllowed(c, t.Scope)
	scope := grant
	if asked := form.Get("scope"); asked != "" {
		have := strings.Fields(grant)
		var out []string
		for sc := range strings.FieldsSeq(asked) {
			if !slices.Contains(have, sc) {
				return nil, errorf(ErrInvalidScope, "a scope was asked that this refresh token was not granted")
			}
			if !slices.Contains(out, sc) {
				out = append(out, sc)
			}
		}
		scope = strings.Join(out, " ")
	}
	switch revoked, err := s.familyRevoked(ctx, t.Family); {
	case err != nil:
		return nil, internal("the refresh token could not be checked; try again", err)
	case revoked:
		return nil, errorf(ErrInvalidGrant, "the refresh token was revoked")
	}
	se, e := s.stillGranted(ctx, c, t.UserID, t.SessionKey, t.At)
	if e != nil {
		return nil, e
	}
	// RFC 6749 §6: a narrower scope narrows this access token only; the refresh token issued
	// now keeps the original grant's scope, so the family's later refreshes may ask for all of it.
	// The token is used up last, once its successor is recorded (issueUserTokens).
	return s.issueUserTokens(ctx, c, se, scope, grant, t.Nonce, t.Family, t.AuthTime, now, t.At, func(ctx context.Context) *Error {
		switch err := s.Store.RotateRefreshToken(ctx, t); {
		case errors.Is(err, store.ErrReplayed):
			return s.refreshReplayed(ctx, c, t)
		case err != nil:
			return internal("the refresh token could not be checked", fmt.Errorf("rotate refresh token: %w", err))
		}
		return nil
	})
}

// stillAllowed is scope without the scopes client c may no longer ask for (the operator took
// them from it since they were granted).
func stillAllowed(c *Client, scope string) string {
	out := strings.Fields(scope)
	out = slices.DeleteFunc(out, func(sc string) bool { return !c.MayAsk(sc) })
	return strings.Join(out, " ")
}

func (s *Service) refreshReplayed(ctx context.Context, c *Client, t store.RefreshToken) *Error {
	if err := s.revokeFamily(ctx, t.Family); err != nil {
		s.Logger.Error("revoking a reused refresh token's family failed", "client", c.ID, "err", err)
	}
	return errorf(ErrInvalidGrant, "the refresh token was already used; its successors are revoked")
}
