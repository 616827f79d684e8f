package oauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"slices"
	"time"

	"github.com/campus-it/ucs/pkg/config"
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

// NewClients builds the registry from configuration (already validated).
func NewClients(cfg []config.Client, defaultTTL time.Duration) (*Clients, error) {
	r := &Clients{byID: make(map[string]*Client, len(cfg))}
	for _, c := range cfg {
		h, err := c.SecretHash()
		if err != nil {
			return nil, err
		}
		ttl := c.AccessTokenTTL.D()
		if ttl == 0 {
			ttl = defaultTTL
		}
		grants := slices.Clone(c.Grants)
		// Refresh tokens by default with the authorization code grant, as in Keycloak.
		if slices.Contains(grants, config.GrantAuthorizationCode) && !slices.Contains(grants, config.GrantRefreshToken) &&
			(c.RefreshTokens == nil || *c.RefreshTokens) {
			grants = append(grants, config.GrantRefreshToken)
		}
		r.ids = append(r.ids, c.ClientID)
		r.byID[c.ClientID] = &Client{
			ID: c.ClientID, secretHash: h, Grants: grants, Scopes: slices.Clone(c.Scopes),
			RedirectURIs: slices.Clone(c.RedirectURIs), SkipConsent: c.SkipConsent, AccessTokenTTL: ttl,
			PostLogoutRedirectURIs: slices.Clone(c.PostLogoutRedirectURIs), Introspect: c.Introspect, RateLimit: c.RateLimit, IDTokenAlg: c.IDTokenAlg,
		}
		if c.IDTokenAlg == "" {
			r.byID[c.ClientID].IDTokenAlg = "RS256"
		}
	}
	return r, nil
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
