package server_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestBasicClientRefusedWithChallenge: every endpoint that authenticates clients answers a
// client refused after HTTP Basic authentication with 401 and WWW-Authenticate: Basic
// (RFC 6749 §5.2), revocation and introspection as the token endpoint does.
func TestBasicClientRefusedWithChallenge(t *testing.T) {
	e := newSignInEnv(t)
	for _, path := range []string{"/token", "/revoke", "/token/introspect"} {
		form := url.Values{"token": {"whatever"}, "grant_type": {"client_credentials"}}
		req, _ := http.NewRequest(http.MethodPost, e.issuer+"/protocol/openid-connect"+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("portal:wrong-secret")))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if h := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(h, "Basic ") {
			t.Errorf("%s with a wrong Basic secret: %d, WWW-Authenticate %q; want 401 and Basic", path, resp.StatusCode, h)
		}
	}
}
