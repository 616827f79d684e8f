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
			claims, oerr := s.cfg.Verifier.Verify(c.Request().Header.Get("Authorization"), req)
			if oerr != nil {
				h := `Bearer realm="` + s.cfg.Realm + `"`
				if oerr.Code != "" {
					h += `, error="` + oerr.Code + `", error_description=` + strconv.Quote(oerr.Description)
				}
				if oerr.Code == oauth.ErrInsufficientScope && req.Scope != "" {
					h += `, scope="` + req.Scope + `"`
				}
				return &Error{Code: CodeUnauthorized, Message: oerr.Description, Header: http.Header{"Www-Authenticate": {h}}}
			}
			c.Set(claimsKey, claims)
			return next(c)
		}
	}
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
