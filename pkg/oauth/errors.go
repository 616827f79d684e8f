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
// and the HTTP status it is sent with. It is the one error type of the protocol: every refusal
// and failure of this package is one, and the front end only writes it out.
type Error struct {
	Code        string `json:"error"`
	Description string `json:"error_description,omitempty"`
	Status      int    `json:"-"`
	// RetryAfter, when set, is sent as Retry-After.
	RetryAfter time.Duration `json:"-"`
	// Redirect is set on an authorization endpoint's error that goes back to the client's
	// (verified) redirect_uri; unset, the error is shown to the user instead.
	Redirect bool `json:"-"`
	// Cause is the internal failure behind a server_error, for the log; it never reaches the
	// client.
	Cause error `json:"-"`
}

// Error returns "code: description", and the cause when there is one.
func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Code + ": " + e.Description + ": " + e.Cause.Error()
	}
	return e.Code + ": " + e.Description
}

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Cause }

// internal is a server_error with its cause: the client reads only desc.
func internal(desc string, cause error) *Error {
	return &Error{Code: ErrServerError, Description: desc, Status: http.StatusInternalServerError, Cause: cause}
}

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
