// Package oauth is the token service: client authentication, the token endpoint's grants,
// access token claims, and the verification of bearer tokens on every data interface.
package oauth

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Error codes of RFC 6749 §5.2 and RFC 6750 §3.1.
const (
	ErrInvalidRequest       = "invalid_request"
	ErrInvalidClient        = "invalid_client"
	ErrInvalidGrant         = "invalid_grant"
	ErrUnauthorizedClient   = "unauthorized_client"
	ErrUnsupportedGrantType = "unsupported_grant_type"
	ErrInvalidScope         = "invalid_scope"
	ErrInvalidToken         = "invalid_token"
	ErrInsufficientScope    = "insufficient_scope"
	ErrServerError          = "server_error"
	ErrAccessDenied         = "access_denied"
	// ErrTooManyRequests answers a request over a rate limit (HTTP 429 with Retry-After).
	ErrTooManyRequests = "too_many_requests"
)

// Error is an OAuth 2.0 error answer: a standard code, a description a developer can act on,
// and the HTTP status it is sent with.
type Error struct {
	Code        string `json:"error"`
	Description string `json:"error_description,omitempty"`
	Status      int    `json:"-"`
	// RetryAfter, when set, is sent as Retry-After.
	RetryAfter time.Duration `json:"-"`
}

// Error returns "code: description".
func (e *Error) Error() string { return e.Code + ": " + e.Description }

// errorf builds an Error with the status RFC 6749 gives its code.
func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Description: Description(fmt.Sprintf(format, args...)), Status: statusOf(code)}
}

// Description keeps an error_description within RFC 6749's characters (%x20-21 / %x23-5B /
// %x5D-7E): others become a space. Descriptions never quote what the request sent.
func Description(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return ' '
		}
		return r
	}, s)
}

func statusOf(code string) int {
	switch code {
	case ErrInvalidClient, ErrInvalidToken:
		return http.StatusUnauthorized
	case ErrInsufficientScope:
		// The interface answers every refused token with 401; WWW-Authenticate tells why.
		return http.StatusUnauthorized
	case ErrServerError:
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}
