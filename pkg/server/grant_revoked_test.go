package server_test

import (
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
)

// TestRevokedGrantTellsTheClient: removing an application's access on the account page
// ends what the application holds of the user, as Keycloak's account console does
// (UserConsentManager.revokeConsentToClient: AuthenticationManager.backchannelLogoutUserFromClient).
// An application keeps its own session of the user (the interface, Authentication 8), so the
// back-channel logout token is the only way it learns that the user took its access away.
func TestRevokedGrantTellsTheClient(t *testing.T) {
	rcv := newLogoutReceiver(t)
	e := newSignInEnvWith(t, nil, func(cfg *config.Config) {
		cfg.OAuth.Clients = append(cfg.OAuth.Clients,
			config.Client{ClientID: "bc-app", ClientSecret: rpSecret, Grants: []string{"authorization_code", "refresh_token"},
				Scopes: []string{"openid", "notification.mp"}, RedirectURIs: []string{rpRedirect},
				BackchannelLogoutURI: rcv.URL + "/logout"})
	})
	b := browser(t)
	e.signedIn(t, b)
	tok, errc := e.exchange(t, "bc-app", e.signInCode(t, b, "bc-app"))
	if errc != "" {
		t.Fatal(errc)
	}
	e.revokeOnAccountPage(t, b, "bc-app")
	if _, errc := e.refresh(t, "bc-app", tok["refresh_token"].(string)); errc != "invalid_grant" {
		t.Fatalf("refresh after the revocation: %q", errc)
	}
	select {
	case lt := <-rcv.tokens:
		checkLogoutToken(t, e, lt, "bc-app", idTokenSID(t, tok["id_token"].(string)))
	case <-time.After(10 * time.Second):
		t.Fatalf("the user removed bc-app's access on the account page, its tokens are refused, "+
			"yet bc-app got no back-channel logout token (%d posts to its logout address)", rcv.posts.Load())
	}
}
