package deployments

import (
	"slices"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
)

// TestShippedConfigsCanSignIn: a configuration that registers a client of the authorization
// code grant (and so the binding page, /bind, which the README's `platform menu set -bind`
// points students at) must name an identity provider, or every authorization request is sent
// back "sign-in is not configured on this server". The k8s configuration's comment says the
// built-in sign-in is had by adding directory.users with local sign-in enabled.
func TestShippedConfigsCanSignIn(t *testing.T) {
	m := loadK8s(t)
	k8s := k8sConfig(t, m)
	compose, err := config.Load(composeConfig)
	if err != nil {
		t.Fatal(err)
	}
	compose.Defaults()
	// The k8s file's own recipe for the built-in sign-in.
	withUsers := k8sConfig(t, m)
	withUsers.Directory.Users = []config.User{{UserID: "2020000001", PasswordHash: "$2a$10$7EqJtq98hPqEX7fNZaFWoOhi5BWX4Z3ZPa3RCI1qRxs0oLF4e8Gxu"}}
	withUsers.OAuth.IdentityProviders.CAS.URL, withUsers.OAuth.IdentityProviders.Default = "", ""
	withUsers.OAuth.IdentityProviders.Local.Enabled = true
	withUsers.Defaults()
	for _, c := range []struct {
		where string
		cfg   *config.Config
	}{
		{"k8s/configmap.yaml (ucs-config)", k8s},
		{composeConfig, compose},
		{"k8s/configmap.yaml with the built-in sign-in, as its comment says", withUsers},
	} {
		code := false
		for _, cl := range c.cfg.OAuth.Clients {
			code = code || slices.Contains(cl.Grants, "authorization_code")
		}
		if code && c.cfg.OAuth.IdentityProviders.Default == "" {
			t.Errorf("%s: a client of the authorization code grant, but no identity provider "+
				"(oauth.identity_providers): sign-in is off, /bind and the client's sign-in refused", c.where)
		}
	}
}

// TestK8sConfigTrustsTheIngress: the api Service is reached only through an Ingress (api-service.yaml,
// README "TLS ends at the Ingress"), so every request's connection address is the Ingress
// controller's. Without oauth.trusted_proxies every client and user shares that one address:
// the token endpoint's per_address bucket (100/s) is the whole campus's, and one guesser's
// 1,000 wrong passwords slow (429) every user's sign-in. The shipped configuration sets it, and
// the README's table of what to change names it.
func TestK8sConfigTrustsTheIngress(t *testing.T) {
	m := loadK8s(t)
	cfg := k8sConfig(t, m)
	text, _ := m.secretValue("ucs-config", "config.yaml")
	if len(cfg.OAuth.TrustedProxies) == 0 && !strings.Contains(text, "trusted_proxies") {
		t.Errorf("k8s ucs-config: oauth.trusted_proxies is not set (nor marked PLACEHOLDER) behind the Ingress: every client shares the Ingress's address for rate limits and the slowing of failing addresses")
	}
	readme := string(readFile(t, "README.md"))
	i := strings.Index(readme, "### Secrets: what to change")
	j := strings.Index(readme[i:], "Do not commit the real values")
	if !strings.Contains(readme[i:i+j], "trusted_proxies") {
		t.Errorf("README's table of values to change before use does not name oauth.trusted_proxies")
	}
}

// TestMongoDBRoleCoversTheStore: the role README asks of the MongoDB user covers the commands
// the store runs: readWrite does not grant collMod, with which a changed mongodb.retention is
// applied to the TTL index at start (that start would fail "not authorized").
func TestMongoDBRoleCoversTheStore(t *testing.T) {
	store := string(readFile(t, "../pkg/store/store.go"))
	readme := string(readFile(t, "README.md"))
	if strings.Contains(store, `"collMod"`) && !strings.Contains(readme, "needs `readWrite` and `dbAdmin` on the database") {
		t.Errorf("the store runs collMod, which README's role for the MongoDB user (readWrite) does not grant")
	}
}
