package oauth

import (
	"slices"
	"strings"
)

// Grant types a client may be allowed to use (RFC 6749 §4, §6).
const (
	GrantClientCredentials = "client_credentials"
	GrantAuthorizationCode = "authorization_code"
	GrantRefreshToken      = "refresh_token"
)

// KnownGrants lists every grant type a client may be registered with.
var KnownGrants = []string{GrantClientCredentials, GrantAuthorizationCode, GrantRefreshToken}

// Scopes the service grants: OpenID Connect's, and one per data interface.
const (
	ScopeOpenID         = "openid"
	ScopeNotificationMP = "notification.mp"
	ScopeFakeAPI        = "fake_api"
)

// KnownScopes lists every scope a client may be registered with.
var KnownScopes = []string{ScopeOpenID, ScopeNotificationMP, ScopeFakeAPI}

// StandardScopes are OpenID Connect's scopes for standard claims (Core §5.4). They are accepted
// from any client and cost nothing: the service holds none of these claims, so they add none.
var StandardScopes = []string{"profile", "email", "address", "phone"}

// IsStandardScope reports whether sc is one of StandardScopes.
func IsStandardScope(sc string) bool { return slices.Contains(StandardScopes, sc) }

// MayAsk reports whether the client may be granted scope: one it is registered with, or a
// standard claim scope.
func (c *Client) MayAsk(scope string) bool {
	return slices.Contains(c.Scopes, scope) || IsStandardScope(scope)
}

// ConsentNeeded reports whether the user must be asked before c receives scope: some of its
// consent scopes are not among granted, or prompt is consent; never for a client registered to
// skip consent, nor for a scope with nothing to consent to.
func ConsentNeeded(c *Client, scope, prompt string, granted []string) bool {
	want := ConsentScopes(scope)
	if len(want) == 0 || c.SkipConsent {
		return false
	}
	return PromptHas(prompt, "consent") || slices.ContainsFunc(want, func(sc string) bool { return !slices.Contains(granted, sc) })
}

// ConsentScopes are the scopes of scope that need the user's consent: the interfaces' (not
// openid, nor the standard claim scopes, for which the service holds no claims).
func ConsentScopes(scope string) []string {
	var out []string
	for sc := range strings.FieldsSeq(scope) {
		if sc != ScopeOpenID && !IsStandardScope(sc) {
			out = append(out, sc)
		}
	}
	return out
}
