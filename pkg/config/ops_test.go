package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
)

// TestOpsUsers checks the rules of ops.users, each reported with its key: the alphabet of a
// user number, no repeats, at most MaxOpsUsers, and a sign-in to reach the page with.
func TestOpsUsers(t *testing.T) {
	base := func(yaml string) *config.Config {
		t.Helper()
		c, err := config.Parse([]byte("nats: {url: nats://x}\nmongodb: {uri: mongodb://x}\n" + yaml))
		if err != nil {
			t.Fatal(err)
		}
		c.Defaults()
		return c
	}
	if err := base("ops: {users: [\"2020000001\"]}\noauth: {identity_providers: {local: {enabled: true}}}\n").Validate(config.RoleAPI); err != nil {
		t.Errorf("a valid list refused: %v", err)
	}
	if err := base("").Validate(config.RoleAPI); err != nil {
		t.Errorf("no list (the page off) refused: %v", err)
	}
	err := base("ops: {users: [\"2020000001\", \"a b\", \"2020000001\", \"\"]}\n").Validate(config.RoleAPI)
	want := `invalid configuration:
  ops.users[1]: "a b" must be 1 to 64 of A-Z a-z 0-9 . _ -
  ops.users[2]: "2020000001" appears twice
  ops.users[3]: "" must be 1 to 64 of A-Z a-z 0-9 . _ -
  ops.users: the operations page needs a sign-in: set oauth.identity_providers.cas.url or enable local`
	if err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
	var many []string
	for i := range config.MaxOpsUsers + 1 {
		many = append(many, fmt.Sprintf("%q", fmt.Sprint(i)))
	}
	err = base("ops: {users: [" + strings.Join(many, ",") + "]}\noauth: {identity_providers: {cas: {url: https://cas.example.edu/cas}}}\n").Validate(config.RoleAPI)
	if err == nil || !strings.Contains(err.Error(), "ops.users: 101 users, at most 100") {
		t.Errorf("too many users: %v", err)
	}
}
