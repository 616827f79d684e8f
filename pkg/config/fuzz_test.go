package config_test

import (
	"os"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
)

// FuzzParse feeds the configuration file's reader with arbitrary YAML. Nothing panics, through
// the defaults and every role's validation; a file Validate accepts has its limits kept; and a
// validation's message never quotes a secret of the file.
func FuzzParse(f *testing.F) {
	if ex, err := os.ReadFile(example); err == nil {
		f.Add(ex)
	}
	for _, seed := range []string{
		"",
		"listen: 127.0.0.1:0\nnats: {replicas: 3}\n",
		"oauth: {clients: [{client_id: a, client_secret: 0123456789abcdef, grants: [client_credentials], scopes: [fake_api]}]}",
		"platform: {appid: wx1, encoding_aes_key: jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C, callback_token: tok}",
		"platform: {encoding_aes_key: short-secret-value}",
		"worker: {concurrency: 99999999999999999999}",
		"oauth: {access_token_ttl: -5s, key_rotation: 1ns}",
		"a: &a [*a, *a, *a]",
		"{{{",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := config.Parse(b)
		if err != nil {
			return
		}
		c.Defaults()
		for _, role := range []config.Role{config.RoleAPI, config.RoleWorker, config.RoleStandalone} {
			err := c.Validate(role)
			if err == nil {
				if c.NATS.Replicas < 1 || c.NATS.Replicas > 5 || c.Worker.Concurrency < 1 || c.Worker.Concurrency > 4096 ||
					c.ShutdownGrace.D() < 1e9 || (c.Platform.EncodingAESKey != "" && len(c.Platform.EncodingAESKey) != 43) {
					t.Fatalf("role %d accepted %+v", role, c)
				}
				continue
			}
			msg := err.Error()
			for _, s := range []string{c.Platform.Secret, c.Platform.CallbackToken, c.Platform.EncodingAESKey} {
				if len(s) >= 12 && strings.Contains(msg, s) {
					t.Fatalf("the message quotes a secret %q: %s", s, msg)
				}
			}
			for _, cl := range c.OAuth.Clients {
				if len(cl.ClientSecret) >= 12 && strings.Contains(msg, cl.ClientSecret) {
					t.Fatalf("the message quotes a client secret: %s", msg)
				}
			}
		}
	})
}
