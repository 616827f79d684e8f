package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
)

// Collections of the sign-in flow. Every document is keyed by _id, which for secrets (codes,
// refresh tokens, session cookies) is the hex SHA-256 of the secret: the store never holds a
// usable secret, and every read is by primary key.
const (
	colAuthRequests = "auth_requests"
	colAuthCodes    = "auth_codes"
	colSessions     = "sso_sessions"
	colConsents     = "consents"
	colRefresh      = "refresh_tokens"
	colFamilies     = "token_families"
	colSessionIDs   = "sso_session_ids"
	// colUserSessions lists each user's sessions, keyed by the user number, for the account
	// page: the reader holds the user number, never a session key.
	colUserSessions = "user_sessions"
	// colRevokedGrants records when a user revoked an application's access, keyed
	// "userid|client": what was issued to it before then is dead.
	colRevokedGrants = "revoked_grants"
)

// sessionID maps a session's public id (the sid of its tokens) to its key, so a token's
// session is found by primary key.
type sessionID struct {
	SID     string    `bson:"_id"`
	Key     string    `bson:"key"`
	Expires time.Time `bson:"expires"`
}

// Kinds of sign-in flow (AuthRequest.Flow): a client's authorization request, the sign-in to
// the account page, the sign-in of the binding page. Only a client's request has a consent step.
const (
	FlowClient  = "client"
	FlowAccount = "account"
	FlowBind    = "bind"
)

// Steps of a sign-in flow a request records once passed (AuthRequest.Passed).
const (
	// StepLogin: the user signed in, or a session answered the request (fresh enough for its
	// prompt and max_age).
	StepLogin = "login"
)

// AuthRequest is an authorization request between its arrival and its answer: while the user
// signs in and consents. It is not stored: it travels sealed (encrypted and authenticated) in
// the flow's URLs, and only its answer is recorded (FinishAuthRequest).
type AuthRequest struct {
	ID string `json:"id,omitempty"`
	// Flow is the kind of flow (FlowClient, FlowAccount, FlowBind), fixed when it starts: a
	// step of one kind never takes a request of another.
	Flow string `json:"flow,omitempty"`
	// Passed are the steps this request has passed (StepLogin), each sealed into the URL of
	// the step that follows it: a step is reachable only with the steps before it.
	Passed []string `json:"passed,omitempty"`
	// Session is the key (hash of the cookie) of the session that passed StepLogin: the later
	// steps belong to that session only.
	Session             string `json:"session,omitempty"`
	ClientID            string `json:"client,omitempty"`
	RedirectURI         string `json:"redirect_uri,omitempty"`
	ResponseMode        string `json:"response_mode,omitempty"`
	State               string `json:"state,omitempty"`
	Nonce               string `json:"nonce,omitempty"`
	Scope               string `json:"scope,omitempty"`
	CodeChallenge       string `json:"code_challenge,omitempty"`
	CodeChallengeMethod string `json:"code_challenge_method,omitempty"`
	IDP                 string `json:"idp,omitempty"`
	// Prompt is the request's prompt: none, login, consent, "login consent", or empty.
	Prompt string `json:"prompt,omitempty"`
	// Renew asks the campus sign-on for a new sign-in rather than its single sign-on: the
	// request asked for one (prompt=login, or a max_age).
	Renew bool `json:"renew,omitempty"`
	// MaxAge is the request's max_age in seconds, nil without one: a sign-in from before the
	// request must still be no older when the code is issued.
	MaxAge *int64 `json:"max_age,omitempty"`
	// Hint is the user number the request's id_token_hint names, "" without one: a sign-in of
	// another user ends in login_required rather than a code.
	Hint string `json:"hint,omitempty"`
	// Account marks the sign-in to the account page: it ends there, with no client and no code.
	Account bool `json:"account,omitempty"`
	// Return, with Account, is the service's own page the sign-in ends at instead (the
	// operations page's); set by the server, and sealed with the request like the rest.
	Return string `json:"return,omitempty"`
	// Bind marks the sign-in of the binding page: the hash of the bind session it was started
	// from, to which it hands the user number back; no client and no code.
	Bind string `json:"bind,omitempty"`
	// Browser is the hash of the browser-binding cookie set when the request arrived; forms of
	// the flow are accepted only from that browser.
	Browser string `json:"browser,omitempty"`
	// Registered is when the request's client was created, as the front end that took the
	// request knew it: a sign-in answers that registration only, not a client registered
	// under the same id since (zero in requests of earlier versions: not checked).
	Registered time.Time `json:"registered,omitzero"`
	// CSRF is the value the flow's forms must carry.
	CSRF    string    `json:"csrf,omitempty"`
	Expires time.Time `json:"expires,omitempty"`
	At      time.Time `json:"at,omitempty"`
}

// AuthCode is an issued authorization code (stored by the hash of the code).
type AuthCode struct {
	Hash          string    `bson:"_id"`
	ClientID      string    `bson:"client"`
	RedirectURI   string    `bson:"redirect_uri"`
	Nonce         string    `bson:"nonce,omitempty"`
	Scope         string    `bson:"scope"`
	CodeChallenge string    `bson:"code_challenge,omitempty"`
	UserID        string    `bson:"userid"`
	SessionKey    string    `bson:"session"`
	SID           string    `bson:"sid"`
	AuthTime      time.Time `bson:"auth_time"`
	Expires       time.Time `bson:"expires"`
	Used          bool      `bson:"used"`
	// Family is the token family the exchange issues, fixed when the code is issued, so that
	// a replay finds it whatever the timing, and revokes it.
	Family string    `bson:"family,omitempty"`
	At     time.Time `bson:"at"`
}

// Session is the service's own sign-in session (not the client's, nor the CAS one).
type Session struct {
	Key      string    `bson:"_id"` // hash of the cookie value
	SID      string    `bson:"sid"` // public id, in tokens
	UserID   string    `bson:"userid"`
	IDP      string    `bson:"idp"`
	AuthTime time.Time `bson:"auth_time"`
	Expires  time.Time `bson:"expires"`
	// Idle is when the session ends if nothing uses it before (Keycloak's SSO Session Idle):
	// a sign-in, an authorization it answers, a code exchange or a refresh moves it on
	// (TouchSession). Zero: no idle limit (a session of an earlier version).
	Idle  time.Time `bson:"idle,omitempty"`
	Ended bool      `bson:"ended"`
	At    time.Time `bson:"at"`
	// Address and Agent are where the sign-in came from (source address and User-Agent, cut
	// short), shown to the user on the account page.
	Address string `bson:"addr,omitempty"`
	Agent   string `bson:"agent,omitempty"`
	// Clients are the clients that received tokens in the session, told when it ends
	// (back-channel logout).
	Clients []string `bson:"clients,omitempty"`
	// Holds are the sign-in requests (by id) whose consent page waits in this session, each
	// with the end of its request (HoldSession), until the page is answered (ReleaseSession).
	Holds map[string]time.Time `bson:"holds,omitempty"`
}

// RefreshToken is an issued refresh token (stored by its hash).
type RefreshToken struct {
	Hash       string    `bson:"_id"`
	Family     string    `bson:"family"`
	ClientID   string    `bson:"client"`
	UserID     string    `bson:"userid"`
	SessionKey string    `bson:"session"`
	SID        string    `bson:"sid"`
	Scope      string    `bson:"scope"`
	Nonce      string    `bson:"nonce,omitempty"`
	AuthTime   time.Time `bson:"auth_time"`
	Expires    time.Time `bson:"expires"`
	// Kept is when its session ends at the latest, as far as known when it was issued, when that
	// is after the token's expiry: the record is kept until then (and a day more), as Keycloak's
	// server-side logout names a session by a refresh token past its expiry as long as the
	// session lives. The sweep moves it on while the session lives (a sign-in again renews it).
	// Zero: until the token's expiry.
	Kept    time.Time `bson:"kept,omitempty"`
	Rotated bool      `bson:"rotated"`
	At      time.Time `bson:"at"`
}

// keptUntil is when the record of t may be dropped (a day later, by the sweep).
func (t RefreshToken) keptUntil() time.Time {
	if t.Kept.After(t.Expires) {
		return t.Kept
	}
	return t.Expires
}

// family is a token family: whether it is revoked, kept as long as its last refresh token.
type family struct {
	ID      string    `bson:"_id"`
	Revoked bool      `bson:"revoked"`
	Expires time.Time `bson:"expires"`
	At      time.Time `bson:"at"`
}

// revokedFamilyKept is how long a family revoked before any of its tokens was stored (a code
// replayed before its exchange) is kept: longer than a code lives. Storing a token of the
// family then keeps it as long as that token.
const revokedFamilyKept = 24 * time.Hour

func (s *Store) col(name string) *mongo.Collection { return s.db.Collection(name) }

func (s *Store) getByID(ctx context.Context, col, id string, into any) error {
	err := s.col(col).FindOne(ctx, bson.M{"_id": id}).Decode(into)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("find %s: %w", col, err)
	}
	return nil
}

// finishedRequest marks an authorization request answered, so it is answered once. Only
// requests someone signed in to get one: an authorization request itself is never stored (it
// travels sealed with the browser).
type finishedRequest struct {
	ID      string    `bson:"_id"`
	Expires time.Time `bson:"expires"`
	At      time.Time `bson:"at"`
}

// FinishAuthRequest records that the authorization request id was answered; ErrReplayed when
// it already was. expires is the request's own expiry, after which it could not be used anyway.
func (s *Store) FinishAuthRequest(ctx context.Context, id string, expires time.Time) error {
	_, err := s.col(colAuthRequests).InsertOne(ctx, finishedRequest{ID: id, Expires: expires, At: s.now()})
	if mongo.IsDuplicateKeyError(err) {
		return ErrReplayed
	}
	if err != nil {
		return fmt.Errorf("finish auth request: %w", err)
	}
	return nil
}

// AuthRequestFinished reports whether the authorization request id was answered
// (FinishAuthRequest), without answering it.
func (s *Store) AuthRequestFinished(ctx context.Context, id string) (bool, error) {
	var f finishedRequest
	switch err := s.getByID(ctx, colAuthRequests, id, &f); {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// TakeOnce records the one use of a single-use value of the browser flows that travels sealed
// rather than stored (the binding page's sign-in ticket and platform authorization state), by
// a key naming its kind and id; ErrReplayed when it was taken before. expires is the value's
// own expiry, after which the record may go.
func (s *Store) TakeOnce(ctx context.Context, key string, expires time.Time) error {
	return s.FinishAuthRequest(ctx, "once."+key, expires)
}

// PutAuthCode stores an issued code, stamped just after the grant's last revocation if its At
// is not later (afterRevocation), and records its stamp in the grant's record.
func (s *Store) PutAuthCode(ctx context.Context, c AuthCode) error {
	at, err := s.afterRevocation(ctx, c.UserID, c.ClientID, c.At)
	if err != nil {
		return fmt.Errorf("insert code: %w", err)
	}
	c.At = at
	// The grant's record keeps the latest code's stamp, which a revocation's covers
	// (oauth.Service.RevokeGrant), whatever the clock of the front end that issued it.
	id := grantID(c.UserID, c.ClientID)
	unlock := s.consents.lock(id)
	_, err = s.col(colConsents).UpdateOne(ctx, bson.M{"_id": id}, bson.M{
		"$set":         bson.M{"userid": c.UserID, "client": c.ClientID},
		"$max":         bson.M{"issued": at},
		"$setOnInsert": bson.M{"at": at, "scopes": []string{}},
	}, options.Update().SetUpsert(true))
	unlock()
	if err != nil {
		return fmt.Errorf("insert code: %w", err)
	}
	if _, err := s.col(colAuthCodes).InsertOne(ctx, c); err != nil {
		return fmt.Errorf("insert code: %w", err)
	}
	return nil
}

// ErrReplayed is returned for a code or refresh token used a second time.
var ErrReplayed = errors.New("already used")

// AuthCode returns a code as stored, used or not (Used by its flag or its use marker, usedBy),
// or ErrNotFound. It changes nothing: the exchange checks the client, the redirect address and
// the verifier before it consumes.
func (s *Store) AuthCode(ctx context.Context, hash string) (AuthCode, error) {
	var c AuthCode
	if err := s.getByID(ctx, colAuthCodes, hash, &c); err != nil || c.Used {
		return c, err
	}
	used, err := s.usedBy(ctx, colAuthCodes, hash)
	c.Used = used
	return c, err
}

// useMarker records that a code or refresh token was used. It is inserted, keyed by the
// secret's hash and "/used": the unique _id makes the first use win on every store, where an
// update of a flag is not atomic on all of them (FerretDB's findAndModify is a read, then a
// write).
type useMarker struct {
	ID      string    `bson:"_id"`
	Expires time.Time `bson:"expires"`
	At      time.Time `bson:"at"`
	// Session, Family, UserID, Client and Issued (its At) are a refresh token's: the sweep keeps
	// its use as long as the token (see keepTokensOfLiveSessions).
	Session string    `bson:"session,omitempty"`
	Family  string    `bson:"family,omitempty"`
	UserID  string    `bson:"userid,omitempty"`
	Client  string    `bson:"client,omitempty"`
	Issued  time.Time `bson:"issued,omitempty"`
}

// useOnce records the first use of the secret hashed to hash in col (ErrReplayed when it was
// used before), then sets flag on its document for readers.
func (s *Store) useOnce(ctx context.Context, col, hash string, m useMarker, flag string) error {
	m.ID, m.At = hash+"/used", s.now()
	_, err := s.col(col).InsertOne(ctx, m)
	if mongo.IsDuplicateKeyError(err) {
		return ErrReplayed
	}
	if err != nil {
		return fmt.Errorf("use %s: %w", col, err)
	}
	if _, err := s.col(col).UpdateOne(ctx, bson.M{"_id": hash}, bson.M{"$set": bson.M{flag: true}}); err != nil {
		s.log.Warn("marking a used secret failed; its use is recorded", "collection", col, "err", err)
	}
	return nil
}

// ConsumeAuthCode uses a code up, once: of any number of simultaneous calls, one returns nil
// and the others ErrReplayed. The code is then marked used, for readers.
func (s *Store) ConsumeAuthCode(ctx context.Context, c AuthCode) error {
	return s.useOnce(ctx, colAuthCodes, c.Hash, useMarker{Expires: c.Expires}, "used")
}

// SessionBySID returns a live session by the sid of its tokens, or ErrNotFound.
func (s *Store) SessionBySID(ctx context.Context, sid string) (Session, error) {
	var m sessionID
	if err := s.getByID(ctx, colSessionIDs, sid, &m); err != nil {
		return Session{}, err
	}
	return s.Session(ctx, m.Key)
}

// Session returns a live session by the hash of its cookie, or ErrNotFound.
func (s *Store) Session(ctx context.Context, key string) (Session, error) {
	var se Session
	if err := s.getByID(ctx, colSessions, key, &se); err != nil {
		return se, err
	}
	if now := s.now(); se.Ended || !now.Before(se.Expires) || !se.Idle.IsZero() && !now.Before(se.Idle) {
		return se, ErrNotFound
	}
	return se, nil
}

// TouchSession moves the idle end of the live session whose cookie hashes to key on to idle,
// never back. A session past its idle end stays ended: a use checked just before that end
// does not bring it back. Like every write of a session, it is by _id alone, which the
// embedded store answers from its index (DESIGN.md, FerretDB).
func (s *Store) TouchSession(ctx context.Context, key string, idle time.Time) error {
	return s.setIdle(ctx, key, func(Session) bson.M { return bson.M{"$max": bson.M{"idle": idle}} })
}

// HoldSession keeps the live session whose cookie hashes to key from ending idle before until,
// the end of sign-in request's time (its consent page waits): the idle end moves on to until,
// never back, and the hold is recorded for ReleaseSession. Holds that have ended are dropped
// with it, and so are the earliest to end past MaxSessionHolds: consent pages opened and never
// answered (by the thousand, another site sending the browser to the authorization endpoint)
// must not grow the session's record without bound. A hold dropped early only lets its page's
// answer find the session ended idle sooner.
func (s *Store) HoldSession(ctx context.Context, key, request string, until time.Time) error {
	return s.setIdle(ctx, key, func(se Session) bson.M {
		now, drop := s.now(), bson.M{}
		type hold struct {
			id    string
			until time.Time
		}
		var live []hold
		for id, end := range se.Holds {
			switch {
			case id == request:
			case !end.After(now):
				drop["holds."+id] = ""
			default:
				live = append(live, hold{id, end})
			}
		}
		if len(live) >= MaxSessionHolds {
			slices.SortFunc(live, func(a, b hold) int { return a.until.Compare(b.until) })
			for _, h := range live[:len(live)-MaxSessionHolds+1] {
				drop["holds."+h.id] = ""
			}
		}
		update := bson.M{"$max": bson.M{"idle": until}, "$set": bson.M{"holds." + request: until}}
		if len(drop) > 0 {
			update["$unset"] = drop
		}
		return update
	})
}

// MaxSessionHolds bounds the consent pages' holds one session records.
const MaxSessionHolds = 16

// ReleaseSession ends request's hold of the live session whose cookie hashes to key (its
// consent page is answered): the idle end becomes idle, earlier or later, or the end of another
// request's hold still waiting (another page, in another tab), whichever is later. Holds that
// have ended are dropped with it.
func (s *Store) ReleaseSession(ctx context.Context, key, request string, idle time.Time) error {
	return s.setIdle(ctx, key, func(se Session) bson.M {
		now, drop := s.now(), bson.M{"holds." + request: ""}
		for id, until := range se.Holds {
			switch {
			case id == request:
			case !until.After(now):
				drop["holds."+id] = ""
			case until.After(idle):
				idle = until
			}
		}
		return bson.M{"$set": bson.M{"idle": idle}, "$unset": drop}
	})
}

// setIdle writes the idle end of the live session whose cookie hashes to key with the update
// change gives for it as it is; an ended session is left as it is.
func (s *Store) setIdle(ctx context.Context, key string, change func(Session) bson.M) error {
	defer s.sessions.lock(key)()
	se, err := s.Session(ctx, key)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		return err
	}
	if _, err := s.col(colSessions).UpdateOne(ctx, bson.M{"_id": key}, change(se)); err != nil {
		return fmt.Errorf("session idle end: %w", err)
	}
	return nil
}

// AddSessionClient records that clientID received tokens in the session whose cookie hashes to
// key (once, however often it is called); ErrNotFound when the session has ended. Either the
// client is recorded before the session ends, and EndSession's answer names it, or the session
// had ended when it was recorded, and the answer is ErrNotFound: each is one atomic update of
// the session's document, made under the session's lock, as its end is (the embedded server
// reads and then writes).
func (s *Store) AddSessionClient(ctx context.Context, key, clientID string) error {
	defer s.sessions.lock(key)()
	var before Session
	err := s.col(colSessions).FindOneAndUpdate(ctx, bson.M{"_id": key}, bson.M{"$addToSet": bson.M{"clients": clientID}}).Decode(&before)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return ErrNotFound
	case err != nil:
		return fmt.Errorf("record the session's client: %w", err)
	case before.Ended:
		return ErrNotFound
	}
	return nil
}

// PutRefreshToken stores an issued refresh token, creating its family on first use; the family
// is kept as long as its last token (see Kept; the sweep drops it a day after), so that a
// revoked token never reads as one of a family not revoked.
func (s *Store) PutRefreshToken(ctx context.Context, t RefreshToken) error {
	if err := s.upsertFamily(ctx, t.Family, bson.M{"$max": bson.M{"expires": t.keptUntil()}, "$setOnInsert": bson.M{"at": s.now(), "revoked": false}}); err != nil {
		return fmt.Errorf("store family: %w", err)
	}
	if _, err := s.col(colRefresh).InsertOne(ctx, t); err != nil {
		return fmt.Errorf("insert refresh token: %w", err)
	}
	return nil
}

// RotateRefreshToken uses a refresh token up, once, as ConsumeAuthCode does a code: of
// simultaneous calls one returns nil and the others ErrReplayed. The token is then marked
// rotated, for readers.
func (s *Store) RotateRefreshToken(ctx context.Context, t RefreshToken) error {
	return s.useOnce(ctx, colRefresh, t.Hash, useMarker{Expires: t.keptUntil(), Session: t.SessionKey, Family: t.Family, UserID: t.UserID, Client: t.ClientID, Issued: t.At}, "rotated")
}

// RefreshToken returns a refresh token by hash, or ErrNotFound. Rotated is set when the
// token was used, by its flag or by its use marker (usedBy): every reader (the token endpoint,
// introspection, logout) sees a used token as used.
func (s *Store) RefreshToken(ctx context.Context, hash string) (RefreshToken, error) {
	var t RefreshToken
	if err := s.getByID(ctx, colRefresh, hash, &t); err != nil || t.Rotated {
		return t, err
	}
	used, err := s.usedBy(ctx, colRefresh, hash)
	t.Rotated = used
	return t, err
}

// usedBy reports whether the secret hashed to hash in col has a use marker (useOnce): the
// reader of a record whose flag is not set (its write may have failed after the use was
// recorded) asks it, so that every reader sees a used secret as used.
func (s *Store) usedBy(ctx context.Context, col, hash string) (bool, error) {
	var m useMarker
	switch err := s.getByID(ctx, col, hash+"/used", &m); {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	default:
		return false, err
	}
}

// RevokeFamily revokes every token of a family.
func (s *Store) RevokeFamily(ctx context.Context, id string) error {
	if id == "" {
		return nil
	}
	now := s.now()
	err := s.upsertFamily(ctx, id, bson.M{"$set": bson.M{"revoked": true}, "$max": bson.M{"expires": now.Add(revokedFamilyKept)}, "$setOnInsert": bson.M{"at": now}})
	if err != nil {
		return fmt.Errorf("revoke family: %w", err)
	}
	return nil
}

// upsertFamily applies update to family id, creating it if need be. Of two calls that create
// it at once one meets the other's record (a duplicate key): it is applied again, to that one.
// It holds the family's lock: on the embedded server, which reads and then writes, a token
// stored at the moment of a revocation would otherwise write the family back unrevoked.
func (s *Store) upsertFamily(ctx context.Context, id string, update bson.M) error {
	defer s.users.lock(familyLock(id))()
	var err error
	for range 2 {
		_, err = s.col(colFamilies).UpdateOne(ctx, bson.M{"_id": id}, update, options.Update().SetUpsert(true))
		if !mongo.IsDuplicateKeyError(err) {
			break
		}
	}
	return err
}

// FamilyRevoked reports whether a token family has been revoked.
func (s *Store) FamilyRevoked(ctx context.Context, id string) (bool, error) {
	var f family
	err := s.getByID(ctx, colFamilies, id, &f)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return f.Revoked, err
}
