package store

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
)

// What a user's account holds besides the sessions themselves: the list of the user's sessions
// (user_sessions, one document per user) and the applications the user has granted (consents,
// one document per user and client). Both are read by a key the reader already holds.

// SessionRef is one entry of a user's list of sessions.
type SessionRef struct {
	Key     string    `bson:"key"`
	SID     string    `bson:"sid"`
	Expires time.Time `bson:"expires"`
}

type userSessions struct {
	ID       string       `bson:"_id"`
	Sessions []SessionRef `bson:"sessions"`
	// Expires is the latest expiry of the sessions, after which the sweep drops the list.
	Expires time.Time `bson:"expires"`
}

// Grant is what a user has granted one application: the scopes consented to (empty for an
// application that needs no consent) and when it was granted and last used.
type Grant struct {
	ID       string    `bson:"_id"` // "userid|client"
	UserID   string    `bson:"userid"`
	ClientID string    `bson:"client"`
	Scopes   []string  `bson:"scopes"`
	Scope    string    `bson:"scope,omitempty"` // the scope of the latest tokens
	At       time.Time `bson:"at"`
	// Given is when the user last consented (zero in records of earlier versions: At).
	Given time.Time `bson:"given,omitempty"`
	// Issued is the stamp of the latest code issued for the grant (PutAuthCode).
	Issued   time.Time `bson:"issued,omitempty"`
	LastUsed time.Time `bson:"last_used,omitempty"`
}

// Latest is the latest stamp the record carries: of its creation, its consent, its latest code
// or its latest tokens.
func (g Grant) Latest() time.Time {
	last := g.At
	for _, t := range []time.Time{g.Given, g.Issued, g.LastUsed} {
		if t.After(last) {
			last = t
		}
	}
	return last
}

type revokedGrant struct {
	ID      string    `bson:"_id"`
	At      time.Time `bson:"at"`
	Expires time.Time `bson:"expires"`
}

func grantID(userID, clientID string) string { return userID + "|" + clientID }

// userLocks serialise the changes of one user's list of sessions within this process. MongoDB
// applies each update to a document atomically; FerretDB reads and then writes, so two
// simultaneous sign-ins of one user could lose an entry. FerretDB serves a single process (the
// standalone stack), where this lock closes that gap; on MongoDB it costs nothing that matters.
type userLocks struct {
	seed  maphash.Seed
	once  sync.Once
	locks [64]sync.Mutex
}

func (l *userLocks) lock(userID string) func() {
	l.once.Do(func() { l.seed = maphash.MakeSeed() })
	m := &l.locks[maphash.String(l.seed, userID)%uint64(len(l.locks))]
	m.Lock()
	return m.Unlock
}

// PutSession stores a sign-in session and adds it to its user's list. It returns the user's
// live sessions, the new one included, oldest first; entries of sessions that ended (expired,
// unused past their idle end, or signed out) are dropped from the list.
func (s *Store) PutSession(ctx context.Context, se Session) ([]SessionRef, error) {
	if _, err := s.col(colSessions).InsertOne(ctx, se); err != nil {
		return nil, fmt.Errorf("insert session: %w", err)
	}
	if _, err := s.col(colSessionIDs).InsertOne(ctx, sessionID{SID: se.SID, Key: se.Key, Expires: se.Expires}); err != nil {
		return nil, fmt.Errorf("insert session id: %w", err)
	}
	defer s.users.lock(se.UserID)()
	ref := SessionRef{Key: se.Key, SID: se.SID, Expires: se.Expires}
	push := func() error {
		_, err := s.col(colUserSessions).UpdateOne(ctx, bson.M{"_id": se.UserID},
			bson.M{"$push": bson.M{"sessions": ref}, "$max": bson.M{"expires": se.Expires}}, options.Update().SetUpsert(true))
		return err
	}
	// Two first sign-ins of a user on two replicas may both try to insert the list; the loser
	// finds it there when it tries again (MongoDB's advice for upserts).
	err := push()
	if mongo.IsDuplicateKeyError(err) {
		err = push()
	}
	if err != nil {
		return nil, fmt.Errorf("list session: %w", err)
	}
	var list userSessions
	if err := s.getByID(ctx, colUserSessions, se.UserID, &list); err != nil {
		return nil, err
	}
	now := s.now()
	var live, gone []SessionRef
	for _, r := range list.Sessions {
		if !now.Before(r.Expires) {
			gone = append(gone, r)
			continue
		}
		// A session also ends unused (its idle end) or signed out; the list does not say so.
		switch _, err := s.Session(ctx, r.Key); {
		case errors.Is(err, ErrNotFound):
			gone = append(gone, r)
		case err != nil:
			return nil, err
		default:
			live = append(live, r)
		}
	}
	if err := s.unlist(ctx, se.UserID, gone); err != nil {
		s.log.Warn("dropping ended sessions from a user's list failed", "err", err)
	}
	return live, nil
}

// RenewSession records a new sign-in in the live session se.Key: its auth_time, provider,
// address, agent and expiry are se's, its key and sid stay. ErrNotFound when it is not live.
func (s *Store) RenewSession(ctx context.Context, se Session) error {
	unlock := s.sessions.lock(se.Key)
	old, err := s.Session(ctx, se.Key)
	if err != nil {
		unlock()
		return err
	}
	_, err = s.col(colSessions).UpdateOne(ctx, bson.M{"_id": old.Key}, bson.M{"$set": bson.M{
		"auth_time": se.AuthTime, "idp": se.IDP, "addr": se.Address, "agent": se.Agent, "expires": se.Expires, "idle": se.Idle}})
	unlock()
	if err != nil {
		return fmt.Errorf("renew session: %w", err)
	}
	if _, err := s.col(colSessionIDs).UpdateOne(ctx, bson.M{"_id": old.SID}, bson.M{"$set": bson.M{"expires": se.Expires}}); err != nil {
		return fmt.Errorf("renew session id: %w", err)
	}
	// The user's list holds the session once, last, with its new expiry: every entry of it
	// goes, whatever expiry it was listed with (another renewal may have come between).
	defer s.users.lock(old.UserID)()
	var list userSessions
	switch err := s.getByID(ctx, colUserSessions, old.UserID, &list); {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return err
	}
	if err := s.unlist(ctx, old.UserID, slices.DeleteFunc(list.Sessions, func(r SessionRef) bool { return r.Key != old.Key })); err != nil {
		return err
	}
	if _, err := s.Session(ctx, old.Key); err != nil {
		return err // ended meanwhile: off the list it stays
	}
	_, err = s.col(colUserSessions).UpdateOne(ctx, bson.M{"_id": old.UserID},
		bson.M{"$push": bson.M{"sessions": SessionRef{Key: old.Key, SID: old.SID, Expires: se.Expires}}, "$max": bson.M{"expires": se.Expires}},
		options.Update().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("list session: %w", err)
	}
	return nil
}

// unlist removes entries, exactly as read, from a user's list (under the user's lock).
func (s *Store) unlist(ctx context.Context, userID string, refs []SessionRef) error {
	if len(refs) == 0 {
		return nil
	}
	_, err := s.col(colUserSessions).UpdateOne(ctx, bson.M{"_id": userID}, bson.M{"$pullAll": bson.M{"sessions": refs}})
	if err != nil {
		return fmt.Errorf("unlist sessions: %w", err)
	}
	return nil
}

// EndSession ends a session and takes it off its user's list; its tokens stop working with it.
// It returns the session as it ended, with the clients recorded until then, for them to be
// told; a session another call ended first (two sign-outs at once, on one front end or two), or
// that is gone, is returned with no clients: whoever ended it tells them, once.
func (s *Store) EndSession(ctx context.Context, se Session) (Session, error) {
	unlock := s.sessions.lock(se.Key)
	var ended Session
	err := s.col(colSessions).FindOneAndUpdate(ctx, bson.M{"_id": se.Key, "ended": bson.M{"$ne": true}}, bson.M{"$set": bson.M{"ended": true}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&ended)
	unlock()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		ended = se
		ended.Clients = nil
	case err != nil:
		return se, fmt.Errorf("end session: %w", err)
	}
	defer s.users.lock(se.UserID)()
	var list userSessions
	switch err := s.getByID(ctx, colUserSessions, se.UserID, &list); {
	case errors.Is(err, ErrNotFound):
		return ended, nil
	case err != nil:
		return ended, err
	}
	return ended, s.unlist(ctx, se.UserID, slices.DeleteFunc(list.Sessions, func(r SessionRef) bool { return r.Key != se.Key }))
}

// UserSessions returns a user's live sessions, newest sign-in first.
func (s *Store) UserSessions(ctx context.Context, userID string) ([]Session, error) {
	var list userSessions
	switch err := s.getByID(ctx, colUserSessions, userID, &list); {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	var out []Session
	for _, r := range list.Sessions {
		se, err := s.Session(ctx, r.Key)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, se)
	}
	slices.SortFunc(out, func(a, b Session) int { return b.AuthTime.Compare(a.AuthTime) })
	return out, nil
}

// Consent returns the scopes userID has consented to grant clientID, created at registered: a
// consent given before was given to an earlier client of the same id, and counts for nothing.
func (s *Store) Consent(ctx context.Context, userID, clientID string, registered time.Time) ([]string, error) {
	g, err := s.Grant(ctx, userID, clientID)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	if g.ScopesBefore(registered) {
		return nil, nil
	}
	return g.Scopes, nil
}

// ScopesBefore reports whether the grant's scopes were given before registered: to an earlier
// client of the same id, so that they count for nothing.
func (g Grant) ScopesBefore(registered time.Time) bool {
	given := g.Given
	if given.IsZero() {
		given = g.At
	}
	return given.Before(registered)
}

// PutConsent records that userID consented to grant clientID scopes, besides what it consented
// to before: added in one write, so that two consents given at once (two tabs, two replicas)
// both count. A grant given before the client's registration (registered: an earlier client of
// the same id) is replaced instead.
func (s *Store) PutConsent(ctx context.Context, userID, clientID string, scopes []string, registered time.Time) error {
	id := grantID(userID, clientID)
	now, err := s.afterRevocation(ctx, userID, clientID, s.now())
	if err != nil {
		return fmt.Errorf("put consent: %w", err)
	}
	defer s.consents.lock(id)()
	if scopes == nil {
		scopes = []string{}
	}
	set := bson.M{"userid": userID, "client": clientID, "given": now}
	upd := bson.M{"$addToSet": bson.M{"scopes": bson.M{"$each": scopes}}, "$set": set, "$setOnInsert": bson.M{"at": now}}
	switch g, err := s.Grant(ctx, userID, clientID); {
	case err != nil && !errors.Is(err, ErrNotFound):
		return fmt.Errorf("put consent: %w", err)
	case err == nil && g.ScopesBefore(registered):
		set["scopes"] = scopes
		upd = bson.M{"$set": set, "$setOnInsert": bson.M{"at": now}}
	}
	write := func() error {
		_, err := s.col(colConsents).UpdateOne(ctx, bson.M{"_id": id}, upd, options.Update().SetUpsert(true))
		return err
	}
	err = write()
	if mongo.IsDuplicateKeyError(err) {
		err = write() // another consent inserted the grant first: it is there now
	}
	if err != nil {
		return fmt.Errorf("put consent: %w", err)
	}
	return nil
}

// UseGrant records that clientID received tokens of scope for userID at at.
func (s *Store) UseGrant(ctx context.Context, userID, clientID, scope string, at time.Time) error {
	id := grantID(userID, clientID)
	defer s.consents.lock(id)()
	_, err := s.col(colConsents).UpdateOne(ctx, bson.M{"_id": id}, bson.M{
		"$set":         bson.M{"userid": userID, "client": clientID, "scope": scope},
		"$max":         bson.M{"last_used": at},
		"$setOnInsert": bson.M{"at": at, "scopes": []string{}},
	}, options.Update().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("use grant: %w", err)
	}
	return nil
}

// Grant returns what userID has granted clientID, or ErrNotFound.
func (s *Store) Grant(ctx context.Context, userID, clientID string) (Grant, error) {
	var g Grant
	err := s.getByID(ctx, colConsents, grantID(userID, clientID), &g)
	return g, err
}

// RevokeGrant withdraws what userID granted clientID: the consent is forgotten (the next
// sign-in asks again), and the revocation time is kept until keepUntil, the longest anything
// issued before it could live.
func (s *Store) RevokeGrant(ctx context.Context, userID, clientID string, at, keepUntil time.Time) error {
	id := grantID(userID, clientID)
	defer s.users.lock(revokedGrantLock(id))() // against the sweep (deleteIfExpired)
	_, err := s.col(colRevokedGrants).UpdateOne(ctx, bson.M{"_id": id},
		bson.M{"$max": bson.M{"at": at, "expires": keepUntil}}, options.Update().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("revoke grant: %w", err)
	}
	// Not under the record's lock: a write of the record the delete races (a use being
	// recorded) is older than the revocation, which Grant and Consent tell by its time.
	if _, err := s.col(colConsents).DeleteOne(ctx, bson.M{"_id": id}); err != nil {
		return fmt.Errorf("revoke grant: %w", err)
	}
	return nil
}

// afterRevocation is at, or just after userID's last revocation of clientID's access if that is
// not earlier: a consent or code given after the revocation was read is newer than it, though
// the front end that revoked (at its own clock's time) may have a clock ahead of this one's.
func (s *Store) afterRevocation(ctx context.Context, userID, clientID string, at time.Time) (time.Time, error) {
	r, err := s.GrantRevokedAt(ctx, userID, clientID)
	if err != nil || at.After(r) {
		return at, err
	}
	return r.Add(time.Millisecond), nil
}

// GrantRevokedAt returns when userID last revoked clientID's access; zero if never (or so long
// ago that nothing from before can still live).
func (s *Store) GrantRevokedAt(ctx context.Context, userID, clientID string) (time.Time, error) {
	var r revokedGrant
	err := s.getByID(ctx, colRevokedGrants, grantID(userID, clientID), &r)
	if errors.Is(err, ErrNotFound) {
		return time.Time{}, nil
	}
	return r.At, err
}
