package admin

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/secretfile"
	"github.com/campus-it/ucs/pkg/store"
)

func clientsCommand() *command {
	return &command{
		name:    "clients",
		summary: "Create, list, show, disable, enable and delete client applications; rotate a secret; set a token lifetime.",
		help: fmt.Sprintf(`
Clients live in MongoDB. Those of the configuration file are loaded into it at every start; what
these commands change in one of them stays until its entry in the file changes. Every front end
reads the clients again every %s: a change takes effect everywhere within that, and the tokens of a
disabled or deleted client are refused from then on.`, oauth.ClientsReload),
		sub: []*command{clientsCreate(), clientsList(), clientsShow(), clientsDisable(), clientsEnable(),
			clientsRotate(), clientsSetTTL(), clientsDelete()},
	}
}

// listFlag is a flag given as a comma-separated list, or repeated. Given values replace the
// default.
type listFlag struct {
	vals  []string
	given bool
}

func (l *listFlag) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.vals, ",")
}

// Set adds the values of one occurrence of the flag.
func (l *listFlag) Set(v string) error {
	if !l.given {
		l.vals, l.given = nil, true
	}
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(l.vals, s) {
			l.vals = append(l.vals, s)
		}
	}
	return nil
}

// newSecret makes a client secret: 256 random bits, URL-safe.
func newSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func secretHash(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// clientView is a client as the commands show it; never its secret or the secret's hash.
type clientView struct {
	store.Client
	// Status is enabled or disabled.
	Status string `json:"status"`
	// TokenTTL is the token lifetime as a duration ("2h0m0s"), or "default".
	TokenTTL string `json:"token_ttl"`
	// RefreshTokens says whether the client gets refresh tokens: it lists the refresh_token
	// grant, or it has the authorization code grant and refresh tokens were not turned off
	// (Keycloak's "Use refresh tokens", on by default).
	RefreshTokens bool `json:"refresh_tokens"`
}

func view(c store.Client) clientView {
	v := clientView{Client: c, Status: "enabled", TokenTTL: "default",
		RefreshTokens: slices.Contains(c.Grants, oauth.GrantRefreshToken) ||
			slices.Contains(c.Grants, oauth.GrantAuthorizationCode) && (c.RefreshTokens == nil || *c.RefreshTokens)}
	if c.Disabled {
		v.Status = "disabled"
	}
	if c.AccessTokenTTL > 0 {
		v.TokenTTL = (time.Duration(c.AccessTokenTTL) * time.Second).String()
	}
	return v
}

func notFound(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no client %q", id)
	}
	return err
}

func clientsCreate() *command {
	var (
		grants, scopes, redirects, logouts listFlag
		ttl                                time.Duration
		skipConsent, introspect, bcSession bool
		refresh                            bool
		rate                               float64
		alg, backchannel                   string
	)
	return &command{
		name: "create", args: "CLIENT_ID", nargs: 1,
		summary: "Register a client application and show its secret, once.",
		help: `
The secret is generated here, shown once and stored only as its SHA-256: note it now. A lost
secret is replaced with rotate-secret. CLIENT_ID is 1 to 64 letters, digits, '.', '_' or '-'.`,
		flags: func(fs *flag.FlagSet) {
			grants = listFlag{vals: []string{oauth.GrantClientCredentials}}
			scopes = listFlag{vals: []string{oauth.ScopeNotificationMP}}
			fs.Var(&grants, "grants", "grants the client may use: client_credentials, authorization_code, refresh_token (comma separated)")
			fs.Var(&scopes, "scopes", "scopes the client may be granted: openid, notification.mp, fake_api (comma separated)")
			fs.Var(&redirects, "redirect-uri", "callback address of the authorization code grant (repeat, or comma separated)")
			fs.Var(&logouts, "post-logout-redirect-uri", "address logout may return to (default: the redirect URIs)")
			fs.DurationVar(&ttl, "token-ttl", 0, "lifetime of the client's access tokens, 60s to 24h (default: the service's)")
			fs.BoolVar(&skipConsent, "skip-consent", false, "let the client's users skip the consent page")
			fs.BoolVar(&introspect, "introspect", false, "let the client introspect other clients' tokens (a resource server)")
			fs.BoolVar(&refresh, "refresh-tokens", true, "give refresh tokens with the authorization code grant, as Keycloak does; -refresh-tokens=false: none")
			fs.Float64Var(&rate, "rate-limit", 0, "grants per second for this client (default: the service's per-client limit)")
			fs.StringVar(&alg, "id-token-alg", "", "algorithm of the client's ID tokens: RS256 (default) or ES256")
			fs.StringVar(&backchannel, "backchannel-logout-uri", "", "where the client is told that a session it received tokens in ended (OpenID Connect Back-Channel Logout)")
			fs.BoolVar(&bcSession, "backchannel-logout-session-required", false, "the client needs sid in logout tokens (always sent)")
		},
		run: func(ctx context.Context, a *app, args []string) error {
			secret := newSecret()
			c := config.Client{
				ClientID: args[0], ClientSecret: secret, Grants: grants.vals,
				Scopes: scopes.vals, RedirectURIs: redirects.vals, PostLogoutRedirectURIs: logouts.vals,
				SkipConsent: skipConsent, AccessTokenTTL: config.Duration(ttl), Introspect: introspect, RateLimit: rate,
				IDTokenAlg: alg, BackchannelLogoutURI: backchannel, BackchannelLogoutSessionRequired: bcSession,
			}
			if !refresh {
				c.RefreshTokens = &refresh
			}
			if c.PostLogoutRedirectURIs == nil {
				c.PostLogoutRedirectURIs = c.RedirectURIs
			}
			if err := c.Validate(); err != nil {
				var ce *config.Error
				if errors.As(err, &ce) {
					return usagef("the client is not valid:\n  %s", strings.Join(ce.Problems, "\n  "))
				}
				return usagef("%v", err)
			}
			st, err := a.open(ctx)
			if err != nil {
				return err
			}
			rec := store.Client{
				ID: c.ClientID, SecretSHA256: secretHash(secret), Grants: c.Grants, Scopes: c.Scopes,
				RedirectURIs: c.RedirectURIs, PostLogoutRedirectURIs: c.PostLogoutRedirectURIs, SkipConsent: c.SkipConsent,
				AccessTokenTTL: int64(ttl / time.Second), Introspect: introspect, RateLimit: rate, IDTokenAlg: alg,
				BackchannelLogoutURI: backchannel, BackchannelLogoutSessionRequired: bcSession, Source: store.SourceAdmin,
				RefreshTokens: c.RefreshTokens,
			}
			if err := st.CreateClient(ctx, rec); errors.Is(err, store.ErrExists) {
				return fmt.Errorf("client %q exists already", c.ClientID)
			} else if err != nil {
				return err
			}
			rec, err = st.Client(ctx, c.ClientID)
			if err != nil {
				return err
			}
			a.out(struct {
				Client clientView `json:"client"`
				Secret string     `json:"client_secret"`
			}{view(rec), secret}, func(w io.Writer) {
				fmt.Fprintf(w, "Created client %s (grants %s; scopes %s).\n\n", rec.ID, strings.Join(rec.Grants, " "), strings.Join(rec.Scopes, " "))
				fmt.Fprintf(w, "  client_secret: %s\n\n", secret)
				fmt.Fprintf(w, "This is the only time the secret is shown: the service keeps only its hash.\n")
				fmt.Fprintf(w, "Every front end accepts the client within %s.\n", oauth.ClientsReload)
			})
			return nil
		},
	}
}

func clientsList() *command {
	return &command{
		name: "list", nargs: 0,
		summary: "List the registered clients.",
		run: func(ctx context.Context, a *app, _ []string) error {
			st, err := a.open(ctx)
			if err != nil {
				return err
			}
			cs, err := st.Clients(ctx)
			if err != nil {
				return err
			}
			views := make([]clientView, 0, len(cs))
			for _, c := range cs {
				views = append(views, view(c))
			}
			a.out(views, func(w io.Writer) {
				if len(views) == 0 {
					fmt.Fprintln(w, "No clients are registered.")
					return
				}
				tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "CLIENT_ID\tSTATUS\tSOURCE\tGRANTS\tSCOPES\tTOKEN_TTL\tUPDATED")
				for _, v := range views {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.ID, v.Status, v.Source, strings.Join(v.Grants, ","),
						strings.Join(v.Scopes, ","), v.TokenTTL, a.shown(v.Updated))
				}
				_ = tw.Flush()
			})
			return nil
		},
	}
}

func clientsShow() *command {
	return &command{
		name: "show", args: "CLIENT_ID", nargs: 1,
		summary: "Show one client (never its secret).",
		run: func(ctx context.Context, a *app, args []string) error {
			st, err := a.open(ctx)
			if err != nil {
				return err
			}
			c, err := st.Client(ctx, args[0])
			if err != nil {
				return notFound(args[0], err)
			}
			a.out(view(c), func(w io.Writer) { a.showClient(w, c) })
			return nil
		},
	}
}

func (a *app) showClient(w io.Writer, c store.Client) {
	v := view(c)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("client_id", c.ID)
	row("status", v.Status)
	row("source", c.Source)
	row("grants", strings.Join(c.Grants, " "))
	row("scopes", strings.Join(c.Scopes, " "))
	row("refresh_tokens", strconv.FormatBool(v.RefreshTokens))
	row("redirect_uris", strings.Join(c.RedirectURIs, " "))
	row("post_logout_redirect_uris", strings.Join(c.PostLogoutRedirectURIs, " "))
	row("backchannel_logout_uri", c.BackchannelLogoutURI)
	if c.BackchannelLogoutSessionRequired {
		row("backchannel_logout_session_required", "true")
	}
	row("token_ttl", v.TokenTTL)
	if c.SkipConsent {
		row("skip_consent", "true")
	}
	if c.Introspect {
		row("introspect", "true")
	}
	if c.RateLimit > 0 {
		row("rate_limit", fmt.Sprintf("%g/s", c.RateLimit))
	}
	row("id_token_alg", c.IDTokenAlg)
	row("created", a.shown(c.Created))
	row("updated", a.shown(c.Updated))
	if !c.SecretRotated.IsZero() {
		row("secret_rotated", a.shown(c.SecretRotated))
	}
	_ = tw.Flush()
}

// fromFile reminds that a change to a client of the configuration file lasts until its entry
// in the file changes.
func fromFile(w io.Writer, c store.Client) {
	if c.Source == store.SourceConfig {
		fmt.Fprintln(w, "This client comes from the configuration file: the change lasts until its entry there changes.")
	}
}

func clientsDisable() *command {
	return setDisabled("disable", true, "Disable a client: it gets no more tokens, and the tokens it has are refused.")
}

func clientsEnable() *command {
	return setDisabled("enable", false, "Enable a disabled client again; the tokens it had before it was disabled stay refused.")
}

func setDisabled(name string, disabled bool, summary string) *command {
	return &command{
		name: name, args: "CLIENT_ID", nargs: 1, summary: summary,
		run: func(ctx context.Context, a *app, args []string) error {
			st, err := a.open(ctx)
			if err != nil {
				return err
			}
			c, err := st.UpdateClient(ctx, args[0], store.ClientChange{Disabled: &disabled})
			if err != nil {
				return notFound(args[0], err)
			}
			a.out(view(c), func(w io.Writer) {
				if disabled {
					fmt.Fprintf(w, "Disabled client %s: every front end refuses it new tokens, and the tokens it has, within %s.\n", c.ID, oauth.ClientsReload)
				} else {
					fmt.Fprintf(w, "Enabled client %s: every front end accepts it again within %s.\n", c.ID, oauth.ClientsReload)
				}
				if c.Source == store.SourceConfig && disabled {
					// The store keeps a disabled client so when its entry changes: an edit of
					// the file ends no incident's lock-out by the way.
					fmt.Fprintln(w, "This client comes from the configuration file: it stays disabled, even when its entry there changes, until `clients enable`.")
				} else {
					fromFile(w, c)
				}
			})
			return nil
		},
	}
}

func clientsRotate() *command {
	return &command{
		name: "rotate-secret", args: "CLIENT_ID", nargs: 1,
		summary: "Give a client a new secret, shown once; the old one stops working.",
		help: fmt.Sprintf(`
Every front end refuses the old secret and accepts the new one within %s. Tokens issued with the
old secret stay valid until they expire; disable the client to end them at once (they stay refused
when it is enabled again).`, oauth.ClientsReload),
		run: func(ctx context.Context, a *app, args []string) error {
			st, err := a.open(ctx)
			if err != nil {
				return err
			}
			secret := newSecret()
			h := secretHash(secret)
			c, err := st.UpdateClient(ctx, args[0], store.ClientChange{SecretSHA256: &h})
			if err != nil {
				return notFound(args[0], err)
			}
			seeded := false
			if a.data != "" {
				if seeded, err = updateSeededSecret(a.data, c.ID, secret); err != nil {
					fmt.Fprintf(a.env.Stderr, "warning: %v\n", err)
				}
			}
			a.out(struct {
				Client clientView `json:"client"`
				Secret string     `json:"client_secret"`
			}{view(c), secret}, func(w io.Writer) {
				fmt.Fprintf(w, "New secret of client %s:\n\n  client_secret: %s\n\n", c.ID, secret)
				fmt.Fprintf(w, "This is the only time it is shown. Every front end takes it, and refuses the old one, within %s.\n", oauth.ClientsReload)
				if seeded {
					fmt.Fprintf(w, "It is also written to %s, where the stack keeps its seeded clients.\n", filepath.Join(a.data, "standalone.json"))
				} else {
					fromFile(w, c)
				}
			})
			return nil
		},
	}
}

// updateSeededSecret writes a rotated secret of a client the standalone stack seeded into its
// standalone.json (mode 0600), where the walk-through reads it and the next start loads it; it
// reports whether the client is one of those. The other contents of the file are kept as they
// are.
func updateSeededSecret(dir, id, secret string) (bool, error) {
	path := filepath.Join(dir, "standalone.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	var info map[string]json.RawMessage
	if err := json.Unmarshal(b, &info); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	var clients []map[string]any
	if err := json.Unmarshal(info["clients"], &clients); err != nil {
		return false, fmt.Errorf("%s: clients: %w", path, err)
	}
	found := false
	for _, c := range clients {
		if c["client_id"] == id {
			c["client_secret"], found = secret, true
		}
	}
	if !found {
		return false, nil
	}
	if info["clients"], err = json.Marshal(clients); err != nil {
		return false, err
	}
	// Not escaped for HTML, as the stack writes it: mongodb_uri keeps its '&'.
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(info); err != nil {
		return false, err
	}
	// Atomically and 0600, whatever a leftover temporary file says.
	return true, secretfile.Write(path, out.Bytes())
}

func clientsSetTTL() *command {
	return &command{
		name: "set-token-ttl", args: "CLIENT_ID DURATION", nargs: 2,
		summary: "Set the lifetime of a client's access tokens (60s to 24h, or 'default').",
		help: `
DURATION is like 2h, 90m or 7200s; 'default' gives the client the service's oauth.access_token_ttl
again. Tokens issued from then on have the new lifetime; those issued before keep theirs.`,
		run: func(ctx context.Context, a *app, args []string) error {
			var secs int64
			if args[1] != "default" {
				d, err := time.ParseDuration(args[1])
				if err != nil {
					return usagef("DURATION %q: like 2h, 90m or 7200s, or 'default'", args[1])
				}
				if d < time.Minute || d > config.MaxAccessTokenTTL || d%time.Second != 0 {
					return usagef("DURATION %s: must be whole seconds from 60s to 24h", d)
				}
				secs = int64(d / time.Second)
			}
			st, err := a.open(ctx)
			if err != nil {
				return err
			}
			c, err := st.UpdateClient(ctx, args[0], store.ClientChange{AccessTokenTTL: &secs})
			if err != nil {
				return notFound(args[0], err)
			}
			a.out(view(c), func(w io.Writer) {
				fmt.Fprintf(w, "Tokens of client %s now live %s (from every front end within %s).\n", c.ID, view(c).TokenTTL, oauth.ClientsReload)
				fromFile(w, c)
			})
			return nil
		},
	}
}

func clientsDelete() *command {
	return &command{
		name: "delete", args: "CLIENT_ID", nargs: 1,
		summary: "Remove a client: it gets no more tokens, and the tokens it has are refused.",
		help: `
A client of the configuration file comes back at the next start: remove it from the file too, or
disable it instead.`,
		run: func(ctx context.Context, a *app, args []string) error {
			st, err := a.open(ctx)
			if err != nil {
				return err
			}
			c, err := st.Client(ctx, args[0])
			if err != nil {
				return notFound(args[0], err)
			}
			if err := st.DeleteClient(ctx, args[0]); err != nil {
				return notFound(args[0], err)
			}
			a.out(map[string]any{"client_id": c.ID, "deleted": true}, func(w io.Writer) {
				fmt.Fprintf(w, "Deleted client %s: every front end refuses it, and its tokens, within %s.\n", c.ID, oauth.ClientsReload)
				if c.Source == store.SourceConfig {
					fmt.Fprintln(w, "It comes from the configuration file: remove it there too, or it comes back at the next start.")
				}
			})
			return nil
		},
	}
}
