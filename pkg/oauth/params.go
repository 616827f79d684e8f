package oauth

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Repeated reports whether a parameter is given more than once (RFC 6749 §3.1, §3.2: request
// and response parameters must not be included more than once).
func Repeated(v url.Values) bool {
	for _, vs := range v {
		if len(vs) > 1 {
			return true
		}
	}
	return false
}

// ParsePrompt reads prompt and max_age (OpenID Connect Core §3.1.2.1). prompt is "", none,
// login, consent, or "login consent" (select_account is taken as login: there is one account
// per browser); PromptHas reads it. maxAge is -1 when absent.
func ParsePrompt(q url.Values) (prompt string, maxAge int64, e *Error) {
	maxAge = -1
	if v := q.Get("max_age"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return "", 0, errorf(ErrInvalidRequest, "max_age must be a number of seconds")
		}
		maxAge = n
	}
	values := strings.Fields(q.Get("prompt"))
	for _, p := range values {
		switch p {
		case "none", "login", "consent", "select_account":
		default:
			return "", 0, errorf(ErrInvalidRequest, "prompt must be none, login, consent or select_account")
		}
	}
	switch {
	case slices.Contains(values, "none") && len(values) > 1:
		return "", 0, errorf(ErrInvalidRequest, "prompt=none cannot be combined with other values")
	case slices.Contains(values, "none"):
		return "none", maxAge, nil
	}
	var out []string
	if slices.Contains(values, "login") || slices.Contains(values, "select_account") {
		out = append(out, "login")
	}
	if slices.Contains(values, "consent") {
		out = append(out, "consent")
	}
	return strings.Join(out, " "), maxAge, nil
}

// PromptHas reports whether prompt, as ParsePrompt returns it, asks for v (login, consent).
func PromptHas(prompt, v string) bool { return slices.Contains(strings.Fields(prompt), v) }
