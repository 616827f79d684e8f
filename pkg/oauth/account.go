package oauth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/campus-it/ucs/pkg/store"
)

// MaxSessionsPerUser bounds a user's live sign-in sessions (the account page's list, and the
// tokens they keep valid): a sign-in beyond it ends the oldest. The records of ended sessions
// stay until the sweep removes them, a day after their session_ttl.
const MaxSessionsPerUser = 100

// ErrNotYours answers a request of the account page about a session or application that is
// not the signed-in user's (or no longer exists): nothing is changed.
var ErrNotYours = errors.New("no such session or application of this user")

// revokedGrantKey is the key in Shared of a user's revocation of a client's access; its value
// is the Unix second of the revocation, read as the last millisecond of that second. Earlier
// versions read it so, and alone: a front end of one during a rolling update refuses the
// tokens of that second. revokedGrantMilliKey holds the same revocation to the millisecond,
// which accessRevoked reads first.
func revokedGrantKey(userID, clientID string) string {
	return "grant." + keyPart(userID) + "." + keyPart(clientID)
}

func revokedGrantMilliKey(userID, clientID string) string {
	return "grantms." + keyPart(userID) + "." + keyPart(clientID)
}

// SignIn records the sign-in se in a browser whose current session's key is current ("" for
// none). A browser keeps one session, as Keycloak's do: a live session of the same user is
// renewed (its auth_time, provider and expiry become se's) and keeps its key and sid, so that
// the tokens issued in it end with the browser's sign-out; another user's session ends first,
// with its tokens. It returns the session in force, and whether it is se (a new session, whose
// cookie the browser must get).
func (s *Service) SignIn(ctx context.Context, current string, se store.Session) (store.Session, bool, error) {
	if current != "" {
		cur, err := s.Store.Session(ctx, current)
		switch {
		case err == nil && cur.UserID == se.UserID:
			cur.AuthTime, cur.IDP, cur.Address, cur.Agent, cur.Expires, cur.Idle = se.AuthTime, se.IDP, se.Address, se.Agent, se.Expires, se.Idle
			err = s.Store.RenewSession(ctx, cur)
			if err == nil {
				return cur, false, nil
			}
			if !errors.Is(err, store.ErrNotFound) {
				return store.Session{}, false, err
			}
		case err == nil:
			if err := s.endSession(ctx, cur); err != nil {
				return store.Session{}, false, err
			}
		case !errors.Is(err, store.ErrNotFound):
			return store.Session{}, false, err
		}
	}
	return se, true, s.StartSession(ctx, se)
}

// StartSession stores a new sign-in session. When the user then has more than
// MaxSessionsPerUser live sessions, the oldest are ended.
func (s *Service) StartSession(ctx context.Context, se store.Session) error {
	refs, err := s.Store.PutSession(ctx, se)
	if err != nil {
		return err
	}
	for _, r := range refs[:max(0, len(refs)-MaxSessionsPerUser)] {
		if err := s.EndSession(ctx, r.Key); err != nil {
			s.Logger.Warn("ending a user's oldest session failed", "err", err)
		}
	}
	return nil
}

// Grants returns the applications userID has granted access to, in the order of the
// configuration.
func (s *Service) Grants(ctx context.Context, userID string) ([]store.Grant, error) {
	var out []store.Grant
	for _, id := range s.Clients.IDs() {
		g, err := s.Store.Grant(ctx, userID, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		// A record no newer than the client's last revocation is a use recorded by a grant
		// the revocation raced (issueUserTokens): not a grant the user holds.
		if revoked, err := s.grantRevoked(ctx, userID, id, g.Latest()); err != nil {
			return nil, err
		} else if revoked {
			continue
		}
		out = append(out, g)
	}
	return out, nil
}

// Sessions returns userID's live sign-in sessions, newest first.
func (s *Service) Sessions(ctx context.Context, userID string) ([]store.Session, error) {
	return s.Store.UserSessions(ctx, userID)
}

// EndUserSession ends the session sid of userID (ErrNotYours when userID has no such session),
// as a logout of that session does.
func (s *Service) EndUserSession(ctx context.Context, userID, sid string) error {
	se, err := s.Store.SessionBySID(ctx, sid)
	if errors.Is(err, store.ErrNotFound) || (err == nil && se.UserID != userID) {
		return ErrNotYours
	}
	if err != nil {
		return err
	}
	return s.endSession(ctx, se)
}

// RevokeGrant withdraws what userID granted clientID, as Keycloak's account console does: the
// consent is forgotten, so the next sign-in asks again; the application's refresh tokens and
// codes for the user stop working; its access tokens are refused at once by this replica and
// within milliseconds by the others (the shared bucket's watch); and the application is told
// by back-channel logout, for each of the user's sessions it was signed in to, which stay for
// the other applications.
func (s *Service) RevokeGrant(ctx context.Context, userID, clientID string) error {
	c, ok := s.Clients.Lookup(clientID)
	if !ok {
		return ErrNotYours
	}
	g, err := s.Store.Grant(ctx, userID, clientID)
	if errors.Is(err, store.ErrNotFound) {
		return ErrNotYours
	} else if err != nil {
		return err
	}
	// The revocation's time is no earlier than anything issued for the grant: what this front
	// end would stamp now (Client.IssuedAt), and the grant's record, whose times are the stamps
	// of its consent, of its latest code and of its latest tokens, which a front end whose
	// clock is ahead of this one's may have set.
	now := c.IssuedAt(s.Now())
	if last := g.Latest(); last.After(now) {
		now = last
	}
	// Nothing issued before now outlives a refresh token, a code or an access token from then;
	// the record of a refresh token issued before is kept as long as the session it names, at
	// most SessionTTL from now (the sweep drops a token of a revoked grant then, even of a
	// session renewed since), for the server-side logout, which a revoked token must not do.
	keep := now.Add(max(s.RefreshTTL, CodeTTL, s.SessionTTL) + 24*time.Hour)
	if err := s.Store.RevokeGrant(ctx, userID, clientID, now, keep); err != nil {
		return err
	}
	if s.Revoked != nil {
		if err := errors.Join(s.Revoked.Put(ctx, revokedGrantMilliKey(userID, clientID), strconv.AppendInt(nil, now.UnixMilli(), 10)),
			s.Revoked.Put(ctx, revokedGrantKey(userID, clientID), strconv.AppendInt(nil, now.Unix(), 10))); err != nil {
			return err
		}
	}
	sessions, err := s.Store.UserSessions(ctx, userID)
	if err != nil {
		// The access is withdrawn; only the telling is lost.
		s.Logger.Error("the application could not be told of the revoked access", "client", clientID, "err", err)
		return nil
	}
	for _, se := range sessions {
		if slices.Contains(se.Clients, clientID) {
			s.tellClient(clientID, se)
		}
	}
	return nil
}

// grantRevoked reports whether userID revoked clientID's access at or after issued (a code or
// refresh token issued then is dead), or the store's error when it cannot say.
func (s *Service) grantRevoked(ctx context.Context, userID, clientID string, issued time.Time) (bool, error) {
	at, err := s.Store.GrantRevokedAt(ctx, userID, clientID)
	if err != nil {
		return false, fmt.Errorf("grant revocation: %w", err)
	}
	return !at.IsZero() && !issued.After(at), nil
}

// stillGranted checks what a code or refresh token issued at issued needs to be used: the
// user has not revoked c's access since, and the sign-in session lives. It returns the session.
// A store that cannot say is a server_error, which the client may try again, not an
// invalid_grant, which tells it the grant is gone: nothing is issued either way.
func (s *Service) stillGranted(ctx context.Context, c *Client, userID, sessionKey string, issued time.Time) (store.Session, *Error) {
	if issued.Before(c.TokensNotBefore) {
		return store.Session{}, errorf(ErrInvalidGrant, "issued before the client was disabled or registered again")
	}
	switch revoked, err := s.grantRevoked(ctx, userID, c.ID, issued); {
	case err != nil:
		return store.Session{}, internal("the grant could not be checked; try again", err)
	case revoked:
		return store.Session{}, errorf(ErrInvalidGrant, "the user revoked this application's access")
	}
	se, err := s.Store.Session(ctx, sessionKey)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return se, errorf(ErrInvalidGrant, "the sign-in session ended")
	case err != nil:
		return se, internal("the grant could not be checked; try again", fmt.Errorf("read session: %w", err))
	}
	// The grant uses the session: its idle end moves on (never back), and the tokens issued
	// end by then.
	if idle := s.IdleEnd(se); idle.After(se.Idle) {
		se.Idle = idle
	}
	s.touch(ctx, se, se.Idle)
	return se, nil
}

// IdleEnd is when session se ends if nothing uses it from now on: RefreshTTL from now, the
// lifetime of a refresh token issued now (Keycloak's SSO Session Idle), never past its end.
func (s *Service) IdleEnd(se store.Session) time.Time {
	idle := s.Now().Add(s.RefreshTTL)
	if s.RefreshTTL <= 0 || se.Expires.Before(idle) {
		return se.Expires
	}
	return idle
}

// Touch records a use of session se: its idle end moves on (IdleEnd). A store that cannot
// take it leaves the session to end sooner, never later.
func (s *Service) Touch(ctx context.Context, se store.Session) { s.touch(ctx, se, s.IdleEnd(se)) }

// Hold keeps session se from ending idle before until, the end of sign-in request's time (the
// user reads its consent page), or IdleEnd if that is later; never past its expiry.
func (s *Service) Hold(ctx context.Context, se store.Session, request string, until time.Time) {
	idle := s.IdleEnd(se)
	if until.After(idle) {
		idle = until
		if se.Expires.Before(idle) {
			idle = se.Expires
		}
	}
	if err := s.Store.HoldSession(ctx, se.Key, request, idle); err != nil {
		s.Logger.Warn("recording a use of a sign-in session failed", "err", err)
	}
}

// Release ends request's Hold of session se once its consent page is answered (accepted or
// refused): the session ends idle refresh_token_ttl from now, as after any use, not when the
// sign-in request would have, unless another consent page of the session still holds it.
func (s *Service) Release(ctx context.Context, se store.Session, request string) {
	if err := s.Store.ReleaseSession(ctx, se.Key, request, s.IdleEnd(se)); err != nil {
		s.Logger.Warn("recording a use of a sign-in session failed", "err", err)
	}
}

func (s *Service) touch(ctx context.Context, se store.Session, idle time.Time) {
	if err := s.Store.TouchSession(ctx, se.Key, idle); err != nil {
		s.Logger.Warn("recording a use of a sign-in session failed", "err", err)
	}
}

// accessRevoked reports whether the grant of an access token was revoked at or after it was
// issued (issuedAt), from the shared revocations.
func (s *Service) accessRevoked(ctx context.Context, c *Claims) (bool, error) {
	issued, ok := issuedAt(c)
	if s.Revoked == nil || c.UserID == "" || !ok {
		return false, nil
	}
	// Both keys: an earlier version, during a rolling update, writes the seconds alone, and may
	// write them after this one wrote both.
	ms, okMS, err1 := s.Revoked.Get(ctx, revokedGrantMilliKey(c.UserID, c.Azp))
	sec, okSec, err2 := s.Revoked.Get(ctx, revokedGrantKey(c.UserID, c.Azp))
	if err := errors.Join(err1, err2); err != nil {
		return false, err
	}
	if !okMS && !okSec {
		return false, nil
	}
	atMS, errMS := strconv.ParseInt(string(ms), 10, 64)
	atSec, errSec := strconv.ParseInt(string(sec), 10, 64)
	if okMS && errMS != nil || okSec && errSec != nil {
		return true, nil //nolint:nilerr // an unreadable revocation counts as revoked: fail closed
	}
	// The millisecond, unless the second is of a later revocation (by an earlier version).
	at := atMS
	if okSec && (!okMS || atSec > atMS/1000) {
		at = atSec*1000 + 999
	}
	return !issued.After(time.UnixMilli(at)), nil
}
