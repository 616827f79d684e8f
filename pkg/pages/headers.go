package pages

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// NewNonce returns a fresh CSP nonce: 128 random bits in standard base64. Use one per response,
// passed both to Headers and to the page's Data.
func NewNonce() string {
	var b [16]byte
	// crypto/rand.Read never fails on supported systems; it crashes the program rather than
	// return a predictable nonce.
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// Headers sets the security headers of a page of this package on h: HTML content type, no
// caching (the pages carry CSRF tokens, codes and user numbers), no sniffing, no referrer, no
// framing, and a Content-Security-Policy that allows only the page's own nonce-tagged <style>
// and <script> and forms posting to 'self' or to formActions.
//
// formActions are the extra places forms may post to, each an origin or a URL: an http or https
// URL is reduced to its origin, another scheme (a native app's "edu.campus.portal:/cb") to
// "scheme:". Entries without a scheme, with javascript:, data: or vbscript:, or with characters
// that could end a CSP source are dropped.
//
// Chrome applies form-action to the redirect that answers a form post, so the Login and Consent
// pages need the client's redirect_uri here too when their POST is answered by a redirect to it;
// FormPost needs it because its form posts there.
//
// A nonce that is not base64 becomes 'none', so it cannot inject directives; the page then shows
// unstyled, which a test notices.
func Headers(h http.Header, nonce string, formActions ...string) {
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", csp(nonce, formActions))
}

func csp(nonce string, formActions []string) string {
	src := "'none'"
	if isBase64Value(nonce) {
		src = "'nonce-" + nonce + "'"
	}
	var b strings.Builder
	b.WriteString("default-src 'none'; style-src ")
	b.WriteString(src)
	b.WriteString("; script-src ")
	b.WriteString(src)
	b.WriteString("; form-action 'self'")
	seen := make([]string, 0, len(formActions))
	for _, fa := range formActions {
		s, ok := formActionSource(fa)
		if !ok || slices.Contains(seen, s) {
			continue
		}
		seen = append(seen, s)
		b.WriteByte(' ')
		b.WriteString(s)
	}
	b.WriteString("; frame-ancestors 'none'; base-uri 'none'")
	return b.String()
}

// formActionSource turns an origin or URL into the CSP source expression that allows posting
// to it, or reports false when it cannot be allowed safely.
func formActionSource(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return "", false
	}
	scheme := strings.ToLower(u.Scheme)
	var src string
	switch scheme {
	case "javascript", "data", "vbscript":
		return "", false
	case "http", "https":
		if u.Host == "" {
			// "https:" alone would allow posting to every site.
			return "", false
		}
		src = scheme + "://" + u.Host
	default:
		src = scheme + ":"
	}
	for _, c := range src {
		if !isSourceChar(c) {
			return "", false
		}
	}
	return src, true
}

// isSourceChar reports whether c may appear in a host or scheme source as built here; anything
// else (space, ';', ',', quotes) could split the policy.
func isSourceChar(c rune) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.ContainsRune("+-.:/[]*_", c)
}

// isBase64Value reports whether s is a CSP base64-value: base64 or base64url characters with
// at most two '=' of padding at the end.
func isBase64Value(s string) bool {
	body := strings.TrimRight(s, "=")
	if body == "" || len(s)-len(body) > 2 {
		return false
	}
	for _, c := range body {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '+', c == '/', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}
