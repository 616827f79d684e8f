package oauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"slices"
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
}

// Allows reports whether the client may use grant.
func (c *Client) Allows(grant string) bool { return slices.Contains(c.Grants, grant) }

// Clients is the registry of clients.
type Clients struct {
	byID map[string]*Client
	ids  []string // in the order of the configuration
	// dummy is compared against when the client is unknown, so that an unknown id and a wrong
	// secret take the same time.
	dummy [32]byte
}

// Registration is a client as registered (configuration: oauth.clients).
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
}

// NewClients builds the registry (registrations already validated).
func NewClients(regs []Registration, defaultTTL time.Duration) *Clients {
	r := &Clients{byID: make(map[string]*Client, len(regs))}
	for _, c := range regs {
		ttl := c.AccessTokenTTL
		if ttl == 0 {
			ttl = defaultTTL
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
		r.ids = append(r.ids, c.ID)
		r.byID[c.ID] = &Client{
			ID: c.ID, secretHash: c.SecretHash, Grants: grants, Scopes: slices.Clone(c.Scopes),
			RedirectURIs: slices.Clone(c.RedirectURIs), SkipConsent: c.SkipConsent, AccessTokenTTL: ttl,
			PostLogoutRedirectURIs: slices.Clone(c.PostLogoutRedirectURIs), Introspect: c.Introspect,
			RateLimit: c.RateLimit, IDTokenAlg: alg,
		}
	}
	return r
}

// IDs returns the ids of every client, in the order of the configuration.
func (r *Clients) IDs() []string { return r.ids }

// Lookup returns a client by id, without authenticating it.
func (r *Clients) Lookup(id string) (*Client, bool) {
	c, ok := r.byID[id]
	return c, ok
}

// Authenticate returns the client when secret is its secret. Secrets are compared as SHA-256
// hashes in constant time: they are high-entropy values, so a slow hash would add nothing but
// cost to every grant.
func (r *Clients) Authenticate(id, secret string) (*Client, bool) {
	h := sha256.Sum256([]byte(secret))
	c, ok := r.byID[id]
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

// AnyPostLogoutRedirect reports whether target is a registered post-logout address of any
// client (logout requests that name no client).
func (r *Clients) AnyPostLogoutRedirect(target string) bool {
	for _, c := range r.byID {
		if slices.Contains(c.PostLogoutRedirectURIs, target) {
			return true
		}
	}
	return false
}
