package server

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/oauth"
)

const claimsKey = "ucs.claims"

// bearer checks the access token of a data interface against req. Every refusal is a 401, as
// the interface says, with WWW-Authenticate telling the client which refusal it is (RFC 6750).
func (s *Server) bearer(req oauth.Requirement) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			claims, oerr := s.verify(c.Request(), req)
			if oerr != nil {
				return &Error{Code: CodeUnauthorized, Message: oerr.Description, Header: http.Header{"Www-Authenticate": {s.challenge(oerr, req)}}}
			}
			c.Set(claimsKey, claims)
			return next(c)
		}
	}
}

// userinfoBearer is bearer for userinfo, an OpenID Connect interface (Core §5.3.3), but for
// a token without the openid scope: that is 403 insufficient_scope, in OAuth's shape (RFC 6750
// §3.1), as Keycloak answers it, so that a relying party tells a token to ask for anew (401)
// from one to ask for with scope openid.
func (s *Server) userinfoBearer(next echo.HandlerFunc) echo.HandlerFunc {
	req := oauth.Requirement{Scope: oauth.ScopeOpenID}
	return func(c echo.Context) error {
		claims, oerr := s.verify(c.Request(), req)
		switch {
		case oerr == nil:
			c.Set(claimsKey, claims)
			return next(c)
		case oerr.Code == oauth.ErrInsufficientScope:
			c.Response().Header().Set("WWW-Authenticate", s.challenge(oerr, req))
			c.Response().Header().Set("Cache-Control", "no-store")
			return c.JSON(http.StatusForbidden, &oauth.Error{Code: oerr.Code, Description: oerr.Description})
		}
		return &Error{Code: CodeUnauthorized, Message: oerr.Description, Header: http.Header{"Www-Authenticate": {s.challenge(oerr, req)}}}
	}
}

// verify checks r's access token against req. An Authorization header given more than once
// (RFC 9110 §5.3 allows one) is refused as malformed, whichever line comes first: a proxy that
// looked at one line and this server at the other would disagree on who is asking.
func (s *Server) verify(r *http.Request, req oauth.Requirement) (*oauth.Claims, *oauth.Error) {
	if v := r.Header.Values("Authorization"); len(v) > 1 {
		return nil, &oauth.Error{Code: oauth.ErrInvalidRequest, Description: "the Authorization header is given more than once", Status: http.StatusUnauthorized}
	}
	return s.cfg.Verifier.Verify(r.Header.Get("Authorization"), req)
}

// challenge is the WWW-Authenticate value of a bearer token refused with oerr (RFC 6750 §3).
func (s *Server) challenge(oerr *oauth.Error, req oauth.Requirement) string {
	h := `Bearer realm="` + s.cfg.Realm + `"`
	if oerr.Code != "" {
		h += `, error="` + oerr.Code + `", error_description=` + strconv.Quote(oerr.Description)
	}
	if oerr.Code == oauth.ErrInsufficientScope && req.Scope != "" {
		h += `, scope="` + req.Scope + `"`
	}
	return h
}

func claimsOf(c echo.Context) *oauth.Claims {
	cl, _ := c.Get(claimsKey).(*oauth.Claims)
	return cl
}

// fakeUser is GET /v1/fake_api/user: who the caller is, for the test account.
func (s *Server) fakeUser(c echo.Context) error {
	cl := claimsOf(c)
	return s.ok(c, map[string]any{
		"clientId":  cl.Azp,
		"sub":       cl.Subject,
		"scope":     cl.Scope,
		"grantType": cl.Grant,
		"userid":    cl.UserID,
		"expiresAt": cl.ExpiresAt.Unix(),
	})
}
