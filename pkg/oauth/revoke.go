package oauth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/campus-it/ucs/pkg/store"
)

// Shared is state every front-end replica reads and any of them writes: revoked sessions, token
// families and grants, and the failure records of users. *natskv.Cache implements it: a NATS
// key-value bucket read through a bounded cache in memory that a watch of the bucket keeps
// current, so that a key read once is answered from memory, a write reaches every replica in
// milliseconds, and memory stays bounded however many keys callers make.
type Shared interface {
	// Get returns key's value; an error means the state could not be read.
	Get(ctx context.Context, key string) ([]byte, bool, error)
	Put(ctx context.Context, key string, value []byte) error
	Update(ctx context.Context, key string, change func(old []byte) ([]byte, error)) ([]byte, error)
}

// Keys of revocations in Shared: an ended sign-in session by its sid, a revoked token family
// (one client's tokens from one code exchange and its refreshes) by its id.
func revokedSessionKey(sid string) string   { return "sid." + sid }
func revokedFamilyKey(family string) string { return "fam." + family }

// revokedTokenKey is the key of one revoked access token, by its jti (a ULID).
func revokedTokenKey(jti string) string { return "jti." + jti }

// revokeFamily revokes a family's refresh tokens in the store and its access tokens at once on
// this replica and within milliseconds on the others.
func (s *Service) revokeFamily(ctx context.Context, family string) error {
	if family == "" {
		return nil
	}
	err := s.Store.RevokeFamily(ctx, family)
	if s.Revoked != nil {
		err = errors.Join(err, s.Revoked.Put(ctx, revokedFamilyKey(family), []byte("1")))
	}
	return err
}

// familyRevoked reports whether a family was revoked, or the store's error when it cannot say
// (a refresh is then refused as the server's fault, to be tried again; introspection answers
// inactive).
func (s *Service) familyRevoked(ctx context.Context, family string) (bool, error) {
	if s.Revoked != nil {
		if _, ok, err := s.Revoked.Get(ctx, revokedFamilyKey(family)); ok && err == nil {
			return true, nil
		}
	}
	revoked, err := s.Store.FamilyRevoked(ctx, family)
	if err != nil {
		return false, fmt.Errorf("family revocation: %w", err)
	}
	return revoked, nil
}

// revokedOrUnknown reports whether the refresh token t of client clientID is revoked (its own
// revocation, a reuse, the user's or the client's) or the store cannot say, and the error.
func (s *Service) revokedOrUnknown(ctx context.Context, t store.RefreshToken, clientID string) (bool, error) {
	if revoked, err := s.familyRevoked(ctx, t.Family); err != nil || revoked {
		return true, err
	}
	revoked, err := s.grantRevoked(ctx, t.UserID, clientID, t.At)
	return err != nil || revoked, err
}

// EndSession ends the sign-in session whose cookie hashes to key: its refresh tokens stop
// working, and its access tokens are refused by every replica within milliseconds.
func (s *Service) EndSession(ctx context.Context, key string) error {
	se, err := s.Store.Session(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.endSession(ctx, se)
}

func (s *Service) endSession(ctx context.Context, se store.Session) error {
	ended, err := s.Store.EndSession(ctx, se)
	if err != nil {
		return err
	}
	// The clients are told whatever happens next: the session has ended in the store. They are
	// those recorded when it ended: a code exchanged meanwhile records its client before, or
	// is refused (AddSessionClient).
	s.tellClients(ended)
	if s.Revoked != nil {
		if err := s.Revoked.Put(ctx, revokedSessionKey(se.SID), []byte("1")); err != nil {
			// The sign-out has happened: answering that it failed would leave the browser
			// where it is, its cookie set and the campus sign-on open, for a retry that finds
			// nothing to end. Every replica refuses the session's access tokens within
			// SessionRecheck by reading the store.
			s.Logger.Warn("telling the replicas of an ended session failed; they learn it from the store", "err", err)
		}
	}
	return nil
}

// live checks what can end an access token before it expires: its client disabled or
// removed (or disabled since the token was issued, or registered anew), and, for a user's token, its sign-in session ended or its family revoked.
// The shared revocations are read from memory on every call; the store is asked only when
// inStore is set (a first verification, a periodic recheck, introspection), and a store that
// cannot answer does not refuse the token: an outage must not sign every user out.
func (s *Service) live(c *Claims, inStore bool) *Error {
	// The registry is reloaded every ClientsReload: a client an operator disabled or removed
	// loses its tokens within that, on every replica.
	cl, ok := s.Clients.Lookup(c.Azp)
	if !ok {
		if s.Clients.Disabled(c.Azp) {
			return errorf(ErrInvalidToken, "the client of the token is disabled")
		}
		return errorf(ErrInvalidToken, "the client of the token is no longer registered")
	}
	if issued, ok := issuedAt(c); !cl.TokensNotBefore.IsZero() && (!ok || issued.Before(cl.TokensNotBefore)) {
		// Issued before the client was last disabled, or to a deleted client of the same id.
		return errorf(ErrInvalidToken, "the token was issued before its client was disabled or registered again")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// The token's own revocation (revokeAccess), whatever its kind.
	var errOwn error
	if s.Revoked != nil && c.ID != "" {
		var gone bool
		if _, gone, errOwn = s.Revoked.Get(ctx, revokedTokenKey(c.ID)); errOwn == nil && gone {
			return errorf(ErrInvalidToken, "the token was revoked")
		}
	}
	if c.SID == "" {
		// A client's token (client credentials). The store records no revocation of single
		// access tokens: one the shared revocations cannot tell of (NATS unreachable, when no
		// push is taken either) is accepted.
		if errOwn != nil {
			s.Logger.Warn("reading revocations failed; accepting a client's token", "err", errOwn)
		}
		return nil
	}
	if s.Revoked != nil {
		_, ended, err1 := s.Revoked.Get(ctx, revokedSessionKey(c.SID))
		if err1 == nil && ended {
			return errorf(ErrInvalidToken, "the sign-in session of the token ended")
		}
		var revoked bool
		var err2 error
		if c.Family != "" {
			if _, revoked, err2 = s.Revoked.Get(ctx, revokedFamilyKey(c.Family)); err2 == nil && revoked {
				return errorf(ErrInvalidToken, "the token was revoked")
			}
		}
		gone, err3 := s.accessRevoked(ctx, c)
		if err3 == nil && gone {
			return errorf(ErrInvalidToken, "the user revoked this application's access")
		}
		if err := errors.Join(errOwn, err1, err2, err3); err != nil {
			// The shared revocations cannot be read: the store, which records every one of
			// them too but a single access token's, answers instead.
			s.Logger.Warn("reading revocations failed; asking the store", "err", err)
			inStore = true
		}
	}
	if !inStore || s.Store == nil {
		return nil
	}
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := s.Store.SessionBySID(ctx, c.SID)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(ErrInvalidToken, "the sign-in session of the token ended")
	}
	if err != nil {
		s.Logger.Warn("checking a token's session failed; accepting it", "err", err)
		return nil
	}
	if c.Family != "" {
		revoked, err := s.Store.FamilyRevoked(ctx, c.Family)
		if err == nil && revoked {
			return errorf(ErrInvalidToken, "the token was revoked")
		}
	}
	if issued, ok := issuedAt(c); c.UserID != "" && ok {
		at, err := s.Store.GrantRevokedAt(ctx, c.UserID, c.Azp)
		if err == nil && !at.IsZero() && !issued.After(at) {
			return errorf(ErrInvalidToken, "the user revoked this application's access")
		}
	}
	return nil
}

// revokeAccess revokes the access token c at the request of client caller, as Keycloak does:
// every replica refuses it from now until it expires (the shared revocations outlive every
// access token), at the bearer check, userinfo and introspection; its sign-in session and
// refresh token stay. Another client's token is refused, and stays as it was (RFC 7009 §2.1).
func (s *Service) revokeAccess(ctx context.Context, caller *Client, c *Claims) *Error {
	if c.Azp != caller.ID {
		return errorf(ErrInvalidRequest, "the token was issued to another client")
	}
	if s.Revoked == nil || c.ID == "" {
		// No shared revocations (a service without NATS), or a token without a jti.
		return &Error{Code: "unsupported_token_type", Description: "this access token cannot be revoked; it expires on its own", Status: 400}
	}
	if err := s.Revoked.Put(ctx, revokedTokenKey(c.ID), []byte("1")); err != nil {
		return internal("the token could not be revoked", fmt.Errorf("revoke access token: %w", err))
	}
	return nil
}

// Revoke is RFC 7009 revocation. A refresh token's whole family is revoked, with the access
// tokens issued alongside it. An access token is revoked alone (revokeAccess). An unknown or
// invalid token is not an error (RFC 7009 §2.2); another client's token is invalid_request,
// and nothing changes (§2.1).
func (s *Service) Revoke(ctx context.Context, r ClientRequest) *Error {
	form := r.Form
	c, e := s.authenticateClient(ctx, r)
	if e != nil {
		return e
	}
	tok := form.Get("token")
	if tok == "" {
		return errorf(ErrInvalidRequest, "token is required")
	}
	if ac, e := s.parseAccess(tok); e == nil {
		return s.revokeAccess(ctx, c, ac)
	} else if strings.Count(tok, ".") == 2 {
		return nil // no refresh token of this service has dots
	}
	if s.Store == nil {
		return nil
	}
	t, err := s.Store.RefreshToken(ctx, Hash(tok))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err == nil && t.ClientID != c.ID:
		// RFC 7009 §2.1: refused, and the client told, rather than answered as if revoked;
		// the token stays as it was (Keycloak: "Unmatching clients").
		return errorf(ErrInvalidRequest, "the token was issued to another client")
	case err != nil:
		return internal("the token could not be revoked", fmt.Errorf("read refresh token: %w", err))
	}
	if err := s.revokeFamily(ctx, t.Family); err != nil {
		return internal("the token could not be revoked", fmt.Errorf("revoke family: %w", err))
	}
	return nil
}

// LogoutClient is Keycloak's logout by a client's back end: the client authenticates and names
// a session by a refresh token it was issued in it; the session ends, with its refresh tokens
// and access tokens, and its clients are told (back-channel logout). As in Keycloak, a token
// past its expiry still names its session (the session outlives the client's refresh token when
// other clients keep it in use), and a token of a session that has ended already is answered
// as done. A token that is unknown, another client's, used up or revoked is invalid_grant, and
// nothing changes.
func (s *Service) LogoutClient(ctx context.Context, r ClientRequest) *Error {
	c, e := s.authenticateClient(ctx, r)
	if e != nil {
		return e
	}
	tok := r.Form.Get("refresh_token")
	if tok == "" {
		return errorf(ErrInvalidRequest, "refresh_token is required")
	}
	if s.Store == nil {
		return errorf(ErrInvalidGrant, "invalid refresh token")
	}
	t, err := s.Store.RefreshToken(ctx, Hash(tok))
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && (t.ClientID != c.ID || t.Rotated)):
		return errorf(ErrInvalidGrant, "invalid refresh token")
	case err != nil:
		return internal("the session could not be ended", fmt.Errorf("read refresh token: %w", err))
	case t.At.Before(c.TokensNotBefore):
		return errorf(ErrInvalidGrant, "invalid refresh token")
	}
	switch revoked, err := s.revokedOrUnknown(ctx, t, c.ID); {
	case err != nil:
		return internal("the session could not be ended", err)
	case revoked:
		// A revoked token (its own revocation, a reuse, the user's or the client's) ends
		// nothing, as it refreshes nothing.
		return errorf(ErrInvalidGrant, "invalid refresh token")
	}
	se, err := s.Store.Session(ctx, t.SessionKey)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil // ended already: what the client asked for is done
	case err != nil:
		return internal("the session could not be ended", fmt.Errorf("read session: %w", err))
	}
	if err := s.endSession(ctx, se); err != nil {
		return internal("the session could not be ended", fmt.Errorf("end session: %w", err))
	}
	return nil
}

// Introspect is RFC 7662 introspection for confidential clients. It answers what the bearer
// check would: a token refused there is {"active": false} here. Only the token's own client,
// or a client registered with the introspect permission, learns more than that.
func (s *Service) Introspect(ctx context.Context, r ClientRequest) (map[string]any, *Error) {
	form := r.Form
	caller, e := s.authenticateClient(ctx, r)
	if e != nil {
		return nil, e
	}
	tok := form.Get("token")
	if tok == "" {
		return nil, errorf(ErrInvalidRequest, "token is required")
	}
	inactive := map[string]any{"active": false}
	mayKnow := func(owner string) bool { return caller.ID == owner || caller.Introspect }
	if strings.Count(tok, ".") == 2 {
		c, oerr := s.parseAccess(tok)
		if oerr != nil || s.live(c, true) != nil || !mayKnow(c.Azp) {
			return inactive, nil //nolint:nilerr // RFC 7662: a token that does not check out is inactive, not an error
		}
		out := map[string]any{
			"active": true, "scope": c.Scope, "client_id": c.Azp, "sub": c.Subject, "token_type": "Bearer",
			"exp": c.ExpiresAt.Unix(), "iat": c.IssuedAt.Unix(), "iss": c.Issuer, "jti": c.ID, "grant_type": c.Grant,
		}
		if c.UserID != "" {
			out["userid"], out["username"] = c.UserID, c.UserID
		}
		if c.SID != "" {
			out["sid"] = c.SID
		}
		return out, nil
	}
	if s.Store == nil {
		return inactive, nil
	}
	t, err := s.Store.RefreshToken(ctx, Hash(tok))
	if err != nil || t.Rotated || !s.Now().Before(t.Expires) || !mayKnow(t.ClientID) {
		return inactive, nil //nolint:nilerr // RFC 7662: a token that does not check out is inactive, not an error
	}
	if cl, ok := s.Clients.Lookup(t.ClientID); !ok || t.At.Before(cl.TokensNotBefore) {
		return inactive, nil
	}
	if revoked, _ := s.revokedOrUnknown(ctx, t, t.ClientID); revoked {
		return inactive, nil // a store that cannot say: inactive, as RFC 7662 has a token that does not check out
	}
	if _, err := s.Store.Session(ctx, t.SessionKey); err != nil {
		return inactive, nil //nolint:nilerr // RFC 7662: a token without its session is inactive, not an error
	}
	return map[string]any{
		"active": true, "scope": t.Scope, "client_id": t.ClientID, "sub": t.UserID, "userid": t.UserID,
		"token_type": "Refresh", "exp": t.Expires.Unix(), "iat": t.At.Unix(), "sid": t.SID,
	}, nil
}
