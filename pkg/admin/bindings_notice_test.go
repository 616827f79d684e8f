package admin_test

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestNATSPasswordNotPrinted: `bindings delete` tells the workers over nats.url. A NATS
// URL whose password holds a '/' or '#' (not percent-encoded) does not parse, and the warning
// says so without quoting any of it.
func TestNATSPasswordNotPrinted(t *testing.T) {
	_, dir, st := bindingsEnv(t)
	ctx := context.Background()
	if _, err := st.Bind(ctx, "2022000009", "oReview0000000000000000000009"); err != nil {
		t.Fatal(err)
	}
	// The configuration of bindingsEnv, with the MongoDB URI and database from it.
	cfg, err := os.ReadFile(dir + "/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NATS_URL": "nats://ucs:Sup3rSecretPart/rest@127.0.0.1:4222"}
	o := runAdmin(t, env, "-config", dir+"/config.yaml", "bindings", "delete", "2022000009")
	t.Logf("config:\n%s\nexit %d\nstdout: %s\nstderr: %s", cfg, o.code, o.stdout, o.stderr)
	if strings.Contains(o.stderr+o.stdout, "Sup3rSecretPart") {
		t.Fatalf("the NATS password is printed: %s", o.stderr)
	}
}

// TestHeaderOnlyImportWarnsOfNothing: a CSV file whose only line is the header imports nothing,
// and tells the workers of nothing: no warning that they were not told.
func TestHeaderOnlyImportWarnsOfNothing(t *testing.T) {
	cfgPath, dir, _ := bindingsEnv(t)
	p := dir + "/header.csv"
	if err := os.WriteFile(p, []byte("userid,openid\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := runAdmin(t, nil, "-config", cfgPath, "bindings", "import", p)
	t.Logf("exit %d\nstdout: %s\nstderr: %s", o.code, o.stdout, o.stderr)
	if strings.Contains(o.stderr, "warning") {
		t.Fatalf("an import that changed nothing warns that the workers were not told of a change: %s", o.stderr)
	}
}
