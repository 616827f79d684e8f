package oauth

import (
	"math"
	"net/url"
	"slices"
	"strings"
	"time"
)

// AuthRequest is an authorization request (RFC 6749 §4.1.1, OpenID Connect Core §3.1.2.1) as
// ParseAuthRequest read it and ValidateAuthRequest settled it.
type AuthRequest struct {
	ClientID, RedirectURI, ResponseType, ResponseMode, State, Scope, Nonce string
	// CodeChallenge and CodeChallengeMethod are PKCE's (RFC 7636); the method is S256.
	CodeChallenge, CodeChallengeMethod string
	// IDP is the identity provider the user signs in with: kc_idp_hint, or the default.
	IDP string
	// Prompt is none, login (select_account too), consent, "login consent", or empty
	// (PromptHas reads it); MaxAge is -1 when absent.
	Prompt string
	MaxAge int64
	// IDTokenHint is the ID token the client holds of the user it expects.
	IDTokenHint string

	params url.Values
}

// ParseAuthRequest reads an authorization request's parameters (the query of a GET, the form
// of a POST). It judges nothing: ValidateAuthRequest does.
func ParseAuthRequest(q url.Values) AuthRequest {
	return AuthRequest{
		ClientID: q.Get("client_id"), RedirectURI: q.Get("redirect_uri"), ResponseType: q.Get("response_type"),
		ResponseMode: q.Get("response_mode"), State: q.Get("state"), Scope: q.Get("scope"), Nonce: q.Get("nonce"),
		CodeChallenge: q.Get("code_challenge"), CodeChallengeMethod: q.Get("code_challenge_method"),
		IDP: q.Get("kc_idp_hint"), IDTokenHint: q.Get("id_token_hint"), MaxAge: -1, params: q,
	}
}

// Error codes of the authorization endpoint beyond RFC 6749 §5.2's.
const (
	ErrInvalidRedirectURI      = "invalid_redirect_uri" // shown to the user, never redirected
	ErrUnsupportedResponseType = "unsupported_response_type"
	ErrTemporarilyUnavailable  = "temporarily_unavailable"
	ErrRequestNotSupported     = "request_not_supported"
	ErrRequestURINotSupported  = "request_uri_not_supported"
	ErrLoginRequired           = "login_required"
	ErrConsentRequired         = "consent_required"
	maxState, maxNonce         = 2048, 512
	minChallenge, maxChallenge = 43, 128
	challengeAlphabet          = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)

// ValidateAuthRequest checks an authorization request against the registered clients and the
// identity providers on offer (idps; defaultIDP when the request names none or one not on
// offer), and settles its
// fields: the scope sorted and without repeats, the provider, the prompt.
//
// Until the client and its redirect_uri are known good, an error must be shown to the user:
// its Redirect is false. After that it goes back to the client (Redirect true), with the state
// and in the response mode of ar, which a bad value of either has reset.
func ValidateAuthRequest(ar *AuthRequest, clients *Clients, idps []string, defaultIDP string) (*Client, *Error) {
	q := ar.params
	page := func(code, desc string) (*Client, *Error) { return nil, errorf(code, "%s", desc) }
	if len(q["client_id"]) > 1 || len(q["redirect_uri"]) > 1 {
		return page(ErrInvalidRequest, "client_id and redirect_uri must each be given once")
	}
	client, ok := clients.Lookup(ar.ClientID)
	if !ok {
		return page(ErrInvalidClient, "the application is not registered: check client_id")
	}
	if ar.RedirectURI == "" || !Registered(client.RedirectURIs, ar.RedirectURI) {
		return page(ErrInvalidRedirectURI, "redirect_uri is missing or not registered for this application (exact match; on the loopback interface, any port)")
	}
	back := func(code, desc string) (*Client, *Error) {
		e := errorf(code, "%s", desc)
		e.Redirect = true
		return client, e
	}
	switch ar.ResponseMode {
	case "", "query", "fragment", "form_post":
	default:
		ar.ResponseMode = "query"
		return back(ErrInvalidRequest, "response_mode must be query, fragment or form_post")
	}
	if len(ar.State) > maxState || len(q["state"]) > 1 {
		ar.State = ""
		return back(ErrInvalidRequest, "state must be given once, at most 2048 characters")
	}
	if Repeated(q) {
		return back(ErrInvalidRequest, "a parameter is given more than once")
	}
	// Request objects (OpenID Connect Core §6) are not supported: refused, never ignored.
	if q.Has("request") {
		return back(ErrRequestNotSupported, "request objects are not supported; send the parameters themselves")
	}
	if q.Has("request_uri") {
		return back(ErrRequestURINotSupported, "request_uri is not supported; send the parameters themselves")
	}
	if len(idps) == 0 {
		return back(ErrTemporarilyUnavailable, "sign-in is not configured on this server")
	}
	if ar.ResponseType == "" {
		return back(ErrInvalidRequest, "response_type is required")
	}
	if ar.ResponseType != "code" {
		return back(ErrUnsupportedResponseType, "response_type must be code")
	}
	if !client.Allows(GrantAuthorizationCode) {
		return back(ErrUnauthorizedClient, "this client may not use the authorization code grant")
	}
	scopes := strings.Fields(ar.Scope)
	if len(scopes) == 0 {
		// No scope asked for: every scope the client is registered for, as Keycloak applies a
		// client's default scopes (RFC 6749 §3.3's pre-defined default), openid among them.
		scopes = slices.Clone(client.Scopes)
	}
	for _, sc := range scopes {
		if !client.MayAsk(sc) {
			return back(ErrInvalidScope, "a requested scope is not allowed for this client")
		}
	}
	slices.Sort(scopes)
	ar.Scope = strings.Join(slices.Compact(scopes), " ")
	if len(ar.Nonce) > maxNonce {
		return back(ErrInvalidRequest, "nonce is longer than 512 characters")
	}
	if ar.CodeChallenge != "" || ar.CodeChallengeMethod != "" {
		if ar.CodeChallengeMethod != "S256" {
			return back(ErrInvalidRequest, "code_challenge_method must be S256")
		}
		if !validChallenge(ar.CodeChallenge) {
			return back(ErrInvalidRequest, "code_challenge must be 43 to 128 characters of [A-Za-z0-9-._~]")
		}
	}
	// kc_idp_hint is only a hint, as in Keycloak: one that names no provider on offer (a
	// campus's own value, another spelling) signs in with the default provider, as Keycloak
	// goes on to its login form.
	if ar.IDP == "" || !slices.Contains(idps, ar.IDP) {
		ar.IDP = defaultIDP
	}
	if !slices.Contains(idps, ar.IDP) {
		return back(ErrTemporarilyUnavailable, "sign-in is not configured on this server")
	}
	prompt, maxAge, e := ParsePrompt(q)
	if e != nil {
		return back(e.Code, e.Description)
	}
	ar.Prompt, ar.MaxAge = prompt, maxAge
	return client, nil
}

func validChallenge(s string) bool {
	return len(s) >= minChallenge && len(s) <= maxChallenge &&
		strings.Trim(s, challengeAlphabet) == ""
}

// SignInFresh reports whether a sign-in made at authTime may answer ar at now: always,
// unless ar's max_age has passed since (auth_time changes only on a real sign-in).
func (ar *AuthRequest) SignInFresh(authTime, now time.Time) bool {
	return FreshFor(ar.MaxAge, authTime, now)
}

// FreshFor reports whether a sign-in made at authTime is within maxAge seconds of now; a
// negative maxAge (none asked) is met by any sign-in.
func FreshFor(maxAge int64, authTime, now time.Time) bool {
	// A max_age past what a Duration holds (some 292 years) is met by any sign-in.
	return maxAge < 0 || maxAge > int64(math.MaxInt64/time.Second) ||
		!now.After(authTime.Add(time.Duration(maxAge)*time.Second))
}
