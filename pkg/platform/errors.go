package platform

import (
	"errors"
	"strconv"
	"strings"
)

// Error is an errcode answer of the platform: the request reached it and it
// refused, with the code and message it gave. Msg is kept as sent (including
// the platform's " rid: …" request id, which its support asks for).
type Error struct {
	Code int
	Msg  string
}

// Error formats the answer as "platform error 43004: require subscribe".
func (e *Error) Error() string {
	return "platform error " + strconv.Itoa(e.Code) + ": " + e.Msg
}

// Error codes of the platform that the client and its callers act on.
const (
	// CodeBusy is "system error": the platform asks to try again later.
	CodeBusy = -1
	// CodeInvalidCredential is 40001: the access token is invalid or not the
	// latest one (another holder forced a refresh).
	CodeInvalidCredential = 40001
	// CodeInvalidOpenID is 40003: the openid does not belong to this account.
	CodeInvalidOpenID = 40003
	// CodeInvalidAppID is 40013, answered by the token endpoint.
	CodeInvalidAppID = 40013
	// CodeInvalidAccessToken is 40014: the platform does not know the token.
	CodeInvalidAccessToken = 40014
	// CodeInvalidTemplateID is 40037.
	CodeInvalidTemplateID = 40037
	// CodeTemplateIDSize is 40036: a template_id that is no template id at all (its length
	// is wrong: a truncated or padded copy).
	CodeTemplateIDSize = 40036
	// CodeInvalidAppSecret is 40125, answered by the token endpoint.
	CodeInvalidAppSecret = 40125
	// CodeAccessTokenExpired is 42001.
	CodeAccessTokenExpired = 42001
	// CodeRequireSubscribe is 43004: the user does not follow the account.
	CodeRequireSubscribe = 43004
	// CodeUserRefused is 43101: the user refuses messages from the account.
	CodeUserRefused = 43101
	// CodeBlacklisted is 43019: the user is on the account's blacklist.
	CodeBlacklisted = 43019
	// CodeDailyQuota is 45009: the account's daily call quota is used up.
	CodeDailyQuota = 45009
	// CodeMinuteQuota is 45011: the account called too often this minute.
	CodeMinuteQuota = 45011
	// CodeArgumentInvalid is 47003: a template keyword value (or another
	// argument) breaks the template's rules.
	CodeArgumentInvalid = 47003
	// CodeDataFormat is 47001: the platform could not take the body's content (seen for a
	// keyword value of the wrong format, such as a date in a time keyword).
	CodeDataFormat = 47001
	// CodeContentSize is 45002: the content is larger than the platform takes.
	CodeContentSize = 45002
	// CodeURLSize is 40039 and CodeURLDomain 40048: the message's link is too long, or on a
	// domain the platform does not take.
	CodeURLSize   = 40039
	CodeURLDomain = 40048
)

// permanentCodes are the answers that no retry can change: the recipient is
// wrong, or the content (its keyword values, size or link) is refused, and the same
// body sent again gets the same answer. (A template id the
// platform does not know, 40037, is the configuration's fault, not the
// message's: see AccountProblem.) The text is used when the platform sent no
// message of its own.
var permanentCodes = map[int]string{
	CodeRequireSubscribe: "require subscribe",
	CodeInvalidOpenID:    "invalid openid",
	CodeUserRefused:      "user refuse to accept the msg",
	CodeBlacklisted:      "require remove blacklist",
	CodeArgumentInvalid:  "argument invalid",
	CodeDataFormat:       "data format error",
	CodeContentSize:      "content size out of limit",
	CodeURLSize:          "invalid url size",
	CodeURLDomain:        "invalid url domain",
}

// Permanent reports whether err is an answer of the platform that must never
// be retried: 43004 (the user does not follow the account), 40003 (invalid
// openid), 43101 (the user refuses messages), 43019 (the user is on the account's blacklist),
// 47003 (argument invalid), 47001 (data format error), 45002 (content too large), 40039 and
// 40048 (the link too long, or on a domain not taken). reason is a short readable text that
// starts with the code, e.g. "43004 require subscribe".
//
// Everything else is retryable and answers ok=false: -1 (busy), 45009
// (quota), HTTP 5xx, timeouts, connection errors, unparsable answers and
// token errors that persisted after a refresh.
func Permanent(err error) (reason string, ok bool) {
	var pe *Error
	if !errors.As(err, &pe) {
		return "", false
	}
	text, ok := permanentCodes[pe.Code]
	if !ok {
		return "", false
	}
	return refusal(pe, text), true
}

// stripRequestID drops the " rid: …" suffix the platform appends to every
// message, so that a reason stays the same from one answer to the next.
func stripRequestID(msg string) string {
	if i := strings.Index(msg, " rid:"); i >= 0 {
		msg = msg[:i]
	}
	if i := strings.Index(msg, " hint:"); i >= 0 {
		msg = msg[:i]
	}
	return strings.TrimSpace(msg)
}

// isTokenCode reports whether the platform refused the access token itself,
// the only answers that a fresh token can cure.
func isTokenCode(code int) bool {
	return code == CodeInvalidCredential || code == CodeAccessTokenExpired || code == CodeInvalidAccessToken
}
