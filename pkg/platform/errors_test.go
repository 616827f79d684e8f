package platform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

func TestPermanent(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		reason string
		ok     bool
	}{
		{"require subscribe", &Error{43004, "require subscribe rid: 6472dfd0-536f4e2c-16f28abc"}, "43004 require subscribe", true},
		{"invalid openid", &Error{40003, "invalid openid rid: 6385c6c1-0fcadca1-22c1fc91"}, "40003 invalid openid", true},
		{"user refuses", &Error{43101, "user refuse to accept the msg rid: x"}, "43101 user refuse to accept the msg", true},
		{"blacklisted", &Error{43019, "require remove blacklist rid: x"}, "43019 require remove blacklist", true},
		{"no template id at all: the configuration's", &Error{40036, "invalid template_id size rid: x"}, "", false},
		{"invalid template: the configuration's, not the message's", &Error{40037, "invalid template_id rid: x"}, "", false},
		{"argument invalid names the keyword", &Error{47003, "argument invalid! data.thing1.value invalid rid: 655b0825-4bb435d9-2c8ecd13"},
			"47003 argument invalid! data.thing1.value invalid", true},
		{"old hint suffix", &Error{43004, "require subscribe hint: [qx0nZa02818630]"}, "43004 require subscribe", true},
		{"no message", &Error{43004, ""}, "43004 require subscribe", true},
		{"wrapped", fmt.Errorf("send template: %w", &Error{43004, "require subscribe"}), "43004 require subscribe", true},
		{"busy", &Error{-1, "system error"}, "", false},
		{"quota", &Error{45009, "reach max api daily quota limit"}, "", false},
		{"token rejected", &Error{40001, "invalid credential, access_token is invalid or not latest"}, "", false},
		{"token expired", &Error{42001, "access_token expired"}, "", false},
		{"invalid token", &Error{40014, "invalid access_token"}, "", false},
		{"wrong appid", fmt.Errorf("fetch access token: %w", &Error{40013, "invalid appid"}), "", false},
		{"wrong secret", &Error{40125, "invalid appsecret"}, "", false},
		{"HTTP 502", errors.New("send template: HTTP status 502 Bad Gateway"), "", false},
		{"timeout", context.DeadlineExceeded, "", false},
		{"connection", io.ErrUnexpectedEOF, "", false},
		{"nil", nil, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reason, ok := Permanent(tt.err)
			if reason != tt.reason || ok != tt.ok {
				t.Errorf("Permanent = %q, %v; want %q, %v", reason, ok, tt.reason, tt.ok)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	err := error(&Error{Code: 43004, Msg: "require subscribe"})
	if got := err.Error(); got != "platform error 43004: require subscribe" {
		t.Errorf("Error() = %q", got)
	}
}

// TestRetryAfter: a 429's or 503's Retry-After in seconds or as an HTTP date (RFC 9110
// §10.2.3); nothing, an unreadable value or a date past is no wait; a wait beyond MaxRetryAfter
// is cut to it.
func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"3":                             3 * time.Second,
		"0":                             0,
		"-5":                            0,
		"soon":                          0,
		"86400":                         MaxRetryAfter,
		"Sun, 29 Nov 2026 08:02:00 GMT": 2 * time.Minute,
		"Sun, 29 Nov 2026 07:00:00 GMT": 0,
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("Retry-After %q: %s, want %s", v, got, want)
		}
	}
}

// TestAskedWait: a 429 asks for its Retry-After, a minute when it names none; a 503 only when it
// names one; any other answer asks nothing.
func TestAskedWait(t *testing.T) {
	for _, c := range []struct {
		err  error
		want time.Duration
		ok   bool
	}{
		{fmt.Errorf("send: %w", &HTTPError{Code: 429, RetryAfter: 3 * time.Second}), 3 * time.Second, true},
		{&HTTPError{Code: 429}, time.Minute, true},
		{&HTTPError{Code: 503, RetryAfter: time.Second}, time.Second, true},
		{&HTTPError{Code: 503}, 0, false},
		{&HTTPError{Code: 502, RetryAfter: time.Second}, 0, false},
		{errors.New("other"), 0, false},
	} {
		he, got := AskedWait(c.err)
		if (he != nil) != c.ok || got != c.want {
			t.Errorf("%v: %v %s, want %v %s", c.err, he != nil, got, c.ok, c.want)
		}
	}
}
