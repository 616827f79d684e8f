package oauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Client is a registered client as the token service keeps it: its secret only as a hash.
type Client struct {
	ID           string
	secretHash   [32]byte
	Grants       []string
	Scopes       []string
	RedirectURIs []string
	// PostLogoutRedirectURIs are where logout may return to.
	PostLogoutRedirectURIs []string
	SkipConsent            bool
	AccessTokenTTL         time.Duration
	// Introspect lets the client introspect tokens of other clients (a resource server).
	Introspect bool
	// RateLimit overrides the default grants per second; zero: the default.
	RateLimit float64
	// IDTokenAlg signs the client's ID tokens: RS256 or ES256.
	IDTokenAlg string
	// BackchannelLogoutURI is where the client is told that a session it received tokens in
	// ended; empty: it is not told.
	BackchannelLogoutURI string
	// BackchannelLogoutSessionRequired: the client needs sid in its logout tokens (always sent).
	BackchannelLogoutSessionRequired bool
	// TokensNotBefore refuses the client's tokens issued before it (to the millisecond); zero:
	// none.
	TokensNotBefore time.Time
	// Registered is when the client was created: a user's consent given before it was given to
	// an earlier client of the same id, and asks again (zero: every consent counts).
	Registered time.Time
}

// Allows reports whether the client may use grant.
func (c *Client) Allows(grant string) bool { return slices.Contains(c.Grants, grant) }

// Clients is the registry of clients. It is replaced whole (Replace, Reload): a request reads
// one consistent snapshot without a lock, which keeps the token endpoint and the bearer check
// as cheap as when the registry never changed.
type Clients struct {
	set        atomic.Pointer[clientSet]
	defaultTTL time.Duration
	// dummy is compared against when the client is unknown, so that an unknown id and a wrong
	// secret take the same time.
	dummy [32]byte
}

// clientSet is one snapshot of the registry.
type clientSet struct {
	byID map[string]*Client
	ids  []string // in the order of registration
	// disabled are the ids of registered clients an operator disabled: they are not in byID.
	disabled map[string]bool
	// secrets holds the hash of every registered client's secret (IsSecret).
	secrets map[[32]byte]bool
}

// Registration is a client as registered (configuration: oauth.clients; the store's clients).
type Registration struct {
	ID                     string
	SecretHash             [32]byte // SHA-256 of the secret
	Grants, Scopes         []string
	RedirectURIs           []string
	PostLogoutRedirectURIs []string
	SkipConsent            bool
	AccessTokenTTL         time.Duration // zero: the service's default
	Introspect             bool
	RateLimit              float64
	IDTokenAlg             string // empty: RS256
	// RefreshTokens nil or true: a client allowed the authorization code grant also gets the
	// refresh token grant, as in Keycloak.
	RefreshTokens *bool
	// Disabled: the client gets no token and its tokens are refused.
	Disabled bool
	// BackchannelLogoutURI and BackchannelLogoutSessionRequired are the client's back-channel
	// logout registration (OpenID Connect Back-Channel Logout 1.0).
	BackchannelLogoutURI             string
	BackchannelLogoutSessionRequired bool
	// TokensNotBefore refuses the tokens issued before it: those of a client of the same id
	// deleted before this one was created, and those from before the client was last disabled.
	TokensNotBefore time.Time
	// Registered is when the client was created (Client.Registered).
	Registered time.Time
}

// NewClients builds the registry (registrations already validated).
func NewClients(regs []Registration, defaultTTL time.Duration) *Clients {
	r := &Clients{defaultTTL: defaultTTL}
	r.Replace(regs)
	return r
}

// Replace makes regs the registry: from now on every request sees them, and tokens of a
// client no longer among them, or disabled, are refused.
func (r *Clients) Replace(regs []Registration) {
	set := &clientSet{byID: make(map[string]*Client, len(regs)), disabled: map[string]bool{},
		secrets: make(map[[32]byte]bool, len(regs))}
	for _, c := range regs {
		set.secrets[c.SecretHash] = true
		if c.Disabled {
			set.disabled[c.ID] = true
			continue
		}
		ttl := c.AccessTokenTTL
		if ttl == 0 {
			ttl = r.defaultTTL
		}
		grants := slices.Clone(c.Grants)
		if slices.Contains(grants, GrantAuthorizationCode) && !slices.Contains(grants, GrantRefreshToken) &&
			(c.RefreshTokens == nil || *c.RefreshTokens) {
			grants = append(grants, GrantRefreshToken)
		}
		alg := c.IDTokenAlg
		if alg == "" {
			alg = "RS256"
		}
		set.ids = append(set.ids, c.ID)
		set.byID[c.ID] = &Client{
			ID: c.ID, secretHash: c.SecretHash, Grants: grants, Scopes: slices.Clone(c.Scopes),
			RedirectURIs: slices.Clone(c.RedirectURIs), SkipConsent: c.SkipConsent, AccessTokenTTL: ttl,
			PostLogoutRedirectURIs: slices.Clone(c.PostLogoutRedirectURIs), Introspect: c.Introspect,
			RateLimit: c.RateLimit, IDTokenAlg: alg, BackchannelLogoutURI: c.BackchannelLogoutURI,
			BackchannelLogoutSessionRequired: c.BackchannelLogoutSessionRequired, TokensNotBefore: c.TokensNotBefore,
			Registered: c.Registered,
		}
	}
	r.set.Store(set)
}

// IDs returns the ids of every enabled client, in the order of registration.
func (r *Clients) IDs() []string { return r.set.Load().ids }

// Lookup returns an enabled client by id, without authenticating it.
func (r *Clients) Lookup(id string) (*Client, bool) {
	c, ok := r.set.Load().byID[id]
	return c, ok
}

// IsSecret reports whether s is a registered client's secret: a client id refused as unknown
// that is one is a secret sent in the id's place (swapped Basic credentials), and is not logged.
func (r *Clients) IsSecret(s string) bool { return r.set.Load().secrets[sha256.Sum256([]byte(s))] }

// Disabled reports whether id is a registered client an operator disabled.
func (r *Clients) Disabled(id string) bool { return r.set.Load().disabled[id] }

// Authenticate returns the client when secret is its secret. Secrets are compared as SHA-256
// hashes in constant time: they are high-entropy values, so a slow hash would add nothing but
// cost to every grant.
func (r *Clients) Authenticate(id, secret string) (*Client, bool) {
	h := sha256.Sum256([]byte(secret))
	c, ok := r.set.Load().byID[id]
	want := r.dummy
	if ok {
		want = c.secretHash
	}
	match := subtle.ConstantTimeCompare(h[:], want[:]) == 1
	if !ok || !match {
		return nil, false
	}
	return c, true
}

// Registered reports whether uri is one of the registered addresses: the same string, or, for a
// native application on the loopback interface, the same but for a port the registered address
// leaves out. Such an application listens on whatever port the system gives it at sign-in, and
// RFC 8252 (7.3) has the server take any port there, as Keycloak does for 127.0.0.1 and
// localhost.
func Registered(registered []string, uri string) bool {
	if slices.Contains(registered, uri) {
		return true
	}
	u, err := url.Parse(uri)
	if err != nil || strings.Contains(uri, "#") || u.Scheme != "http" || u.User != nil || u.Port() == "" {
		return false
	}
	switch u.Hostname() {
	case "127.0.0.1", "::1", "localhost":
	default:
		return false
	}
	// The address as sent, but for the port: nothing else of it is rewritten.
	authority := "http://" + u.Host
	if !strings.HasPrefix(uri, authority) {
		return false
	}
	return slices.Contains(registered, strings.TrimSuffix(authority, ":"+u.Port())+uri[len(authority):])
}

// AnyPostLogoutRedirect reports whether target is a registered post-logout address of any
// client (logout requests that name no client).
func (r *Clients) AnyPostLogoutRedirect(target string) bool {
	for _, c := range r.set.Load().byID {
		if Registered(c.PostLogoutRedirectURIs, target) {
			return true
		}
	}
	return false
}

// IssuedAt is the time to stamp on what is issued to the client at now (a token, a code): now,
// or its TokensNotBefore, to the millisecond up, if that is later. A front end whose clock is
// behind the one that registered or enabled the client (replicas' clocks may differ by 15 s)
// has read it, so what it issues is newer than that, and must not be refused as older.
func (c *Client) IssuedAt(now time.Time) time.Time {
	if !now.Before(c.TokensNotBefore) {
		return now
	}
	t := c.TokensNotBefore.Truncate(time.Millisecond)
	if t.Before(c.TokensNotBefore) {
		t = t.Add(time.Millisecond)
	}
	return t
}
