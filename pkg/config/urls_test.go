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
