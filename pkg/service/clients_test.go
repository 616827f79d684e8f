package service_test

import (
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/service"
)

// A client of the file is stored with the hash of its secret, never the secret, and with a
// digest that changes exactly when its entry does (a start then loads it again).
func TestClientRecord(t *testing.T) {
	c := config.Client{ClientID: "app", ClientSecret: "a-secret-of-the-app", Grants: []string{"client_credentials"}, Scopes: []string{"fake_api"}}
	r1, err := service.ClientRecord(c)
	if err != nil {
		t.Fatal(err)
	}
	if r1.SecretSHA256 == "" || strings.Contains(r1.SecretSHA256, c.ClientSecret) || r1.Source != "config" || r1.ConfigDigest == "" {
		t.Fatalf("record: %+v", r1)
	}
	// The same entry written with the hash of the same secret is the same entry.
	same := c
	same.ClientSecret, same.ClientSecretSHA256 = "", r1.SecretSHA256
	if r, _ := service.ClientRecord(same); r.ConfigDigest != r1.ConfigDigest || r.SecretSHA256 != r1.SecretSHA256 {
		t.Fatalf("the hashed form differs: %+v", r)
	}
	for name, change := range map[string]func(*config.Client){
		"secret": func(c *config.Client) { c.ClientSecret = "another-secret-of-the-app" },
		"scopes": func(c *config.Client) { c.Scopes = []string{"notification.mp"} },
		"ttl":    func(c *config.Client) { c.AccessTokenTTL = config.Duration(time.Hour) },
	} {
		d := c
		change(&d)
		if r, _ := service.ClientRecord(d); r.ConfigDigest == r1.ConfigDigest {
			t.Errorf("a changed %s keeps the digest", name)
		}
	}
	if _, err := service.ClientRecord(config.Client{ClientID: "x", ClientSecretSHA256: "zz"}); err == nil {
		t.Fatal("a bad hash was accepted")
	}
}
