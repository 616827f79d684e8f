package pages_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/pages"
)

func TestHeaders(t *testing.T) {
	const policy = "default-src 'none'; style-src 'nonce-N'; script-src 'nonce-N'; form-action 'self'%s; frame-ancestors 'none'; base-uri 'none'"
	tests := []struct {
		name        string
		nonce       string
		formActions []string
		wantSrc     string // the style-src and script-src source
		wantActions string // what follows 'self' in form-action
	}{
		{"no extra actions", nonce, nil, "'nonce-" + nonce + "'", ""},
		{"origin", nonce, []string{"https://app.campus.edu"}, "'nonce-" + nonce + "'", " https://app.campus.edu"},
		{"redirect_uri reduced to its origin", nonce, []string{"https://u:pw@app.campus.edu:8443/cb?x=1#f"}, "'nonce-" + nonce + "'", " https://app.campus.edu:8443"},
		{"loopback of a native app", nonce, []string{"http://127.0.0.1:53123/cb", "http://[::1]:8080/"}, "'nonce-" + nonce + "'", " http://127.0.0.1:53123 http://[::1]:8080"},
		{"private-use scheme", nonce, []string{"edu.campus.portal:/oauth"}, "'nonce-" + nonce + "'", " edu.campus.portal:"},
		{"scheme lowercased, duplicates once", nonce, []string{"HTTPS://app.campus.edu/a", "https://app.campus.edu/b"}, "'nonce-" + nonce + "'", " https://app.campus.edu"},
		{"unsafe entries dropped", nonce, []string{
			"", "'self'", "app.campus.edu", "https:", "https:///cb", "javascript:alert(1)", "data:text/html,x", "VBScript:x",
			"https://a.edu; script-src *", "https://a.edu,evil", "https://a.edu'x", "https://a.edu\nX-Evil: 1",
			"https://ok.campus.edu",
		}, "'nonce-" + nonce + "'", " https://ok.campus.edu"},
		{"empty nonce", "", nil, "'none'", ""},
		{"nonce that would inject", "abc'; script-src *", nil, "'none'", ""},
		{"nonce with too much padding", "abc===", nil, "'none'", ""},
		{"base64url nonce", "ab-_cd==", nil, "'nonce-ab-_cd=='", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			pages.Headers(h, tt.nonce, tt.formActions...)
			want := map[string]string{
				"Content-Type":            "text/html; charset=utf-8",
				"Cache-Control":           "no-store",
				"Pragma":                  "no-cache",
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "no-referrer",
				"X-Frame-Options":         "DENY",
				"Content-Security-Policy": strings.ReplaceAll(strings.Replace(policy, "%s", tt.wantActions, 1), "'nonce-N'", tt.wantSrc),
			}
			for k, v := range want {
				if got := h.Values(k); len(got) != 1 || got[0] != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if len(h) != len(want) {
				t.Errorf("headers %v", h)
			}
		})
	}
}

func TestNewNonce(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		n := pages.NewNonce()
		b, err := base64.StdEncoding.DecodeString(n)
		if err != nil || len(b) != 16 {
			t.Fatalf("nonce %q: %d bytes, %v", n, len(b), err)
		}
		if seen[n] {
			t.Fatalf("nonce %q repeated", n)
		}
		seen[n] = true
		h := http.Header{}
		pages.Headers(h, n)
		if !strings.Contains(h.Get("Content-Security-Policy"), "style-src 'nonce-"+n+"'; script-src 'nonce-"+n+"';") {
			t.Fatalf("nonce %q refused: %s", n, h.Get("Content-Security-Policy"))
		}
	}
}

// FuzzHeaders checks that no nonce or form action, however odd, adds or splits a directive of
// the policy.
func FuzzHeaders(f *testing.F) {
	f.Add("bm9uY2U=", "https://app.campus.edu/cb")
	f.Add("a'; script-src *", "https://a.edu; script-src *")
	f.Add("", "edu.campus.portal:/x")
	f.Fuzz(func(t *testing.T, nonce, action string) {
		h := http.Header{}
		pages.Headers(h, nonce, action)
		csp := h.Get("Content-Security-Policy")
		parts := strings.Split(csp, "; ")
		want := []string{"default-src ", "style-src ", "script-src ", "form-action 'self'", "frame-ancestors ", "base-uri "}
		if len(parts) != len(want) || strings.ContainsAny(csp, "\r\n,\"") {
			t.Fatalf("policy %q", csp)
		}
		for i, p := range parts {
			if !strings.HasPrefix(p, want[i]) || strings.Contains(p, ";") {
				t.Fatalf("directive %d %q in %q", i, p, csp)
			}
		}
		if fa := strings.Fields(parts[3]); len(fa) > 3 {
			t.Fatalf("form-action %q", parts[3])
		}
	})
}
