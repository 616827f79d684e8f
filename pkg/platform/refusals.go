package platform

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"
)

// HTTPError is an answer of the platform with an HTTP status other than 2xx: the request did
// not reach the API behind it (a gateway or the platform itself failing).
type HTTPError struct {
	// Status is the status line's text, e.g. "502 Bad Gateway".
	Status string
	// Code is the status code, e.g. 502.
	Code int
	// RetryAfter is how long a 429 or 503 asked the caller to wait (its Retry-After, in
	// seconds or as a date, at most MaxRetryAfter); 0 when it said nothing.
	RetryAfter time.Duration
}

// AskedWait reports the wait the *HTTPError in err's chain asked of the caller: a 429's
// RetryAfter (a minute when it names none), or a 503's when it names one; nil for any other
// answer. The platform's own limits are errcodes: such an answer is a gateway's on the
// caller's way.
func AskedWait(err error) (*HTTPError, time.Duration) {
	var he *HTTPError
	switch {
	case !errors.As(err, &he):
		return nil, 0
	case he.Code == http.StatusTooManyRequests && he.RetryAfter == 0:
		return he, time.Minute
	case he.Code == http.StatusTooManyRequests || he.Code == http.StatusServiceUnavailable && he.RetryAfter > 0:
		return he, he.RetryAfter
	}
	return nil, 0
}

// MaxRetryAfter bounds the wait a Retry-After is taken for: a gateway's word is not taken for
// longer (a wait still asked for after it is asked again).
const MaxRetryAfter = time.Hour

// retryAfter is the wait the Retry-After value v asks for at now (RFC 9110 §10.2.3:
// delay-seconds or an HTTP date), at most MaxRetryAfter; 0 when v is absent or unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		d = time.Duration(secs) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), MaxRetryAfter)
}

// Error formats the answer as "HTTP status 502 Bad Gateway".
func (e *HTTPError) Error() string { return "HTTP status " + e.Status }

// NotSentError is a send that never went out: no access token could be had (the token
// endpoint failed, or the wait for it ended), or the platform refused the send for its token
// twice, the second time with a token just fetched. The platform sent nothing for the message.
type NotSentError struct {
	Err error
	// Rejected is the errcode with which the platform refused a send for its access token
	// (40001, 42001, 40014), after which no new token could be had or the new one was refused
	// too; 0 when no call was made.
	Rejected int
}

func (e *NotSentError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *NotSentError) Unwrap() error { return e.Err }

// Account-level error codes: the platform refuses the account itself, whatever the message.
const (
	// CodeAppSecretMissing is 41004: no appsecret was sent.
	CodeAppSecretMissing = 41004
	// CodeIPNotWhitelisted is 40164: the caller's address is not on the account's IP
	// whitelist. It refuses one worker's address, not the account (see AddressRefused).
	CodeIPNotWhitelisted = 40164
	// CodeClientIPNotRegistered is 61004: the token endpoint's answer to an address not on
	// the IP whitelist; like 40164, it refuses one worker's address.
	CodeClientIPNotRegistered = 61004
	// CodeAppSecretFrozen is 40243: the token endpoint's answer while the account's AppSecret
	// is frozen, until an operator unfreezes it.
	CodeAppSecretFrozen = 40243
	// CodeAPIUnauthorized is 48001: the account lacks the permission for the interface.
	CodeAPIUnauthorized = 48001
	// CodeAPIForbidden is 48004: the platform banned the interface for the account, for
	// irregularities.
	CodeAPIForbidden = 48004
	// CodeAccountLimited is 50002: the account is restricted, its interfaces banned after a
	// violation.
	CodeAccountLimited = 50002
)

// accountActions says, for each account-level code, what an operator must do.
var accountActions = map[int]string{
	CodeAPIUnauthorized: "the official account lacks the permission for template messages: " +
		"enable the template message feature for the account, then run `worker -resume`",
	CodeInvalidAppSecret: "platform.secret is not the account's current AppSecret: " +
		"set the right one in the configuration, restart the workers and, once all have restarted, run `worker -resume`",
	CodeInvalidAppID: "platform.appid is not a valid AppID: " +
		"set the account's AppID in the configuration, restart the workers and, once all have restarted, run `worker -resume`",
	CodeAppSecretMissing: "platform.secret is empty: " +
		"set the account's AppSecret in the configuration, restart the workers and, once all have restarted, run `worker -resume`",
	CodeAPIForbidden: "the platform banned template messages for the official account: " +
		"read the reason in the platform's console, have the ban lifted, then run `worker -resume`",
	CodeInvalidTemplateID: "a template_id of platform.templates is not one of the account's templates " +
		"(the platform deletes them all when the account changes its service category): " +
		"set the account's template ids in the configuration, restart the workers and, once all have restarted, run `worker -resume`",
	CodeAccountLimited: "the platform restricted the official account after a violation: " +
		"read the reason in the platform's console, have the restriction lifted, then run `worker -resume`",
	CodeTemplateIDSize: "a template_id of platform.templates is not a template id at all (its length is wrong: " +
		"a truncated or padded copy): set the account's template ids in the configuration, restart the workers and, " +
		"once all have restarted, run `worker -resume`",
	CodeAppSecretFrozen: "the official account's AppSecret is frozen: " +
		"unfreeze it in the platform's console (Settings and Development, Basic Configuration), then run `worker -resume`",
}

// AccountProblem reports whether err is a refusal of the account itself (48001, 48004,
// 50002, 40125, 40013, 41004, 40243), or of its configuration here (40037, a template id the
// account does not have; 40036, one that is no template id), which no retry of a message can
// cure: every send fails alike until an operator acts. reason starts with the code; action
// says what the operator must do.
func AccountProblem(err error) (reason, action string, ok bool) {
	var pe *Error
	if !errors.As(err, &pe) {
		return "", "", false
	}
	action, ok = accountActions[pe.Code]
	if !ok {
		return "", "", false
	}
	return refusal(pe, "account refused"), action, true
}

// refusal is how a refusal reads in a reason: its code, then the platform's message without
// its request id, or text when it sent none.
func refusal(pe *Error, text string) string {
	if msg := stripRequestID(pe.Msg); msg != "" {
		text = msg
	}
	return strconv.Itoa(pe.Code) + " " + text
}

// AddressRefused reports whether err is the platform refusing the caller's address (not on
// the account's IP whitelist: 40164 from the interfaces, 61004 from the token endpoint). That
// refuses one worker, not the account: workers on other hosts may still send. reason starts
// with the code; action says what the operator must do.
func AddressRefused(err error) (reason, action string, ok bool) {
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != CodeIPNotWhitelisted && pe.Code != CodeClientIPNotRegistered {
		return "", "", false
	}
	return refusal(pe, "address refused"),
		"add this worker's outgoing IP address to the official account's IP whitelist " +
			"(the platform's console: Settings and Development, Basic Configuration)", true
}

// ErrorLabel names the outcome of a send in a word, for metrics: the platform's errcode, or
// timeout, http or network when it gave none; "" for a success.
func ErrorLabel(err error) string {
	var pe *Error
	var he *HTTPError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &pe):
		return strconv.Itoa(pe.Code)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &he):
		return "http"
	case errors.As(err, new(*UnusableAnswerError)):
		return "answer"
	}
	return "network"
}

// UnusableAnswerError is an answer of the platform's address that is not the platform's: not
// JSON (a gateway's or a captive portal's page), cut short, too long, or without what every
// answer of the platform carries. Whether a send was taken is unknown.
type UnusableAnswerError struct {
	Why string
}

func (e *UnusableAnswerError) Error() string { return "unusable answer: " + e.Why }

// Reason is err as the push's caller reads it (a result's lastError): the platform's own
// answers, an errcode or an HTTP status, as they are; for a call that got no answer, what
// happened, without the addresses and error chains of the network between the workers and
// the platform, which are the operator's, for the log.
func Reason(err error) string {
	var pe *Error
	var he *HTTPError
	var ne net.Error
	var dns *net.DNSError
	var ua *UnusableAnswerError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &pe), errors.As(err, &he):
		return err.Error()
	case errors.As(err, &ua):
		return "the platform's address answered, but not as the platform does (" + ua.Why + "): a gateway or proxy in between?"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "the platform did not answer in time"
	case errors.As(err, &dns):
		return "the platform could not be reached: its name was not resolved"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "the platform could not be reached: connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "the platform could not be reached: connection reset"
	}
	return "the platform could not be reached"
}
