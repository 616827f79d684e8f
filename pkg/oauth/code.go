package oauth

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/campus-it/ucs/pkg/keys"
	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/store"
)

// CodeTTL is how long an authorization code may wait for its exchange.
const CodeTTL = 60 * time.Second

// SignInStore keeps what the authorization code and refresh grants need; *store.Store
// implements it.
type SignInStore interface {
	PutAuthCode(ctx context.Context, c store.AuthCode) error
	AuthCode(ctx context.Context, hash string) (store.AuthCode, error)
	ConsumeAuthCode(ctx context.Context, c store.AuthCode) error
	Session(ctx context.Context, key string) (store.Session, error)
	SessionBySID(ctx context.Context, sid string) (store.Session, error)
	PutSession(ctx context.Context, se store.Session) ([]store.SessionRef, error)
	RenewSession(ctx context.Context, se store.Session) error
	EndSession(ctx context.Context, se store.Session) (store.Session, error)
	AddSessionClient(ctx context.Context, key, clientID string) error
	TouchSession(ctx context.Context, key string, idle time.Time) error
	HoldSession(ctx context.Context, key, request string, until time.Time) error
	ReleaseSession(ctx context.Context, key, request string, idle time.Time) error
	UserSessions(ctx context.Context, userID string) ([]store.Session, error)
	UseGrant(ctx context.Context, userID, clientID, scope string, at time.Time) error
	Grant(ctx context.Context, userID, clientID string) (store.Grant, error)
	RevokeGrant(ctx context.Context, userID, clientID string, at, keepUntil time.Time) error
	GrantRevokedAt(ctx context.Context, userID, clientID string) (time.Time, error)
	PutRefreshToken(ctx context.Context, t store.RefreshToken) error
	RotateRefreshToken(ctx context.Context, t store.RefreshToken) error
	RefreshToken(ctx context.Context, hash string) (store.RefreshToken, error)
	RevokeFamily(ctx context.Context, id string) error
	FamilyRevoked(ctx context.Context, id string) (bool, error)
}

// IDClaims are the claims of an ID token: the interface's (exp, iat, typ, azp, scope, userid)
// and OpenID Connect's (iss, aud, sub, nonce, auth_time, sid, at_hash).
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
	// AtHash binds the access token issued with the ID token to it, as Keycloak's ID tokens
	// do (OpenID Connect Core 1.0 §3.1.3.6); relying parties such as go-oidc check it.
	AtHash string `json:"at_hash,omitempty"`
}

// atHash is the at_hash of an access token in an ID token signed with alg: the left half of
// the token's hash by the algorithm's hash function, base64url-encoded.
func atHash(alg, accessToken string) string {
	h := crypto.SHA256
	switch m := jwt.GetSigningMethod(alg).(type) {
	case *jwt.SigningMethodECDSA:
		h = m.Hash
	case *jwt.SigningMethodRSA:
		h = m.Hash
	}
	d := h.New()
	d.Write([]byte(accessToken))
	sum := d.Sum(nil)
	return base64.RawURLEncoding.EncodeToString(sum[:len(sum)/2])
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
	if c, ok := s.Clients.Lookup(g.ClientID); ok {
		now = c.IssuedAt(now)
	}
	err := s.Store.PutAuthCode(ctx, store.AuthCode{
		Hash: Hash(code), ClientID: g.ClientID, RedirectURI: g.RedirectURI, Nonce: g.Nonce, Scope: g.Scope,
		CodeChallenge: g.CodeChallenge, UserID: g.UserID, SessionKey: g.SessionKey, SID: g.SID,
		AuthTime: g.AuthTime, Expires: now.Add(CodeTTL), At: now, Family: NewSecret(),
	})
	return code, err
}

// ClientRequest is a request of a client to the token, revocation, introspection or client
// logout endpoint: its form, its HTTP Basic credentials when it used them, and its source
// address. The HTTP adapter refuses a form that gives a parameter more than once (RFC 6749
// §3.2, Repeated) before it makes one.
type ClientRequest struct {
	Form                 url.Values
	BasicID, BasicSecret string
	Basic                bool
	Addr                 string
}

// authenticateClient finds the client of a request from the form or HTTP Basic credentials.
// A correct secret is always accepted: no one else's failures lock a client out. A failure
// counts against the address it came from, which is answered 429 once it fails too often.
func (s *Service) authenticateClient(ctx context.Context, r ClientRequest) (*Client, *Error) {
	form := r.Form
	id, secret := form.Get("client_id"), form.Get("client_secret")
	if r.Basic {
		// RFC 6749 §2.3.1: Basic credentials are form-encoded before they are joined.
		bid, err1 := url.QueryUnescape(r.BasicID)
		bsec, err2 := url.QueryUnescape(r.BasicSecret)
		if err2 != nil {
			bsec = r.BasicSecret // not form-encoded: taken as sent (see below)
		}
		if err1 != nil {
			return nil, s.refuseClient(ctx, r, r.BasicID, "malformed Basic credentials", errorf(ErrInvalidClient, "malformed Basic credentials"))
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
		return nil, s.refuseClient(ctx, r, id, "no client_id or no client_secret", errorf(ErrInvalidClient, "client_id and client_secret are required"))
	}
	client, ok := s.Clients.Authenticate(id, secret)
	if !ok && r.Basic && r.BasicSecret != secret {
		// Many clients (curl -u, Python requests, Postman) send the secret as it is, not
		// form-encoded: a '+' in it, which the decoding made a space, is a '+'.
		client, ok = s.Clients.Authenticate(id, r.BasicSecret)
	}
	if !ok {
		why := "unknown client"
		if _, known := s.Clients.Lookup(id); known {
			why = "wrong secret"
		}
		return nil, s.refuseClient(ctx, r, id, why, errWrongClient())
	}
	return client, nil
}

// refuseClient logs and counts a client that did not authenticate, counts the failure against
// its address, and answers e, or 429 when the address fails too often.
func (s *Service) refuseClient(ctx context.Context, r ClientRequest, id, why string, e *Error) *Error {
	s.clientAuthFailed(r, id, why)
	if slow := s.Guard.AddressFailed(ctx, r.Addr); slow != nil {
		return slow
	}
	return e
}

// clientAuthFailed logs at warn and counts a client that did not authenticate, with the client
// id it claimed (cut short: it is the caller's text) and its address, never the secret: an
// unknown id that is a client's secret, sent in the id's place, is not logged either.
func (s *Service) clientAuthFailed(r ClientRequest, id, why string) {
	s.Metrics.SecurityEvent(metrics.EventClientAuthFailed)
	if s.Logger == nil {
		return
	}
	switch _, known := s.Clients.Lookup(id); {
	case !known && s.Clients.IsSecret(id):
		id = "(a client secret, not logged)"
	case len(id) > 64:
		id = strings.ToValidUTF8(id[:64], "") + "…"
	}
	s.Logger.Warn("client authentication refused: "+why, "event", metrics.EventClientAuthFailed, "client", id, "addr", r.Addr)
}

func errWrongClient() *Error { return errorf(ErrInvalidClient, "unknown client or wrong secret") }

// issueUserTokens issues an access token of scope, a refresh token of family fam for
// grantScope (the scope of the grant the family started with) and, with openid, an ID token,
// for the user of session se. use uses up the code or refresh token the grant presented: it is
// called last, once every record of the new tokens is written, so that a store failing on the
// way leaves that code or token unused, and the client's retry an exchange, not a replay. A
// refresh token recorded before such a failure was never given out: no one can present it.
//
// The tokens are issued at now (to the millisecond, as the store keeps times), taken before the
// grant's revocations were read (stillGranted): a revocation that read missed is at now or
// later, and so covers them. Before the code or token is used up, the revocations are read
// again, so that a revocation made meanwhile refuses the grant rather than answer tokens that
// are dead. Their stamp is no earlier than parent, the stamp of the code or refresh token
// presented, nor than the client's tokens_not_before (Client.IssuedAt): along a grant, stamps
// never go back, though front ends' clocks differ (a code stamped just after a revocation made
// by a front end whose clock is ahead, store.PutAuthCode, passes on its stamp).
//
// authTime is the time of the authentication behind the grant, as the code or refresh token
// presented records it: a refreshed ID token carries the original authentication's time (OpenID
// Connect Core §12.2), however often the user signed in again since, for another client with
// prompt=login say (oidc-client-ts and Spring Security refuse a refreshed ID token whose
// auth_time moved).
func (s *Service) issueUserTokens(ctx context.Context, c *Client, se store.Session, scope, grantScope, nonce, fam string,
	authTime, now, parent time.Time, use func(context.Context) *Error) (*TokenResponse, *Error) {
	if authTime.IsZero() {
		authTime = se.AuthTime // a code or refresh token of an earlier version, without its own
	}
	issued := c.IssuedAt(now)
	if parent.After(issued) {
		issued = parent
	}
	if !issued.Before(se.Expires) {
		// Stamped at or past the session's end (a stamp raised ahead of this clock): nothing
		// would outlive the session's end, nor a refresh_expires_in below zero.
		return nil, errorf(ErrInvalidGrant, "the sign-in session ended")
	}
	// Access and ID tokens end with the session at the latest, as Keycloak caps them: by its
	// idle end as this grant moved it (the refresh token's end), or its expiry. A token in use
	// does not keep its session alive, so a token outliving that end would be refused before
	// its exp while expires_in promised more.
	end := se.Expires
	if !se.Idle.IsZero() && se.Idle.Before(end) {
		end = se.Idle
	}
	access, ttl, err := s.issueAccessFor(c, GrantAuthorizationCode, se.UserID, se.UserID, scope, se.SID, fam, issued, end)
	if err != nil {
		return nil, internal("the token could not be issued", fmt.Errorf("sign access token of %s: %w", c.ID, err))
	}
	resp := &TokenResponse{AccessToken: access, ExpiresIn: int64(ttl / time.Second), TokenType: "Bearer", Scope: scope, SessionState: se.SID}
	if slices.Contains(strings.Fields(scope), ScopeOpenID) {
		keys := s.idKeys(c)
		id, err := keys.Sign(&IDClaims{
			RegisteredClaims: jwt.RegisteredClaims{
				Issuer: s.Issuer, Subject: se.UserID, Audience: jwt.ClaimStrings{c.ID},
				IssuedAt: jwt.NewNumericDate(issued), ExpiresAt: jwt.NewNumericDate(issued.Add(ttl)), ID: newJTI(),
			},
			Typ: "Bearer", Azp: c.ID, Scope: scope, UserID: se.UserID, Nonce: nonce,
			AuthTime: authTime.Unix(), SID: se.SID, AtHash: atHash(keys.Alg(), access),
		})
		if err != nil {
			return nil, internal("the token could not be issued", fmt.Errorf("sign ID token of %s: %w", c.ID, err))
		}
		resp.IDToken = id
	}
	if c.Allows(GrantRefreshToken) {
		exp := issued.Add(s.RefreshTTL)
		if se.Expires.Before(exp) {
			exp = se.Expires
		}
		rt := NewSecret()
		if err := s.Store.PutRefreshToken(ctx, store.RefreshToken{
			Hash: Hash(rt), Family: fam, ClientID: c.ID, UserID: se.UserID, SessionKey: se.Key, SID: se.SID,
			Scope: grantScope, Nonce: nonce, AuthTime: authTime, Expires: exp, Kept: se.Expires, At: issued,
		}); err != nil {
			return nil, internal("the token could not be issued", fmt.Errorf("store refresh token of %s: %w", c.ID, err))
		}
		resp.RefreshToken, resp.RefreshExpiresIn = rt, int64(exp.Sub(issued)/time.Second)
	}
	switch revoked, err := s.grantRevoked(ctx, se.UserID, c.ID, issued); {
	case err != nil:
		return nil, internal("the grant could not be checked; try again", err)
	case revoked:
		return nil, errorf(ErrInvalidGrant, "the user revoked this application's access")
	}
	if e := use(ctx); e != nil {
		return nil, e
	}
	// For the account page: which applications the user has granted, and when each last used
	// it. A revocation that lands before this write has deleted the record it updates: the
	// record written again is older than the revocation, and the page does not list it (Grants).
	if err := s.Store.UseGrant(ctx, se.UserID, c.ID, scope, issued); err != nil {
		s.Logger.Warn("recording a grant's use failed", "client", c.ID, "err", err)
	}
	return resp, nil
}

// ParseIDToken verifies an ID token this service issued (for id_token_hint at logout and at
// authorize). Expired tokens are accepted, as a hint may be old. Only an ID token passes
// (RFC 8725 §3.11): an access token (it carries grant_type and no audience) or a logout token
// (typ logout+jwt, no azp) of the same keys is refused.
func (s *Service) ParseIDToken(tok string) (*IDClaims, error) {
	var c *idTokenOnly
	// The signature is checked, with each set's algorithm pinned; the times are not (a hint
	// may have expired).
	var err error
	unknown := false // some set of the token's algorithm holds no key of its kid
	for _, ks := range s.KeySets() {
		c = &idTokenOnly{}
		if err = ks.Parse(tok, c, jwt.WithoutClaimsValidation()); err == nil {
			break
		}
		unknown = unknown || errors.Is(err, keys.ErrUnknownKey)
	}
	if err != nil && unknown && s.claimsIssuer(tok) {
		// A key of this server's retired since; another issuer's token is refused below.
		return nil, fmt.Errorf("ID token: %w", keys.ErrUnknownKey)
	}
	if err != nil {
		return nil, err
	}
	if c.Issuer != s.Issuer || c.Azp == "" || c.Grant != nil || c.Events != nil || c.Subject == "" ||
		len(c.Audience) != 1 || c.Audience[0] != c.Azp {
		return nil, errors.New("not an ID token of this issuer")
	}
	return &c.IDClaims, nil
}

// claimsIssuer reports whether tok, unverified, names this server as its issuer: a token of
// another (another IdP, a staging realm) is no ID token of this server, whatever its key.
func (s *Service) claimsIssuer(tok string) bool {
	var c jwt.RegisteredClaims
	_, _, err := jwt.NewParser().ParseUnverified(tok, &c)
	return err == nil && c.Issuer == s.Issuer
}

// idTokenOnly decodes the claims that only other kinds of token carry, to refuse them.
type idTokenOnly struct {
	IDClaims
	Grant  *string          `json:"grant_type"`
	Events *json.RawMessage `json:"events"`
}
