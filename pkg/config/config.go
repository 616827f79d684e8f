// Package config holds the configuration of the api and worker programs: one YAML file, with
// NATS_URL and MONGODB_URI from the environment overriding it, defaults filled in one place and
// a Validate that reports every problem at once.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"

	"github.com/campus-it/ucs/pkg/platform/keyword"
	"github.com/campus-it/ucs/pkg/platform/safemode"
	"github.com/campus-it/ucs/pkg/push"
)

// KnownGrants and KnownScopes are the grant types and scopes a client may be registered with:
// the token service's vocabulary (oauth.KnownGrants, oauth.KnownScopes), written out here so
// that the configuration needs nothing of the token service; a test of package service checks
// that the two agree.
var (
	KnownGrants = []string{"client_credentials", "authorization_code", "refresh_token"}
	KnownScopes = []string{"openid", "notification.mp", "fake_api"}
)

// Defaults of the configuration.
const (
	DefaultRealm          = "campus"
	DefaultListen         = "127.0.0.1:8080"
	DefaultDatabase       = "ucs"
	DefaultTimeZone       = "Asia/Shanghai"
	DefaultStream         = "UCS_PUSH"
	DefaultConsumer       = "delivery"
	DefaultAccessTokenTTL = 7200 * time.Second
)

// Config is the whole configuration of the service. Every field documents its meaning, default
// and limits; Defaults fills the defaults and Validate checks them.
type Config struct {
	// Listen is the address the front end serves HTTP on. Default 127.0.0.1:8080.
	Listen string `yaml:"listen"`
	// PublicURL is the address clients reach the front end at; it is the token issuer and the base
	// of the platform's callback address. Default http://<listen>.
	PublicURL string `yaml:"public_url"`
	// TimeZone names the zone of the `time` field of every response, and of the times pages
	// show. Default Asia/Shanghai.
	TimeZone string `yaml:"time_zone"`
	// NATS is the queue.
	NATS NATS `yaml:"nats"`
	// MongoDB is the store of delivery results, bindings and signing keys.
	MongoDB MongoDB `yaml:"mongodb"`
	// OAuth is the token service.
	OAuth OAuth `yaml:"oauth"`
	// Directory is the built-in identity provider's user list.
	Directory Directory `yaml:"directory"`
	// Bindings map campus user numbers to the official account's follower ids; they are loaded
	// into the store at start, where the platform's subscribe events keep them current.
	Bindings []Binding `yaml:"bindings"`
	// Platform is the messaging platform account messages are sent through.
	Platform Platform `yaml:"platform"`
	// Worker tunes delivery.
	Worker Worker `yaml:"worker"`
	// Ops configures the operations page.
	Ops Ops `yaml:"ops"`
	// ShutdownGrace bounds a graceful stop on SIGTERM: a front end answers what it has in
	// flight, a worker finishes or returns what it holds, within it. Default 25s, under
	// Kubernetes' 30 s; 1s to 10m.
	ShutdownGrace Duration `yaml:"shutdown_grace"`
	// Log is how both programs log.
	Log Log `yaml:"log"`
}

// Ops configures the operations page, GET /ops.
type Ops struct {
	// Users are the campus user numbers who may open the operations page once signed in
	// through the usual sign-in (oauth.identity_providers); anyone else signed in is refused
	// with 403. Default empty: the page is off (404). At most 100, each 1 to 64 of A-Z a-z 0-9
	// . _ -, none twice. Standalone: the first demo user when empty.
	Users []string `yaml:"users"`
}

// MaxOpsUsers bounds ops.users: the list is read on every request of the page.
const MaxOpsUsers = 100

// Log configures logging.
type Log struct {
	// Format is text (default, for a person at a terminal) or json (one object a line, for a
	// log collector).
	Format string `yaml:"format"`
	// Level is debug, info (default), warn or error.
	Level string `yaml:"level"`
}

// NATS configures the JetStream stream that carries accepted pushes.
type NATS struct {
	// URL of the NATS servers (comma separated). Required unless standalone. Env NATS_URL wins.
	URL string `yaml:"url"`
	// Stream is the JetStream stream name. Default UCS_PUSH.
	Stream string `yaml:"stream"`
	// Consumer is the durable consumer all workers share. Default delivery.
	Consumer string `yaml:"consumer"`
	// Replicas of the stream: 1 to 5, 3 in a production cluster. Default 1.
	Replicas int `yaml:"replicas"`
	// MaxBytes bounds the stream's size; when full, pushes are refused (503) rather than old
	// messages dropped. Default 8 GiB.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxAge is how long a push may wait to be sent: a worker fails an older one (reason
	// "expired", not dead-lettered: a whole backlog may expire at once). Default 168h (7 days).
	MaxAge Duration `yaml:"max_age"`
}

// MongoDB configures the store.
type MongoDB struct {
	// URI of the MongoDB deployment. Required unless standalone. Env MONGODB_URI wins.
	URI string `yaml:"uri"`
	// Database name. Default ucs.
	Database string `yaml:"database"`
	// Retention is how long delivery records are kept. Default 720h (30 days); at least 1h.
	Retention Duration `yaml:"retention"`
}

// OAuth configures the token service.
type OAuth struct {
	// Realm is the realm name in the OpenID Connect paths and the issuer. Default campus.
	Realm string `yaml:"realm"`
	// AccessTokenTTL is the default lifetime of access tokens. Default 7200s; whole seconds from
	// 60s to 24h.
	AccessTokenTTL Duration `yaml:"access_token_ttl"`
	// SigningAlg is the JWT algorithm of new tokens: ES256 (default) or RS256.
	SigningAlg string `yaml:"signing_alg"`
	// KeyRotation is how long a signing key signs before it is replaced (a new key is
	// published 2 minutes before it signs, and front ends read the keys every minute). The
	// previous key stays in the JWKS and accepted until the next rotation, so every token it
	// signed (lifetimes are at most 24h) stays valid until it expires, and an ID token stays
	// verifiable as an id_token_hint for as long as its session lives. Default 720h; at least
	// 24h and at least session_ttl.
	KeyRotation Duration `yaml:"key_rotation"`
	// SessionTTL is the longest a sign-in session lasts; refresh tokens end with it. Default
	// 10h; 5m to 720h.
	SessionTTL Duration `yaml:"session_ttl"`
	// RefreshTokenTTL is the lifetime of a refresh token (refresh_expires_in), never beyond its
	// session, and the sign-in session's idle limit (Keycloak's SSO Session Idle): a session
	// unused that long ends (not while its consent page waits for an answer, up to the sign-in
	// request's 10 minutes). Default 1800s; 60s to session_ttl.
	RefreshTokenTTL Duration `yaml:"refresh_token_ttl"`
	// IdentityProviders are where users sign in.
	IdentityProviders IdentityProviders `yaml:"identity_providers"`
	// Clients are the registered client applications.
	Clients []Client `yaml:"clients"`
	// RateLimits bound how often tokens are granted (the interface: "requesting tokens too
	// often can trigger a rate limit").
	RateLimits RateLimits `yaml:"rate_limits"`
	// BruteForce locks a user of the login form for a while after repeated failed sign-ins,
	// as Keycloak's brute-force detection does (same defaults); it never locks a client or an
	// address (an address that fails a lot is slowed, see oauth.BruteForce).
	BruteForce BruteForce `yaml:"brute_force"`
	// TrustedProxies are the addresses (CIDR) of reverse proxies in front of the service,
	// whose X-Forwarded-For is believed. Default none: the source address of the connection
	// is the client's.
	TrustedProxies []string `yaml:"trusted_proxies"`
}

// RateLimits are token-bucket limits of the token endpoint, shared by every front end.
type RateLimits struct {
	// Disabled turns the limits off.
	Disabled bool `yaml:"disabled"`
	// PerClient is the grants per second a client gets. Default 50.
	PerClient float64 `yaml:"per_client"`
	// PerClientBurst is how many grants a client may get at once. Default 100.
	PerClientBurst int `yaml:"per_client_burst"`
	// PerAddress is the token requests per second a source address may make. Default 100.
	PerAddress float64 `yaml:"per_address"`
	// PerAddressBurst is how many token requests an address may make at once. Default 200.
	PerAddressBurst int `yaml:"per_address_burst"`
}

// BruteForce is the detection of repeated failures, with Keycloak's settings and defaults.
type BruteForce struct {
	// Disabled turns the detection off.
	Disabled bool `yaml:"disabled"`
	// Failures before a wait is imposed (Keycloak's "max login failures"). Default 30.
	Failures int `yaml:"failures"`
	// WaitIncrement is the wait added each time Failures more failures happen. Default 60s.
	WaitIncrement Duration `yaml:"wait_increment"`
	// MaxWait caps the wait. Default 15m.
	MaxWait Duration `yaml:"max_wait"`
	// FailureReset forgets the failures when none happened for this long. Default 12h.
	FailureReset Duration `yaml:"failure_reset"`
	// QuickLoginCheck: two failures closer than this impose MinQuickLoginWait. Default 1s.
	QuickLoginCheck Duration `yaml:"quick_login_check"`
	// MinQuickLoginWait is the wait after failures in quick succession. Default 60s.
	MinQuickLoginWait Duration `yaml:"min_quick_login_wait"`
}

// IdentityProviders lists the providers users sign in with; kc_idp_hint picks one.
type IdentityProviders struct {
	// Default is the provider used when the request names none: cas or local. Default cas when
	// cas.url is set, else local when it is enabled; with neither, sign-in is off.
	Default string `yaml:"default"`
	// CAS is the campus single sign-on (CAS protocol 3.0).
	CAS CASProvider `yaml:"cas"`
	// Local is the built-in directory (directory.users), for development and tests.
	Local LocalProvider `yaml:"local"`
}

// CASProvider is the campus single sign-on.
type CASProvider struct {
	// URL is the CAS server's base, e.g. https://cas.example.edu/cas. Empty: no CAS.
	URL string `yaml:"url"`
}

// LocalProvider is the built-in directory's login form.
type LocalProvider struct {
	// Enabled turns the login form on.
	Enabled bool `yaml:"enabled"`
}

// Client is one registered client application.
type Client struct {
	// ClientID identifies the client. Required, unique, 1 to 64 characters of [A-Za-z0-9._-].
	ClientID string `yaml:"client_id" json:"client_id"`
	// ClientSecret is the secret in clear text, at least 16 characters. Exactly one of
	// ClientSecret and ClientSecretSHA256 is required; the service keeps only its hash.
	ClientSecret string `yaml:"client_secret" json:"client_secret,omitempty"`
	// ClientSecretSHA256 is the hex SHA-256 of the secret, for files that must not hold it.
	ClientSecretSHA256 string `yaml:"client_secret_sha256" json:"client_secret_sha256,omitempty"`
	// Grants the client may use: client_credentials, authorization_code, refresh_token. Required.
	Grants []string `yaml:"grants" json:"grants"`
	// Scopes the client may be granted, among openid, notification.mp, fake_api. Required.
	Scopes []string `yaml:"scopes" json:"scopes"`
	// RedirectURIs are the exact callback addresses of the authorization code grant.
	RedirectURIs []string `yaml:"redirect_uris" json:"redirect_uris,omitempty"`
	// PostLogoutRedirectURIs are the exact addresses logout may return to. Default: RedirectURIs.
	PostLogoutRedirectURIs []string `yaml:"post_logout_redirect_uris" json:"post_logout_redirect_uris,omitempty"`
	// SkipConsent lets the client's users skip the consent page.
	SkipConsent bool `yaml:"skip_consent" json:"skip_consent,omitempty"`
	// AccessTokenTTL overrides OAuth.AccessTokenTTL for this client (the interface's "longer
	// lifetime by special application"). Zero: the default. 60s to 24h.
	AccessTokenTTL Duration `yaml:"access_token_ttl" json:"access_token_ttl,omitempty"`
	// Introspect lets the client introspect the tokens of other clients (RFC 7662), as a
	// resource server does. Without it a client learns only about its own tokens.
	Introspect bool `yaml:"introspect" json:"introspect,omitempty"`
	// IDTokenAlg is the algorithm of the client's ID tokens: RS256 (default, as OpenID Connect
	// prescribes for clients that registered none) or ES256.
	IDTokenAlg string `yaml:"id_token_signed_response_alg" json:"id_token_signed_response_alg,omitempty"`
	// RefreshTokens: a client allowed the authorization code grant gets refresh tokens (the
	// refresh_token grant) unless this is false, as in Keycloak.
	RefreshTokens *bool `yaml:"refresh_tokens" json:"refresh_tokens,omitempty"`
	// RateLimit overrides oauth.rate_limits.per_client for this client (grants per second;
	// the burst is twice that). Zero: the default.
	RateLimit float64 `yaml:"rate_limit" json:"rate_limit,omitempty"`
	// BackchannelLogoutURI is where the client is told, by a signed logout token (OpenID
	// Connect Back-Channel Logout 1.0), that a sign-in session it received tokens in has ended.
	// An absolute http or https URL without fragment. Empty: the client is not told.
	BackchannelLogoutURI string `yaml:"backchannel_logout_uri" json:"backchannel_logout_uri,omitempty"`
	// BackchannelLogoutSessionRequired records that the client needs the sid claim in logout
	// tokens. Every logout token carries sid and sub, so it changes nothing but is accepted as
	// the specification names it.
	BackchannelLogoutSessionRequired bool `yaml:"backchannel_logout_session_required" json:"backchannel_logout_session_required,omitempty"`
}

// SecretHash returns the SHA-256 of the client's secret, from whichever form the file gave.
func (c Client) SecretHash() ([32]byte, error) {
	var h [32]byte
	if c.ClientSecret != "" {
		return sha256.Sum256([]byte(c.ClientSecret)), nil
	}
	b, err := hex.DecodeString(c.ClientSecretSHA256)
	if err != nil || len(b) != len(h) {
		return h, errors.New("client_secret_sha256 is not 64 hex digits")
	}
	copy(h[:], b)
	return h, nil
}

// Directory is the built-in identity provider.
type Directory struct {
	// Users who can sign in with the built-in login form.
	Users []User `yaml:"users"`
}

// User is one account of the built-in directory.
type User struct {
	// UserID is the campus user number. Required, unique.
	UserID string `yaml:"userid" json:"userid"`
	// Password in clear text (development only) or PasswordHash (bcrypt); one is required.
	Password     string `yaml:"password" json:"password,omitempty"`
	PasswordHash string `yaml:"password_hash" json:"password_hash,omitempty"`
}

// Binding ties a campus user number to the account's follower id (openid).
type Binding struct {
	UserID string `yaml:"userid" json:"userid"`
	OpenID string `yaml:"openid" json:"openid"`
}

// Platform is the messaging platform account.
type Platform struct {
	// APIBase is the platform API's base address, e.g. https://api.weixin.qq.com. Required
	// for workers unless standalone, where empty means the built-in simulator.
	APIBase string `yaml:"api_base"`
	// OAuthBase is the origin of the platform's web authorization page
	// (connect/oauth2/authorize), which the binding page sends students to; the code it
	// returns is exchanged at APIBase. Default https://open.weixin.qq.com when APIBase is set;
	// standalone with the simulator: the simulator.
	OAuthBase string `yaml:"oauth_base"`
	// AppID and Secret of the official account. Required with APIBase.
	AppID  string `yaml:"appid"`
	Secret string `yaml:"secret"`
	// CallbackToken signs the platform's event pushes to the callback endpoint. Required with
	// APIBase; at least 3 characters.
	CallbackToken string `yaml:"callback_token"`
	// EncodingAESKey is the account's message encryption key (EncodingAESKey, 43 letters and
	// digits), set when the account's callbacks use the platform's safe mode: event pushes are
	// then encrypted with it, signed over the encrypted body (msg_signature), and refused in
	// plaintext or for another appid. Empty (the default): plain mode, whose signature covers
	// only the query. Needs appid. A secret: never logged.
	EncodingAESKey string `yaml:"encoding_aes_key"`
	// Templates maps each push type to its template and keyword mapping. Every type that is to
	// be delivered needs one; a message of a type without one fails with that reason.
	Templates map[string]Template `yaml:"templates"`
	// MaxRate caps the messages all workers together send per second, through a budget they
	// share in NATS. Default 0: no cap. At most 100000.
	MaxRate float64 `yaml:"max_rate"`
	// QuotaReset is the time of day (HH:MM, in time_zone) at which the platform renews the
	// account's daily quota: after its 45009 answer every worker pauses sending until then (or
	// until an operator resumes it). Default 00:00.
	QuotaReset string `yaml:"quota_reset"`
}

// Template maps the data fields of one push type onto a platform template.
type Template struct {
	// TemplateID is the platform's template id. Required.
	TemplateID string `yaml:"template_id" json:"template_id"`
	// Fields maps a data field of the push (e.g. content) to a template keyword (e.g. thing4).
	// Fields not listed are not sent (header and remark are stripped by the platform anyway).
	Fields map[string]string `yaml:"fields" json:"fields"`
}

// TemplateFields returns the keyword mapping of every configured push type: type → data field
// → template keyword, as push.NewParser takes it.
func (pl *Platform) TemplateFields() map[string]map[string]string {
	out := make(map[string]map[string]string, len(pl.Templates))
	for t, tpl := range pl.Templates {
		out[t] = tpl.Fields
	}
	return out
}

// Worker tunes the delivery workers.
type Worker struct {
	// Concurrency is how many messages one worker process delivers at once. Default 256; 1 to
	// 4096. Deliveries wait mostly on the platform and on group-committed writes, so many in
	// flight keep a worker busy: 256 delivers about six times what 64 does.
	Concurrency int `yaml:"concurrency"`
	// MaxAttempts is how many times a message is tried before it fails. Default 12; 1 to 1000.
	MaxAttempts int `yaml:"max_attempts"`
	// BackoffInitial is the delay before the first retry. Default 2s.
	BackoffInitial Duration `yaml:"backoff_initial"`
	// BackoffMax caps the delay between retries. Default 5m; at most 9m, so that a retry after
	// an answer lost on the way reaches the platform within its 10-minute duplicate check of
	// the message's client_msg_id, and the user does not get it twice.
	BackoffMax Duration `yaml:"backoff_max"`
	// AckWait is how long the queue waits for a worker's answer before redelivering. Default 60s,
	// at most MaxBackoff: the copy of a message whose worker stopped during its call calls the
	// platform again, which must come within the platform's duplicate check of the first call.
	AckWait Duration `yaml:"ack_wait"`
	// Listen is the address a worker serves /healthz, /readyz and /metrics on. Default
	// 127.0.0.1:9091; set 0.0.0.0:9091 in a container so probes and Prometheus reach it.
	Listen string `yaml:"listen"`
}

// Duration is a time.Duration written in YAML as "7200s", "10m" or a number of seconds.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML reads "7200s", "2h" or 7200 (seconds).
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: duration must be a string like 7200s or a number of seconds", n.Line)
	}
	if secs, err := strconv.ParseInt(n.Value, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if err != nil || secs > math.MaxInt64/int64(time.Second) || secs < math.MinInt64/int64(time.Second) {
			return fmt.Errorf("line %d: %s seconds is too long a duration", n.Line, n.Value)
		}
		*d = Duration(time.Duration(secs) * time.Second)
		return nil
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration like 7200s", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as Go writes it ("2h0m0s").
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Duration(d).String())), nil
}

// Load reads the YAML file at path; unknown keys are errors. It does not fill defaults.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(b)
}

// Parse reads one YAML document; unknown keys and further documents are errors. It does not fill defaults.
func Parse(b []byte) (*Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	// A document after the first (an override appended after "---") would otherwise be
	// ignored without a word, its keys unchecked.
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, errors.New("parse config: the file holds more than one YAML document; put every setting in one")
	}
	return &c, nil
}

// ApplyEnv lets NATS_URL and MONGODB_URI override the file, as deployments set them.
func (c *Config) ApplyEnv(getenv func(string) string) {
	if v := getenv("NATS_URL"); v != "" {
		c.NATS.URL = v
	}
	if v := getenv("MONGODB_URI"); v != "" {
		c.MongoDB.URI = v
	}
}

// Defaults fills every unset field with its default.
func (c *Config) Defaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.PublicURL == "" {
		c.PublicURL = "http://" + c.Listen
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	if c.TimeZone == "" {
		c.TimeZone = DefaultTimeZone
	}
	if c.NATS.Stream == "" {
		c.NATS.Stream = DefaultStream
	}
	if c.NATS.Consumer == "" {
		c.NATS.Consumer = DefaultConsumer
	}
	if c.NATS.Replicas == 0 {
		c.NATS.Replicas = 1
	}
	if c.NATS.MaxBytes == 0 {
		c.NATS.MaxBytes = 8 << 30
	}
	if c.NATS.MaxAge == 0 {
		c.NATS.MaxAge = Duration(7 * 24 * time.Hour)
	}
	if c.MongoDB.Database == "" {
		c.MongoDB.Database = DefaultDatabase
	}
	if c.MongoDB.Retention == 0 {
		c.MongoDB.Retention = Duration(30 * 24 * time.Hour)
	}
	if c.OAuth.Realm == "" {
		c.OAuth.Realm = DefaultRealm
	}
	if c.OAuth.AccessTokenTTL == 0 {
		c.OAuth.AccessTokenTTL = Duration(DefaultAccessTokenTTL)
	}
	if c.OAuth.SigningAlg == "" {
		c.OAuth.SigningAlg = "ES256"
	}
	if c.OAuth.KeyRotation == 0 {
		c.OAuth.KeyRotation = Duration(720 * time.Hour)
	}
	if c.OAuth.SessionTTL == 0 {
		c.OAuth.SessionTTL = Duration(10 * time.Hour)
	}
	if c.OAuth.RefreshTokenTTL == 0 {
		c.OAuth.RefreshTokenTTL = Duration(1800 * time.Second)
	}
	rl := &c.OAuth.RateLimits
	if rl.PerClient == 0 {
		rl.PerClient = 50
	}
	if rl.PerClientBurst == 0 {
		rl.PerClientBurst = 100
	}
	if rl.PerAddress == 0 {
		rl.PerAddress = 100
	}
	if rl.PerAddressBurst == 0 {
		rl.PerAddressBurst = 200
	}
	bf := &c.OAuth.BruteForce
	if bf.Failures == 0 {
		bf.Failures = 30
	}
	if bf.WaitIncrement == 0 {
		bf.WaitIncrement = Duration(time.Minute)
	}
	if bf.MaxWait == 0 {
		bf.MaxWait = Duration(15 * time.Minute)
	}
	if bf.FailureReset == 0 {
		bf.FailureReset = Duration(12 * time.Hour)
	}
	if bf.QuickLoginCheck == 0 {
		bf.QuickLoginCheck = Duration(time.Second)
	}
	if bf.MinQuickLoginWait == 0 {
		bf.MinQuickLoginWait = Duration(time.Minute)
	}
	idp := &c.OAuth.IdentityProviders
	if idp.Default == "" {
		switch {
		case idp.CAS.URL != "":
			idp.Default = "cas"
		case idp.Local.Enabled:
			idp.Default = "local"
		}
	}
	for i := range c.OAuth.Clients {
		cl := &c.OAuth.Clients[i]
		if cl.PostLogoutRedirectURIs == nil {
			cl.PostLogoutRedirectURIs = cl.RedirectURIs
		}
	}
	if c.Worker.Concurrency == 0 {
		c.Worker.Concurrency = 256
	}
	if c.Worker.MaxAttempts == 0 {
		c.Worker.MaxAttempts = 12
	}
	if c.Worker.BackoffInitial == 0 {
		c.Worker.BackoffInitial = Duration(2 * time.Second)
	}
	if c.Worker.BackoffMax == 0 {
		c.Worker.BackoffMax = Duration(5 * time.Minute)
	}
	if c.Worker.AckWait == 0 {
		c.Worker.AckWait = Duration(60 * time.Second)
	}
	if c.Worker.Listen == "" {
		c.Worker.Listen = DefaultWorkerListen
	}
	if c.Platform.QuotaReset == "" {
		c.Platform.QuotaReset = "00:00"
	}
	if c.Platform.OAuthBase == "" && c.Platform.APIBase != "" {
		c.Platform.OAuthBase = DefaultOAuthBase
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = Duration(25 * time.Second)
	}
	if c.Log.Format == "" {
		c.Log.Format = "text"
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
}

// shownURL is an address as a message may quote it: a password in it (a gateway's credentials)
// written xxxxx; one that does not parse is not quoted at all, as it may hold a password that
// breaks it.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "(not a URL; a password in it must be percent-encoded)"
	case u.User != nil:
		return strconv.Quote(u.Redacted())
	case strings.Contains(raw, "@"):
		// User info the parser did not take as such (the scheme or a slash left out).
		return "(not shown: it may hold a password)"
	}
	return strconv.Quote(raw)
}

// DefaultOAuthBase is the real platform's web authorization origin.
const DefaultOAuthBase = "https://open.weixin.qq.com"

// DefaultWorkerListen is where a worker serves its probes and metrics unless configured.
const DefaultWorkerListen = "127.0.0.1:9091"

// QuotaResetAfter is the first time after now at which the platform's daily quota renews:
// QuotaReset in loc.
func (p Platform) QuotaResetAfter(now time.Time, loc *time.Location) time.Time {
	t, err := time.Parse("15:04", p.QuotaReset)
	if err != nil {
		t = time.Time{}
	}
	n := now.In(loc)
	at := time.Date(n.Year(), n.Month(), n.Day(), t.Hour(), t.Minute(), 0, 0, loc)
	if !at.After(n) {
		at = at.AddDate(0, 0, 1)
	}
	return at
}

// Role says which program a configuration is checked for: each needs different parts.
type Role int

// The roles.
const (
	// RoleAPI is the front end: needs NATS, MongoDB and OAuth.
	RoleAPI Role = iota
	// RoleWorker is a delivery worker: needs NATS, MongoDB and the platform.
	RoleWorker
	// RoleStandalone embeds NATS, MongoDB and the platform simulator where they are not given.
	RoleStandalone
)

// Validate checks a configuration with defaults filled for the given role and reports every
// problem at once, one per line, each naming the key.
func (c *Config) Validate(role Role) error {
	var p problems
	if !validHostPort(c.Listen) {
		p.add("listen: %q is not host:port (port 0 to 65535)", c.Listen)
	}
	// The issuer is public_url with a path appended: it has no query, fragment or user info
	// (OpenID Connect Discovery 1.0 §3).
	if u, err := url.Parse(c.PublicURL); err == nil && u.Host != "" && !ReachableHost(u.Hostname()) {
		p.add("public_url: %q names no host clients can reach; set it to the address clients use (its default, http://<listen>, needs listen to name one)", c.PublicURL)
	} else if err != nil || !strings.HasPrefix(c.PublicURL, u.Scheme+"://") ||
		(u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil ||
		u.RawQuery != "" || u.ForceQuery || strings.ContainsAny(c.PublicURL, "#") ||
		strings.IndexFunc(c.PublicURL, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		p.add("public_url: %q is not an absolute http(s) URL without query, fragment or user info", c.PublicURL)
	} else if role == RoleAPI && u.Port() == "0" {
		// The issuer of every token, discovery and the platform's callback address would name
		// port 0. (The standalone stack sets its address once it listens.)
		p.add("public_url: %q names port 0, which no client can reach; set it to the address clients use (its default, http://<listen>, needs listen to name a port)", c.PublicURL)
	}
	if _, err := time.LoadLocation(c.TimeZone); err != nil {
		p.add("time_zone: %q is not a known time zone", c.TimeZone)
	}
	if role != RoleStandalone && c.NATS.URL == "" {
		p.add("nats.url: required (or set NATS_URL)")
	}
	if c.NATS.URL != "" {
		for i, u := range strings.Split(c.NATS.URL, ",") {
			// The text is not shown: it may carry a password (percent-encode one with '/',
			// '+' or '@' in it).
			if _, err := url.Parse(strings.TrimSpace(u)); err != nil {
				p.add("nats.url: server %d of the list is not a URL (a password in it must be percent-encoded)", i+1)
			}
		}
	}
	if c.NATS.Replicas < 1 || c.NATS.Replicas > 5 {
		p.add("nats.replicas: %d, must be 1 to 5", c.NATS.Replicas)
	}
	if !validName(c.NATS.Stream) {
		p.add("nats.stream: %q must be letters, digits, - or _", c.NATS.Stream)
	}
	if !validName(c.NATS.Consumer) {
		p.add("nats.consumer: %q must be letters, digits, - or _", c.NATS.Consumer)
	}
	if c.NATS.MaxBytes < 1<<20 {
		p.add("nats.max_bytes: %d, at least 1 MiB", c.NATS.MaxBytes)
	}
	// The stream remembers a push's Idempotency-Key for as long as the key is kept (24h), and
	// no longer than a message may wait: a shorter max_age would let a retry store a push
	// twice.
	if c.NATS.MaxAge.D() < 24*time.Hour {
		p.add("nats.max_age: %s, at least 24h (an Idempotency-Key is kept 24h, and the stream must remember it as long)", c.NATS.MaxAge.D())
	}
	if role != RoleStandalone && c.MongoDB.URI == "" {
		p.add("mongodb.uri: required (or set MONGODB_URI)")
	}
	if !validName(c.MongoDB.Database) {
		p.add("mongodb.database: %q must be letters, digits, - or _", c.MongoDB.Database)
	}
	if c.MongoDB.Retention.D() < max(time.Hour, c.NATS.MaxAge.D()) {
		// A waiting message's record holds its attempts: it must outlive the message.
		p.add("mongodb.retention: %s, at least 1h and at least nats.max_age (%s)", c.MongoDB.Retention.D(), c.NATS.MaxAge.D())
	} else if c.MongoDB.Retention.D() > MaxRetention {
		p.add("mongodb.retention: %s, at most %s (MongoDB's TTL index holds at most 2^31-1 seconds)", c.MongoDB.Retention.D(), MaxRetention)
	}
	c.validateOAuth(&p)
	seenUser := map[string]bool{}
	for i, u := range c.Directory.Users {
		at := fmt.Sprintf("directory.users[%d]", i)
		if u.UserID == "" {
			p.add("%s.userid: required", at)
		} else if seenUser[u.UserID] {
			p.add("%s.userid: %q appears twice", at, u.UserID)
		}
		seenUser[u.UserID] = true
		if (u.Password == "") == (u.PasswordHash == "") {
			p.add("%s: exactly one of password and password_hash is required", at)
		} else if _, err := bcrypt.Cost([]byte(u.PasswordHash)); u.PasswordHash != "" && err != nil {
			p.add("%s.password_hash: not a bcrypt hash", at)
		}
	}
	bound, follower := map[string]bool{}, map[string]bool{}
	for i, b := range c.Bindings {
		switch {
		case b.UserID == "" || b.OpenID == "":
			p.add("bindings[%d]: userid and openid are required", i)
		case !push.ValidUserID(b.UserID):
			p.add("bindings[%d].userid: %q is no user number a push can name (1 to 64 of A-Z a-z 0-9 . _ -)", i, b.UserID)
		case bound[b.UserID]:
			// Loaded one over the other, the first would be dropped without a word.
			p.add("bindings[%d].userid: %q appears twice", i, b.UserID)
		case follower[b.OpenID]:
			// A follower is bound to one user number: another's pushes would reach it.
			p.add("bindings[%d].openid: appears twice", i)
		}
		bound[b.UserID], follower[b.OpenID] = true, true
	}
	c.validatePlatform(role, &p)
	c.validateOps(&p)
	w := c.Worker
	if w.Concurrency < 1 || w.Concurrency > 4096 {
		p.add("worker.concurrency: %d, must be 1 to 4096", w.Concurrency)
	}
	if w.MaxAttempts < 1 || w.MaxAttempts > 1000 {
		p.add("worker.max_attempts: %d, must be 1 to 1000", w.MaxAttempts)
	}
	if w.BackoffInitial.D() < 10*time.Millisecond {
		p.add("worker.backoff_initial: %s, at least 10ms", w.BackoffInitial.D())
	}
	if w.BackoffMax.D() < w.BackoffInitial.D() {
		p.add("worker.backoff_max: %s, less than backoff_initial", w.BackoffMax.D())
	}
	if w.BackoffMax.D() > MaxBackoff {
		p.add("worker.backoff_max: %s, at most %s (a retry must reach the platform within its 10-minute duplicate check)",
			w.BackoffMax.D(), MaxBackoff)
	}
	if w.AckWait.D() < 5*time.Second || w.AckWait.D() > MaxBackoff {
		p.add("worker.ack_wait: %s, must be 5s to %s (the copy of a message whose worker stopped during its call must reach the platform within its 10-minute duplicate check)",
			w.AckWait.D(), MaxBackoff)
	}
	if !validHostPort(w.Listen) {
		p.add("worker.listen: %q is not host:port (port 0 to 65535)", w.Listen)
	}
	if c.ShutdownGrace.D() < time.Second || c.ShutdownGrace.D() > 10*time.Minute {
		p.add("shutdown_grace: %s, must be 1s to 10m", c.ShutdownGrace.D())
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		p.add("log.format: %q, must be text or json", c.Log.Format)
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		p.add("log.level: %q, must be debug, info, warn or error", c.Log.Level)
	}
	return p.err()
}

func (c *Config) validateOAuth(p *problems) {
	o := c.OAuth
	if rl := o.RateLimits; !(rl.PerClient >= 0) || !(rl.PerAddress >= 0) || math.IsInf(rl.PerClient, 0) || math.IsInf(rl.PerAddress, 0) ||
		rl.PerClientBurst < 1 || rl.PerAddressBurst < 1 {
		p.add("oauth.rate_limits: rates must be positive and bursts at least 1")
	}
	if bf := o.BruteForce; bf.Failures < 1 || bf.WaitIncrement.D() <= 0 || bf.MaxWait.D() < bf.WaitIncrement.D() ||
		bf.FailureReset.D() < time.Minute || bf.QuickLoginCheck.D() < 0 || bf.MinQuickLoginWait.D() < 0 {
		p.add("oauth.brute_force: failures at least 1, wait_increment positive, max_wait at least wait_increment, failure_reset at least 1m")
	}
	for _, cidr := range o.TrustedProxies {
		if _, _, err := net.ParseCIDR(cidr); err != nil {
			p.add("oauth.trusted_proxies: %q is not a CIDR address range", cidr)
		}
	}
	if !validName(o.Realm) {
		p.add("oauth.realm: %q must be letters, digits, - or _", o.Realm)
	}
	if !validTTL(o.AccessTokenTTL) {
		p.add("oauth.access_token_ttl: %s, must be whole seconds from 60s to 24h", o.AccessTokenTTL.D())
	}
	if o.SigningAlg != "ES256" && o.SigningAlg != "RS256" {
		p.add("oauth.signing_alg: %q, must be ES256 or RS256", o.SigningAlg)
	}
	if o.KeyRotation.D() < 24*time.Hour {
		p.add("oauth.key_rotation: %s, at least 24h", o.KeyRotation.D())
	} else if o.KeyRotation.D() < o.SessionTTL.D() {
		// A key is known until the rotation after the one that retires it, at least
		// key_rotation after its last signature; a session's first ID token, an application's
		// id_token_hint at logout, must verify as long as the session lives.
		p.add("oauth.key_rotation: %s, at least session_ttl (%s): an ID token must verify as long as its session lives, for the application's logout", o.KeyRotation.D(), o.SessionTTL.D())
	}
	if o.SessionTTL.D() < 5*time.Minute || o.SessionTTL.D() > 720*time.Hour {
		p.add("oauth.session_ttl: %s, must be 5m to 720h", o.SessionTTL.D())
	}
	if o.RefreshTokenTTL.D() < time.Minute || o.RefreshTokenTTL.D() > o.SessionTTL.D() {
		p.add("oauth.refresh_token_ttl: %s, must be 60s to session_ttl", o.RefreshTokenTTL.D())
	}
	idp := o.IdentityProviders
	if idp.CAS.URL != "" {
		if u, err := url.Parse(idp.CAS.URL); err != nil || !lowerHTTP(idp.CAS.URL) || u.Hostname() == "" ||
			strings.ContainsAny(idp.CAS.URL, "?#@") {
			// No user info either: every CAS sign-in sends the student's browser there.
			p.add("oauth.identity_providers.cas.url: %s is not an absolute http(s) URL without user info, query or fragment", shownURL(idp.CAS.URL))
		}
	}
	switch idp.Default {
	case "cas":
		if idp.CAS.URL == "" {
			p.add("oauth.identity_providers.default: cas, but cas.url is not set")
		}
	case "local":
		if !idp.Local.Enabled {
			p.add("oauth.identity_providers.default: local, but local.enabled is false")
		}
	case "":
		// No provider: sign-in is off.
	default:
		p.add("oauth.identity_providers.default: %q, must be cas or local", idp.Default)
	}
	seen := map[string]bool{}
	for i, cl := range o.Clients {
		at := fmt.Sprintf("oauth.clients[%d].", i)
		if seen[cl.ClientID] && validClientID(cl.ClientID) {
			p.add("%sclient_id: %q appears twice", at, cl.ClientID)
		}
		seen[cl.ClientID] = true
		cl.check(at, p)
	}
}

// Validate checks one client as the configuration's oauth.clients[] are checked (the admin
// commands create clients with it), and reports every problem at once.
func (cl Client) Validate() error {
	var p problems
	cl.check("", &p)
	return p.err()
}

// check adds the problems of cl to p, each named by prefix and the field.
func (cl Client) check(prefix string, p *problems) {
	at := strings.TrimSuffix(prefix, ".")
	if at == "" {
		at = "client"
	}
	if !validClientID(cl.ClientID) {
		p.add("%sclient_id: %q must be 1 to 64 characters of letters, digits, '.', '_' or '-'", prefix, cl.ClientID)
	}
	switch {
	case cl.ClientSecret != "" && cl.ClientSecretSHA256 != "":
		p.add("%s: give client_secret or client_secret_sha256, not both", at)
	case cl.ClientSecret == "" && cl.ClientSecretSHA256 == "":
		p.add("%s: client_secret or client_secret_sha256 is required", at)
	case cl.ClientSecret != "" && len(cl.ClientSecret) < 16:
		p.add("%sclient_secret: %d characters, at least 16", prefix, len(cl.ClientSecret))
	default:
		if _, err := cl.SecretHash(); err != nil {
			p.add("%s%s", prefix, err)
		}
	}
	if len(cl.Grants) == 0 {
		p.add("%sgrants: at least one grant is required", prefix)
	}
	for _, g := range cl.Grants {
		if !slices.Contains(KnownGrants, g) {
			p.add("%sgrants: unknown grant %q", prefix, g)
		}
	}
	if len(cl.Scopes) == 0 {
		p.add("%sscopes: at least one scope is required", prefix)
	}
	for _, s := range cl.Scopes {
		if !slices.Contains(KnownScopes, s) {
			p.add("%sscopes: unknown scope %q", prefix, s)
		}
	}
	if slices.Contains(cl.Grants, "authorization_code") && len(cl.RedirectURIs) == 0 {
		p.add("%sredirect_uris: required for the authorization_code grant", prefix)
	}
	for _, r := range cl.RedirectURIs {
		if u, err := url.Parse(r); err != nil || !u.IsAbs() || u.Hostname() == "" || strings.Contains(r, "#") {
			p.add("%sredirect_uris: %q is not an absolute URL without fragment", prefix, r)
		}
	}
	for _, r := range cl.PostLogoutRedirectURIs {
		if u, err := url.Parse(r); err != nil || !u.IsAbs() || u.Hostname() == "" || strings.Contains(r, "#") {
			p.add("%spost_logout_redirect_uris: %q is not an absolute URL without fragment", prefix, r)
		}
	}
	if r := cl.BackchannelLogoutURI; r != "" {
		if u, err := url.Parse(r); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || strings.Contains(r, "#") {
			p.add("%sbackchannel_logout_uri: %q is not an absolute http or https URL without fragment", prefix, r)
		}
	}
	if cl.AccessTokenTTL != 0 && !validTTL(cl.AccessTokenTTL) {
		p.add("%saccess_token_ttl: %s, must be whole seconds from 60s to 24h", prefix, cl.AccessTokenTTL.D())
	}
	if cl.RefreshTokens != nil && !*cl.RefreshTokens && slices.Contains(cl.Grants, "refresh_token") {
		p.add("%s: refresh_tokens is false but grants lists refresh_token", at)
	}
	if cl.IDTokenAlg != "" && cl.IDTokenAlg != "RS256" && cl.IDTokenAlg != "ES256" {
		p.add("%sid_token_signed_response_alg: %q, must be RS256 or ES256", prefix, cl.IDTokenAlg)
	}
	if !(cl.RateLimit >= 0) || math.IsInf(cl.RateLimit, 0) { // NaN fails every comparison: written so it is refused
		p.add("%srate_limit: %v, must be positive (or 0 for the default)", prefix, cl.RateLimit)
	}
}

func (c *Config) validatePlatform(role Role, p *problems) {
	pl := c.Platform
	if pl.APIBase == "" {
		if role == RoleWorker {
			p.add("platform.api_base: required")
		}
	} else {
		if u, err := url.Parse(pl.APIBase); err != nil || !lowerHTTP(pl.APIBase) || u.Hostname() == "" {
			p.add("platform.api_base: %s is not an absolute http(s) URL", shownURL(pl.APIBase))
		} else if strings.ContainsAny(pl.APIBase, "?#") { // also a bare "?" or "#", which url.Parse leaves empty
			p.add("platform.api_base: %s has a query or fragment; give the API's origin, e.g. https://api.weixin.qq.com", shownURL(pl.APIBase))
		}
		if pl.AppID == "" {
			p.add("platform.appid: required with api_base")
		}
		if pl.Secret == "" {
			p.add("platform.secret: required with api_base")
		}
		if role != RoleWorker && !ValidCallbackToken(pl.CallbackToken) {
			// The front end checks the platform's signed event pushes; a worker takes none.
			// The platform's console takes no other token, and the placeholders shipped in
			// deployments/ are none, so a front end left with one does not start.
			p.add("platform.callback_token: required with api_base, 3 to 32 letters and digits (the Token set in the platform's console)")
		}
	}
	if pl.OAuthBase != "" {
		if u, err := url.Parse(pl.OAuthBase); err != nil || !lowerHTTP(pl.OAuthBase) || u.Hostname() == "" ||
			strings.ContainsAny(pl.OAuthBase, "?#@") {
			// No user info either: students' browsers are sent there, and would see it.
			p.add("platform.oauth_base: %s is not an absolute http(s) URL without user info, query or fragment", shownURL(pl.OAuthBase))
		}
	}
	if pl.EncodingAESKey != "" {
		// The key's text is never part of a message: it is a secret.
		if _, err := safemode.ParseKey(pl.EncodingAESKey); err != nil {
			p.add("platform.encoding_aes_key: %d characters; must be the account's EncodingAESKey, 43 letters and digits", len(pl.EncodingAESKey))
		}
		if pl.AppID == "" {
			p.add("platform.appid: required with encoding_aes_key (safe mode checks it in every callback)")
		}
	}
	if !(pl.MaxRate >= 0 && pl.MaxRate <= 100_000) { // so that NaN is refused too
		p.add("platform.max_rate: %g, must be 0 (no cap) to 100000", pl.MaxRate)
	}
	if _, err := time.Parse("15:04", pl.QuotaReset); err != nil || len(pl.QuotaReset) != len("15:04") {
		p.add("platform.quota_reset: %q is not a time of day HH:MM", pl.QuotaReset)
	}
	types := make([]string, 0, len(pl.Templates))
	for t := range pl.Templates {
		types = append(types, t)
	}
	sort.Strings(types)
	for _, t := range types {
		tpl := pl.Templates[t]
		if !slices.Contains(PushTypes, t) {
			p.add("platform.templates.%s: unknown push type", t)
		}
		if tpl.TemplateID == "" {
			p.add("platform.templates.%s.template_id: required", t)
		}
		if len(tpl.Fields) == 0 {
			p.add("platform.templates.%s.fields: at least one field is required", t)
		}
		spec, known := push.LookupType(t)
		fields := make([]string, 0, len(tpl.Fields))
		for f := range tpl.Fields {
			fields = append(fields, f)
		}
		sort.Strings(fields)
		mappedTo := make(map[string]string, len(fields))
		for _, f := range fields {
			kw := tpl.Fields[f]
			// A keyword holds one value: of two fields mapped to it, one would be lost.
			if other, ok := mappedTo[kw]; ok {
				p.add("platform.templates.%s.fields: %s and %s both map to %s; a keyword takes one field", t, other, f, kw)
			}
			mappedTo[kw] = f
			if known && !slices.ContainsFunc(spec.Fields, func(x push.Field) bool { return x.Name == f }) {
				p.add("platform.templates.%s.fields.%s: not a field of type %s", t, f, t)
			}
			// A keyword of no documented kind would be held to no rule here and
			// refused by the platform for values the front end accepted.
			if keyword.Of(kw) == nil {
				p.add("platform.templates.%s.fields.%s: %s", t, f, push.UnknownKeyword(kw))
			} else if known && push.NotShown(kw) && slices.ContainsFunc(spec.Fields, func(x push.Field) bool { return x.Name == f && x.Main }) {
				p.add("platform.templates.%s.fields.%s: %s", t, f, push.NotShownRule(kw))
			}
		}
	}
}

// ReachableHost reports whether host names a host a client can reach: not empty, and not the
// unspecified address a server listens on for every interface (0.0.0.0, ::).
func ReachableHost(host string) bool {
	ip := net.ParseIP(host)
	return host != "" && (ip == nil || !ip.IsUnspecified())
}

// MaxBackoff is the largest worker.backoff_max and worker.ack_wait: the platform sends one
// message per openid and client_msg_id within ten minutes, and a retry after a lost answer, or
// the copy of a message whose worker stopped during its call (its send timeout and clock
// differences added), must come within them.
const MaxBackoff = 9 * time.Minute

// MaxRetention is the longest mongodb.retention, ten years: MongoDB's TTL index takes at most
// 2^31-1 seconds (some 68 years), and a longer value would wrap around to a short one.
const MaxRetention = 10 * 365 * 24 * time.Hour

// callbackToken is the form of the Token the platform's console accepts.
var callbackToken = regexp.MustCompile(`^[A-Za-z0-9]{3,32}$`)

// ValidCallbackToken reports whether token is one the platform's console takes: 3 to 32
// letters and digits.
func ValidCallbackToken(token string) bool { return callbackToken.MatchString(token) }

// validHostPort reports whether hp is host:port with a port number a listener takes.
func validHostPort(hp string) bool {
	_, port, err := net.SplitHostPort(hp)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}

// PushTypes are the push type codes a template can be configured for.
var PushTypes = []string{"TDL", "EN", "JML", "WR", "JDS", "FWR", "MDAN", "AR", "OPPAN"}

func (c *Config) validateOps(p *problems) {
	users := c.Ops.Users
	if len(users) > MaxOpsUsers {
		p.add("ops.users: %d users, at most %d", len(users), MaxOpsUsers)
	}
	seen := map[string]bool{}
	for i, u := range users {
		switch {
		case !validClientID(u): // a user number has the alphabet and length of a client id
			p.add("ops.users[%d]: %q must be 1 to 64 of A-Z a-z 0-9 . _ -", i, u)
		case seen[u]:
			p.add("ops.users[%d]: %q appears twice", i, u)
		}
		seen[u] = true
	}
	idp := c.OAuth.IdentityProviders
	if len(users) > 0 && idp.CAS.URL == "" && !idp.Local.Enabled {
		p.add("ops.users: the operations page needs a sign-in: set oauth.identity_providers.cas.url or enable local")
	}
}

// Client returns the registered client with the given id.
func (c *Config) Client(id string) (Client, bool) {
	for _, cl := range c.OAuth.Clients {
		if cl.ClientID == id {
			return cl, true
		}
	}
	return Client{}, false
}

type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return &Error{Problems: p}
}

// Error lists every problem of a configuration.
type Error struct{ Problems []string }

// Error reports the problems one per line.
func (e *Error) Error() string {
	return "invalid configuration:\n  " + strings.Join(e.Problems, "\n  ")
}

// MaxAccessTokenTTL is the longest lifetime an access token may be given.
const MaxAccessTokenTTL = 24 * time.Hour

// validTTL reports whether d is an access token lifetime: whole seconds (a token's exp and
// expires_in are), from a minute to MaxAccessTokenTTL.
// lowerHTTP reports whether raw begins http:// or https://, as written in the schema (the
// parser would also take HTTPS://).
func lowerHTTP(raw string) bool {
	return strings.HasPrefix(raw, "http://") || strings.HasPrefix(raw, "https://")
}

func validTTL(d Duration) bool {
	return d.D() >= time.Minute && d.D() <= MaxAccessTokenTTL && d.D()%time.Second == 0
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func validClientID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}
