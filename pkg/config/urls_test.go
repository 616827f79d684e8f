package config_test

import (
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
)

// TestAPIBaseEmptyFragmentRefused: an api_base ending in a bare "#" (an address copied
// from a browser's bar) has a fragment, though net/url leaves Fragment empty for it: it is
// refused, as the config schema's pattern refuses it, since the platform client would append
// its paths after the "#" and every call would go to the API's root.
func TestAPIBaseEmptyFragmentRefused(t *testing.T) {
	for _, base := range []string{"https://api.weixin.qq.com/#", "https://api.weixin.qq.com#"} {
		c := &config.Config{NATS: config.NATS{URL: "nats://x"}, MongoDB: config.MongoDB{URI: "mongodb://x"},
			Platform: config.Platform{APIBase: base, AppID: "wx1", Secret: "s", CallbackToken: "tok"}}
		c.Defaults()
		err := c.Validate(config.RoleWorker)
		if err == nil || !strings.Contains(err.Error(), "platform.api_base") {
			t.Errorf("api_base %q: validation gave %v; want a problem naming platform.api_base (query or fragment)", base, err)
		}
	}
}

// TestOAuthBaseEmptyFragmentRefused: the same for oauth_base, whose schema pattern refuses
// "#" too (the binding page would send the browser to the platform's root page), and a bare
// "?" likewise.
func TestOAuthBaseEmptyFragmentRefused(t *testing.T) {
	for _, base := range []string{"https://open.weixin.qq.com/#", "https://open.weixin.qq.com/?"} {
		c := &config.Config{NATS: config.NATS{URL: "nats://x"}, MongoDB: config.MongoDB{URI: "mongodb://x"},
			Platform: config.Platform{APIBase: "https://api.weixin.qq.com", OAuthBase: base, AppID: "wx1", Secret: "s", CallbackToken: "tok"}}
		c.Defaults()
		err := c.Validate(config.RoleAPI)
		if err == nil || !strings.Contains(err.Error(), "platform.oauth_base") {
			t.Errorf("oauth_base %q: validation gave %v; want a problem naming platform.oauth_base", base, err)
		}
	}
}

// TestClientURIEmptyFragmentRefused: RFC 6749 (3.1.2): a redirection endpoint must not include
// a fragment, and one ending in a bare "#" has one, empty (net/url leaves Fragment ""). The
// admin command validates with Client.Validate alone, so such a client was stored, and every
// code of a query response then went after the "#", where the client's back end never sees it.
// The same for the post-logout and back-channel logout addresses.
func TestClientURIEmptyFragmentRefused(t *testing.T) {
	const uri = "https://app.example.edu/cb#"
	for field, c := range map[string]config.Client{
		"redirect_uris":             {RedirectURIs: []string{uri}},
		"post_logout_redirect_uris": {RedirectURIs: []string{"https://app.example.edu/cb"}, PostLogoutRedirectURIs: []string{uri}},
		"backchannel_logout_uri":    {RedirectURIs: []string{"https://app.example.edu/cb"}, BackchannelLogoutURI: uri},
	} {
		c.ClientID, c.ClientSecret = "spa", "0123456789abcdef0123"
		c.Grants, c.Scopes = []string{"authorization_code"}, []string{"openid"}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s %q: Validate gave %v, want a problem naming it", field, uri, err)
		}
	}
}

// TestPlatformURLPasswordNotShown: api_base may carry a gateway's credentials (the platform
// client writes them xxxxx in its errors). One that validation refuses is not printed with its
// password, as nats.url is not: a password with '#' or '?' not percent-encoded, a query, the
// scheme left out ("gw:pw@gateway.example" parses as an opaque URL with no user info) or one
// slash ("https:/gw:pw@…", a path). The same for oauth_base and the campus sign-on's cas.url,
// which take no user info at all: students' browsers are sent there (every CAS sign-in's
// Location named it), and would read the password.
func TestPlatformURLPasswordNotShown(t *testing.T) {
	const pw = "gwS3cretPw"
	const gateway = "https://gw:" + pw + "@gateway.example"
	for _, base := range []string{
		"https://gw:" + pw + "#x@gateway.example",
		gateway + "/?v=1",
		"https://gw:" + pw + "?x@gateway.example",
		"gw:" + pw + "@gateway.example",
		"https:/gw:" + pw + "@gateway.example",
		gateway,
	} {
		for i, c := range []*config.Config{
			{Platform: config.Platform{APIBase: base, AppID: "wx1", Secret: "s", CallbackToken: "tok"}},
			{Platform: config.Platform{APIBase: "https://api.weixin.qq.com", OAuthBase: base, AppID: "wx1", Secret: "s", CallbackToken: "tok"}},
			{OAuth: config.OAuth{IdentityProviders: config.IdentityProviders{CAS: config.CASProvider{URL: base}}}},
		} {
			c.NATS, c.MongoDB = config.NATS{URL: "nats://x"}, config.MongoDB{URI: "mongodb://x"}
			c.Defaults()
			err := c.Validate(config.RoleAPI)
			valid := i == 0 && base == gateway // a gateway's credentials in api_base
			switch {
			case err == nil && !valid:
				t.Errorf("%q in %+v %+v: accepted", base, c.Platform, c.OAuth.IdentityProviders)
			case err != nil && valid:
				t.Errorf("%q in %+v: refused: %v", base, c.Platform, err)
			case err != nil && strings.Contains(err.Error(), pw):
				t.Errorf("the validation error shows the gateway's password:\n%v", err)
			}
		}
	}
}
