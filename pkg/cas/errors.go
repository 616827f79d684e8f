package cas

import "errors"

// Failure codes of a cas:authenticationFailure: the minimum set every CAS
// server implements (CAS protocol 3.0, section 2.5.3). Servers may send
// others; Error.Code carries whatever was sent.
const (
	// CodeInvalidRequest means a required parameter (service or ticket) was
	// missing.
	CodeInvalidRequest = "INVALID_REQUEST"
	// CodeInvalidTicketSpec means the request did not meet the validation
	// specification.
	CodeInvalidTicketSpec = "INVALID_TICKET_SPEC"
	// CodeUnauthorizedServiceProxy means the service may not act as a proxy.
	CodeUnauthorizedServiceProxy = "UNAUTHORIZED_SERVICE_PROXY"
	// CodeInvalidProxyCallback means the proxy callback was refused.
	CodeInvalidProxyCallback = "INVALID_PROXY_CALLBACK"
	// CodeInvalidTicket means the ticket is unknown, already used or expired, or
	// renew was asked for and the ticket came from single sign-on.
	CodeInvalidTicket = "INVALID_TICKET"
	// CodeInvalidService means the ticket was issued for another service. The
	// server has then invalidated the ticket.
	CodeInvalidService = "INVALID_SERVICE"
	// CodeInternalError means the CAS server failed while validating.
	CodeInternalError = "INTERNAL_ERROR"
)

// Error is a cas:authenticationFailure: the CAS server answered and refused
// the ticket. It is the user's sign-in that failed (the usual answer is to
// start the sign-in again), not the CAS server; compare with ErrBadAnswer.
type Error struct {
	// Code is the failure code as sent, e.g. CodeInvalidTicket.
	Code string
	// Message is the server's explanation, trimmed, with the ticket itself
	// replaced by "ST-(redacted)" so that the error can be logged.
	Message string
}

// Error formats the failure as "cas: INVALID_TICKET: <message>".
func (e *Error) Error() string {
	s := "cas: "
	if e.Code != "" {
		s += e.Code
	} else {
		s += "authentication failure without a code"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

var (
	// ErrMalformedTicket is returned, wrapped, by Validate for a ticket that
	// cannot be a service ticket (empty, not starting with "ST-", or over
	// 2048 bytes); no request is sent for it. Like an *Error it means that the browser brought
	// back something unusable, not that the CAS server is in trouble.
	ErrMalformedTicket = errors.New("cas: not a service ticket")
	// ErrBadAnswer is returned, wrapped with the details, by Validate when the
	// CAS server's answer is not a usable validation response: a status other
	// than 200, a body over 1 MiB, XML that does not parse or holds neither a
	// success nor a failure, or a success without a user. It points at the
	// CAS server or what is in between, not at the user.
	ErrBadAnswer = errors.New("cas: unusable validation answer")
)
