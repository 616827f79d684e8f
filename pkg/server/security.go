package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/oauth"
)

// securityEvent logs a refused authentication or a forged request at warn, with the source
// address and attrs, and counts it. attrs name the client or user where known; never a secret,
// a password or a token.
func (s *Server) securityEvent(c echo.Context, event, msg string, attrs ...any) {
	s.cfg.Metrics.SecurityEvent(event)
	s.log.Warn(msg, append([]any{"event", event, "addr", c.RealIP()}, attrs...)...)
}

// maxLoggedName bounds a user name or client id as logged: they come from a form, and a log
// line must not grow with what an attacker posts.
const maxLoggedName = 64

// notAUser stands in the log for a name typed at the login form that is no user's: it may be a
// password typed in the wrong field.
const notAUser = "(not a user; not logged)"

// loggedName is name cut to maxLoggedName characters.
func loggedName(name string) string {
	n := 0
	for i := range name {
		if n == maxLoggedName {
			return name[:i] + "…"
		}
		n++
	}
	return name
}

// tooManyPage answers a sign-in step from an address that fails too often: 429 with
// Retry-After, never a lock.
func (s *Server) tooManyPage(c echo.Context, e *oauth.Error) error {
	c.Response().Header().Set("Retry-After", strconv.Itoa(int(e.RetryAfter/time.Second)))
	return s.errorPage(c, http.StatusTooManyRequests, "请稍后再试 Try again later",
		"您所在网络的登录失败次数过多，请稍候再试。 Too many failed sign-ins came from your network. Wait a moment and try again.", e.Code)
}
