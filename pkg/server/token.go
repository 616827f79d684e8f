package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/keys"
	"github.com/campus-it/ucs/pkg/oauth"
)

// maxFormBytes bounds the token endpoint's form.
const maxFormBytes = 16 << 10

// formProblem reads the form of an OAuth endpoint's request (at most maxFormBytes), and says
// what is wrong with it, or "". A form declared larger is refused before a byte of it is read,
// so that a client asking "Expect: 100-continue" is not invited to send it.
func formProblem(c echo.Context) string {
	r := c.Request()
	tooLarge := fmt.Sprintf("the form is larger than %d bytes", maxFormBytes)
	if r.ContentLength > maxFormBytes {
		return tooLarge
	}
	r.Body = http.MaxBytesReader(c.Response(), r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			return tooLarge
		}
		return "the form could not be read"
	}
	return ""
}

// token is POST /v1/token. Its errors are OAuth 2.0's (RFC 6749 §5.2), not the envelope.
func (s *Server) token(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	c.Response().Header().Set("Pragma", "no-cache")
	req, ok, err := s.clientRequest(c)
	if !ok {
		return err
	}
	resp, oerr := s.cfg.OAuth.Token(c.Request().Context(), req)
	if oerr != nil {
		return s.oauthError(c, oerr)
	}
	s.cfg.Metrics.Grant(req.Form.Get("grant_type"))
	return c.JSON(http.StatusOK, resp)
}

func (s *Server) oauthError(c echo.Context, e *oauth.Error) error {
	status := e.Status
	if status == 0 {
		status = http.StatusBadRequest
	}
	if e.Cause != nil {
		s.log.Error("token service failed", "code", e.Code, "err", e.Cause)
	}
	if e.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(e.RetryAfter/time.Second)))
	}
	if status == http.StatusUnauthorized {
		// A client refused its authentication, however it sent its credentials (HTTP Basic
		// or the form): a 401 names the scheme to use (RFC 6749 §5.2, RFC 9110 §15.5.2).
		c.Response().Header().Set("WWW-Authenticate", `Basic realm="`+s.cfg.Realm+`"`)
	}
	return c.JSON(status, e)
}

// jwks serves the public keys of the token signatures.
func (s *Server) jwks(c echo.Context) error {
	// Revalidated at each use, as Keycloak's certs endpoint is: a key that begins to sign
	// after a rotation must not be missing from a copy a cache still takes for fresh.
	c.Response().Header().Set("Cache-Control", "no-cache")
	jwks, err := keys.JWKSOf(s.cfg.OAuth.KeySets()...)
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, "application/json", jwks)
}

// discovery is the OpenID Provider configuration document.
func (s *Server) discovery(c echo.Context) error {
	iss := s.cfg.OAuth.Issuer
	oidc := iss + "/protocol/openid-connect"
	return c.JSON(http.StatusOK, map[string]any{
		"issuer":                                         iss,
		"authorization_endpoint":                         oidc + "/auth",
		"token_endpoint":                                 oidc + "/token",
		"jwks_uri":                                       oidc + "/certs",
		"userinfo_endpoint":                              oidc + "/userinfo",
		"end_session_endpoint":                           oidc + "/logout",
		"revocation_endpoint":                            oidc + "/revoke",
		"introspection_endpoint":                         oidc + "/token/introspect",
		"response_types_supported":                       []string{"code"},
		"response_modes_supported":                       []string{"query", "fragment", "form_post"},
		"grant_types_supported":                          []string{"authorization_code", "client_credentials", "refresh_token"},
		"subject_types_supported":                        []string{"public"},
		"code_challenge_methods_supported":               []string{"S256"},
		"token_endpoint_auth_methods_supported":          []string{"client_secret_post", "client_secret_basic"},
		"id_token_signing_alg_values_supported":          s.cfg.OAuth.IDTokenAlgs(),
		"scopes_supported":                               append([]string{"openid", "notification.mp", "fake_api"}, oauth.StandardScopes...),
		"request_parameter_supported":                    false,
		"request_uri_parameter_supported":                false,
		"claims_parameter_supported":                     false,
		"prompt_values_supported":                        []string{"none", "login", "consent", "select_account"},
		"claims_supported":                               []string{"iss", "sub", "aud", "exp", "iat", "auth_time", "nonce", "sid", "at_hash", "azp", "typ", "scope", "userid", "preferred_username"},
		"authorization_response_iss_parameter_supported": true,
		"backchannel_logout_supported":                   s.cfg.OAuth.Backchannel != nil,
		"backchannel_logout_session_supported":           s.cfg.OAuth.Backchannel != nil,
	})
}
