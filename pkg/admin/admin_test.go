package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/admin"
	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/standalone"
)

// The tests of the clients and of push test share one standalone stack (with a worker), as an
// operator's machine runs it: starting one per test would only cost time.
var (
	stackOnce sync.Once
	stack     *standalone.Stack
	stackDir  string
	stackErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if stack != nil {
		stack.Close()
	}
	if stackDir != "" {
		_ = os.RemoveAll(stackDir)
	}
	os.Exit(code)
}

// runningStack starts the shared stack on first use. Brute-force detection is off in it: the
// tests ask the token endpoint again and again on purpose while the front ends catch up with a
// change, which the detection (tested on its own in pkg/oauth) would take for an attack.
func runningStack(t *testing.T) *standalone.Stack {
	t.Helper()
	if testing.Short() {
		t.Skip("starts the standalone stack")
	}
	stackOnce.Do(func() {
		stackDir, stackErr = os.MkdirTemp("", "ucs-admin-test-")
		if stackErr != nil {
			return
		}
		cfg := &config.Config{}
		cfg.OAuth.BruteForce.Disabled = true
		stack, stackErr = standalone.Start(context.Background(), standalone.Options{
			DataDir: stackDir, Config: cfg, Listen: "127.0.0.1:0", Workers: 1,
		})
	})
	if stackErr != nil {
		t.Fatal(stackErr)
	}
	return stack
}

type outcome struct {
	code           int
	stdout, stderr string
}

// admin runs `api admin args…` as the api binary does, with the environment env.
func runAdmin(t *testing.T, env map[string]string, args ...string) outcome {
	t.Helper()
	var out, errOut bytes.Buffer
	code := admin.Run(context.Background(), args, admin.Env{
		Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) string { return env[k] },
	})
	return outcome{code, out.String(), errOut.String()}
}

func mustRun(t *testing.T, args ...string) outcome {
	t.Helper()
	o := runAdmin(t, nil, args...)
	if o.code != admin.ExitOK {
		t.Fatalf("api admin %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), o.code, o.stdout, o.stderr)
	}
	return o
}

func wantExit(t *testing.T, code int, args ...string) outcome {
	t.Helper()
	o := runAdmin(t, nil, args...)
	if o.code != code {
		t.Fatalf("api admin %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), o.code, code, o.stdout, o.stderr)
	}
	return o
}

func decode[T any](t *testing.T, o outcome) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(o.stdout), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, o.stdout)
	}
	return v
}

// tokenAnswer asks base for a client credentials token.
func tokenAnswer(t *testing.T, base, id, secret string) (int, map[string]any) {
	t.Helper()
	resp, err := http.PostForm(base+"/v1/token", url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("token answer %d: %q", resp.StatusCode, b)
	}
	return resp.StatusCode, m
}

// tokenWithin polls until base gives id a token with secret, and returns the answer.
func tokenWithin(t *testing.T, within time.Duration, base, id, secret string) map[string]any {
	t.Helper()
	var got map[string]any
	embeddedtest.Eventually(t, within, base+" gives "+id+" a token", func() bool {
		st, m := tokenAnswer(t, base, id, secret)
		got = m
		return st == http.StatusOK
	})
	return got
}

// someUcsID is a well-formed ucsId nobody pushed: a lookup with a live token answers 404, with a
// refused token 401.
const someUcsID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"

// bearerStatus is the status of a lookup with tok: the front end's bearer check.
func bearerStatus(t *testing.T, base, tok string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/infra/notification/mp/"+someUcsID, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func introspect(t *testing.T, base, id, secret, tok string) bool {
	t.Helper()
	u := base + "/auth/realms/campus/protocol/openid-connect/token/introspect"
	resp, err := http.PostForm(u, url.Values{"client_id": {id}, "client_secret": {secret}, "token": {tok}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("introspect: %d %v", resp.StatusCode, err)
	}
	return m["active"] == true
}

// secondReplica starts another front end on the stack's NATS and MongoDB, as production runs
// several, and returns its address.
func secondReplica(t *testing.T, st *standalone.Stack) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	api, err := service.NewAPI(ctx, st.Config, service.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	api.DrainDelay = 0
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = api.Serve(ctx, ln)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		api.Close()
	})
	return "http://" + ln.Addr().String()
}

func TestHelpAndUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"}, {"clients", "--help"}, {"clients", "create", "--help"}, {"clients", "list", "-help"},
		{"clients", "rotate-secret", "--help"}, {"clients", "set-token-ttl", "--help"}, {"bindings", "--help"},
		{"bindings", "import", "--help"}, {"bindings", "export", "--help"}, {"bindings", "show", "--help"},
		{"bindings", "delete", "--help"}, {"push", "--help"}, {"push", "test", "--help"},
	} {
		o := wantExit(t, admin.ExitOK, args...)
		if !strings.HasPrefix(o.stdout, "Usage: api admin") || !strings.Contains(o.stdout, "-json") ||
			!strings.Contains(o.stdout, "Exit codes: 0 done, 1 failed, 2 wrong usage.") || o.stderr != "" {
			t.Errorf("%v: help is\n%s\nstderr: %s", args, o.stdout, o.stderr)
		}
	}
	if o := wantExit(t, admin.ExitOK, "clients", "create", "--help"); !strings.Contains(o.stdout, "Usage: api admin clients create [flags] CLIENT_ID") ||
		!strings.Contains(o.stdout, "-token-ttl") || !strings.Contains(o.stdout, "shown once") {
		t.Errorf("clients create --help:\n%s", o.stdout)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "api admin: a command is required"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"clients"}, "api admin clients: a command is required"},
		{[]string{"clients", "show"}, "api admin clients show needs CLIENT_ID"},
		{[]string{"clients", "show", "a", "b"}, "needs CLIENT_ID"},
		{[]string{"clients", "list", "extra"}, "takes no arguments"},
		{[]string{"clients", "list", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"clients", "list"}, "give -config FILE (the service's configuration) or -data DIR"},
		{[]string{"-data", "x", "clients", "set-token-ttl", "a", "soon"}, `DURATION "soon"`},
		{[]string{"-data", "x", "clients", "set-token-ttl", "a", "10s"}, "must be whole seconds from 60s to 24h"},
		{[]string{"-data", "x", "clients", "create", "frac", "-token-ttl", "90.5s"}, "access_token_ttl: 1m30.5s, must be whole seconds from 60s to 24h"},
		{[]string{"-data", "x", "clients", "create", "bad id!", "-scopes", "everything"}, "unknown scope \"everything\""},
		{[]string{"-data", "x", "bindings", "import", "f", "-format", "xml"}, `-format "xml": csv or jsonl`},
		{[]string{"-data", "x", "push", "test", "2020000001", "-client", "demo-app"}, "UCS_CLIENT_SECRET"},
	} {
		o := wantExit(t, admin.ExitUsage, c.args...)
		if !strings.Contains(o.stderr, c.want) || !strings.Contains(o.stderr, "--help' for usage") || o.stdout != "" {
			t.Errorf("%v: stderr %q, want it to say %q", c.args, o.stderr, c.want)
		}
	}
	// A bad client lists every problem at once.
	o := wantExit(t, admin.ExitUsage, "-data", "x", "clients", "create", "bad id!", "-scopes", "everything", "-grants", "authorization_code")
	for _, want := range []string{`client_id: "bad id!"`, `unknown scope "everything"`, "redirect_uris: required for the authorization_code grant"} {
		if !strings.Contains(o.stderr, want) {
			t.Errorf("create with three problems: stderr %q lacks %q", o.stderr, want)
		}
	}
	// A folder without a running stack is a failure, not a usage error; --json says so in JSON.
	dir := t.TempDir()
	o = wantExit(t, admin.ExitFailure, "-data", dir, "clients", "list", "--json")
	if e := decode[map[string]string](t, o); !strings.Contains(e["error"], "standalone.json does not exist") {
		t.Errorf("missing stack: %v", e)
	}
}

func TestClients(t *testing.T) {
	st := runningStack(t)
	data := st.DataDir
	a := st.Info.BaseURL
	b := secondReplica(t, st)
	// Every change must reach both replicas within the 10 s operators are promised.
	const within = 10 * time.Second

	type created struct {
		Client struct {
			ID       string   `json:"client_id"`
			Status   string   `json:"status"`
			Source   string   `json:"source"`
			Scopes   []string `json:"scopes"`
			TokenTTL string   `json:"token_ttl"`
		} `json:"client"`
		Secret string `json:"client_secret"`
	}
	o := mustRun(t, "-data", data, "clients", "create", "reports", "-scopes", "notification.mp", "--json")
	rep := decode[created](t, o)
	if rep.Client.ID != "reports" || rep.Client.Status != "enabled" || rep.Client.Source != "admin" || len(rep.Secret) < 40 {
		t.Fatalf("create: %s", o.stdout)
	}
	if strings.Contains(o.stdout, "secret_sha256") {
		t.Fatalf("create shows the secret's hash: %s", o.stdout)
	}
	// The human form shows the secret once, and says so.
	human := mustRun(t, "clients", "create", "resource-server", "-data", data, "-scopes", "fake_api", "-introspect")
	rs := ""
	for _, l := range strings.Split(human.stdout, "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(l), "client_secret: "); ok {
			rs = s
		}
	}
	if rs == "" || !strings.Contains(human.stdout, "only time the secret is shown") {
		t.Fatalf("create, for a person:\n%s", human.stdout)
	}
	if o := wantExit(t, admin.ExitFailure, "-data", data, "clients", "create", "reports"); !strings.Contains(o.stderr, `client "reports" exists already`) {
		t.Fatalf("second create: %q", o.stderr)
	}

	// Both front ends accept the new clients.
	tok := tokenWithin(t, within, a, "reports", rep.Secret)["access_token"].(string)
	tokenWithin(t, within, b, "reports", rep.Secret)
	tokenWithin(t, within, a, "resource-server", rs)
	if !introspect(t, a, "resource-server", rs, tok) {
		t.Fatal("a live token introspects as inactive")
	}

	type listed struct {
		ID     string `json:"client_id"`
		Status string `json:"status"`
		Source string `json:"source"`
	}
	list := decode[[]listed](t, mustRun(t, "-data", data, "clients", "list", "--json"))
	got := map[string]listed{}
	for _, c := range list {
		got[c.ID] = c
	}
	if got["reports"].Source != "admin" || got[standalone.DemoClient].Source != "config" || got[standalone.TestClient].Status != "enabled" {
		t.Fatalf("list: %+v", list)
	}
	if o := mustRun(t, "-data", data, "clients", "list"); !strings.Contains(o.stdout, "CLIENT_ID") || !strings.Contains(o.stdout, "reports") {
		t.Fatalf("list, for a person:\n%s", o.stdout)
	}
	if o := mustRun(t, "-data", data, "clients", "show", "reports"); !strings.Contains(o.stdout, "status:") || !strings.Contains(o.stdout, "enabled") ||
		strings.Contains(o.stdout, rep.Secret) {
		t.Fatalf("show:\n%s", o.stdout)
	}
	if o := wantExit(t, admin.ExitFailure, "-data", data, "clients", "show", "nobody", "--json"); decode[map[string]string](t, o)["error"] != `no client "nobody"` {
		t.Fatalf("show of a missing client: %s", o.stdout)
	}

	t.Run("set-token-ttl", func(t *testing.T) {
		o := mustRun(t, "-data", data, "clients", "set-token-ttl", "reports", "90m", "--json")
		if v := decode[listed](t, o); v.ID != "reports" {
			t.Fatalf("set-token-ttl: %s", o.stdout)
		}
		embeddedtest.Eventually(t, within, "tokens of 90 minutes", func() bool {
			_, m := tokenAnswer(t, a, "reports", rep.Secret)
			return m["expires_in"] == float64(5400)
		})
		mustRun(t, "-data", data, "clients", "set-token-ttl", "reports", "default")
		embeddedtest.Eventually(t, within, "tokens of the default lifetime again", func() bool {
			_, m := tokenAnswer(t, a, "reports", rep.Secret)
			return m["expires_in"] == float64(7200)
		})
		wantExit(t, admin.ExitFailure, "-data", data, "clients", "set-token-ttl", "nobody", "2h")
	})

	t.Run("disable and enable", func(t *testing.T) {
		if bearerStatus(t, a, tok) != http.StatusNotFound || bearerStatus(t, b, tok) != http.StatusNotFound {
			t.Fatal("the token is not accepted before the client is disabled")
		}
		o := mustRun(t, "-data", data, "clients", "disable", "reports")
		if !strings.Contains(o.stdout, "Disabled client reports") {
			t.Fatalf("disable: %s", o.stdout)
		}
		// The token it has is refused by both front ends, and by introspection, within 10 s.
		for _, base := range []string{a, b} {
			embeddedtest.Eventually(t, within, base+" refuses the disabled client's token", func() bool {
				return bearerStatus(t, base, tok) == http.StatusUnauthorized
			})
		}
		if introspect(t, a, "resource-server", rs, tok) {
			t.Fatal("introspection says a disabled client's token is active")
		}
		if st, m := tokenAnswer(t, a, "reports", rep.Secret); st != http.StatusUnauthorized || m["error"] != "invalid_client" {
			t.Fatalf("a disabled client got a token: %d %v", st, m)
		}
		if v := decode[listed](t, mustRun(t, "-data", data, "clients", "show", "reports", "--json")); v.Status != "disabled" {
			t.Fatalf("show after disable: %+v", v)
		}
		mustRun(t, "-data", data, "clients", "enable", "reports")
		tok = tokenWithin(t, within, a, "reports", rep.Secret)["access_token"].(string)
		tokenWithin(t, within, b, "reports", rep.Secret)
		wantExit(t, admin.ExitFailure, "-data", data, "clients", "disable", "nobody")
	})

	t.Run("rotate-secret", func(t *testing.T) {
		o := mustRun(t, "-data", data, "clients", "rotate-secret", "reports", "--json")
		rot := decode[created](t, o)
		if rot.Secret == "" || rot.Secret == rep.Secret {
			t.Fatalf("rotate-secret: %s", o.stdout)
		}
		for _, base := range []string{a, b} {
			tokenWithin(t, within, base, "reports", rot.Secret)
			if st, _ := tokenAnswer(t, base, "reports", rep.Secret); st != http.StatusUnauthorized {
				t.Fatalf("%s still takes the old secret: %d", base, st)
			}
		}
		rep.Secret = rot.Secret
		wantExit(t, admin.ExitFailure, "-data", data, "clients", "rotate-secret", "nobody")
	})

	// Under -data, the new secret of a client the stack seeded is written to standalone.json,
	// where the walk-through reads it and the next start loads it from; it stays 0600 even
	// over a temporary file an interrupted write left behind with mode 0644.
	t.Run("rotate-secret of a seeded client", func(t *testing.T) {
		if err := os.WriteFile(data+"/standalone.json.tmp", []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(data+"/standalone.json.tmp", 0o644); err != nil { // past any umask
			t.Fatal(err)
		}
		rot := decode[created](t, mustRun(t, "-data", data, "clients", "rotate-secret", standalone.TestClient, "--json"))
		b, err := os.ReadFile(data + "/standalone.json")
		if err != nil {
			t.Fatal(err)
		}
		var info standalone.Info
		if err := json.Unmarshal(b, &info); err != nil {
			t.Fatal(err)
		}
		saved := ""
		for _, c := range info.Clients {
			if c.ClientID == standalone.TestClient {
				saved = c.ClientSecret
			}
		}
		if saved != rot.Secret || info.MongoDBURI != st.Info.MongoDBURI || len(info.Users) != len(st.Info.Users) {
			t.Fatalf("standalone.json after the rotation: secret saved %v, %+v", saved == rot.Secret, info)
		}
		if fi, err := os.Stat(data + "/standalone.json"); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("standalone.json: %v %v", fi.Mode(), err)
		}
		tokenWithin(t, within, a, standalone.TestClient, rot.Secret)
	})

	t.Run("delete", func(t *testing.T) {
		tok := tokenWithin(t, within, a, "reports", rep.Secret)["access_token"].(string)
		o := mustRun(t, "-data", data, "clients", "delete", "reports", "--json")
		if v := decode[map[string]any](t, o); v["deleted"] != true {
			t.Fatalf("delete: %s", o.stdout)
		}
		for _, base := range []string{a, b} {
			embeddedtest.Eventually(t, within, base+" refuses the removed client's token", func() bool {
				return bearerStatus(t, base, tok) == http.StatusUnauthorized
			})
		}
		wantExit(t, admin.ExitFailure, "-data", data, "clients", "show", "reports")
		wantExit(t, admin.ExitFailure, "-data", data, "clients", "delete", "reports")
	})
}

func TestPushTest(t *testing.T) {
	st := runningStack(t)
	data := st.DataDir
	type trace struct {
		UcsID  string `json:"ucsId"`
		State  string `json:"state"`
		Reason string `json:"reason"`
		States []struct {
			State string `json:"state"`
		} `json:"states"`
	}
	o := mustRun(t, "-data", data, "push", "test", standalone.DemoUsers[0], "--json")
	tr := decode[trace](t, o)
	if tr.State != "delivered" || tr.UcsID == "" || tr.States[len(tr.States)-1].State != "delivered" {
		t.Fatalf("push test: %s", o.stdout)
	}
	// The simulated platform got it, for the user's openid.
	var openID string
	for _, b := range st.Info.Bindings {
		if b.UserID == standalone.DemoUsers[0] {
			openID = b.OpenID
		}
	}
	embeddedtest.Eventually(t, 5*time.Second, "the simulator holds the test message", func() bool {
		for _, m := range st.Sim.Sent() {
			if m.ToUser == openID && strings.Contains(fmt.Sprint(m.Data), "测试消息") {
				return true
			}
		}
		return false
	})
	// The client registered for the run is gone.
	for _, c := range decode[[]map[string]any](t, mustRun(t, "-data", data, "clients", "list", "--json")) {
		if strings.HasPrefix(c["client_id"].(string), admin.TestClientPrefix) {
			t.Fatalf("the test client %v was left behind", c["client_id"])
		}
	}

	// A user without a binding: the push fails, with that reason, and the exit code says so.
	o = wantExit(t, admin.ExitFailure, "-data", data, "push", "test", standalone.UnboundUser, "--json")
	if tr := decode[trace](t, o); tr.State != "failed" || !strings.Contains(tr.Reason, "no binding") {
		t.Fatalf("push test to an unbound user: %s", o.stdout)
	}

	// With an existing client, its secret from the environment; for a person.
	secret := ""
	for _, c := range st.Info.Clients {
		if c.ClientID == standalone.DemoClient {
			secret = c.ClientSecret
		}
	}
	o = runAdmin(t, map[string]string{"UCS_CLIENT_SECRET": secret}, "-data", data, "push", "test", standalone.DemoUsers[1], "-client", standalone.DemoClient)
	if o.code != admin.ExitOK || !strings.Contains(o.stdout, "delivered") || !strings.Contains(o.stdout, "Delivered to "+standalone.DemoUsers[1]) ||
		strings.Contains(o.stdout, secret) {
		t.Fatalf("push test -client: exit %d\n%s\n%s", o.code, o.stdout, o.stderr)
	}
	o = runAdmin(t, map[string]string{"UCS_CLIENT_SECRET": "wrong-secret-wrong-secret"}, "-data", data, "push", "test", standalone.DemoUsers[1], "-client", standalone.DemoClient)
	if o.code != admin.ExitFailure || !strings.Contains(o.stderr, "invalid_client") {
		t.Fatalf("push test with a wrong secret: exit %d %s", o.code, o.stderr)
	}

	// A platform too slow for -timeout: --json still answers one document, the trace with
	// why it ended, which a script parses.
	faults := st.Sim.Faults()
	slow := faults
	slow.Latency = 4 * time.Second
	st.Sim.SetFaults(slow)
	defer st.Sim.SetFaults(faults)
	o = runAdmin(t, map[string]string{"UCS_CLIENT_SECRET": secret}, "-data", data, "push", "test", standalone.DemoUsers[2],
		"-client", standalone.DemoClient, "-timeout", "2s", "--json")
	var late struct {
		trace
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(o.stdout), &late); o.code != admin.ExitFailure || err != nil || late.UcsID == "" || !strings.Contains(late.Error, "not final") {
		t.Fatalf("push test past its timeout: exit %d, %v\nstdout: %s\nstderr: %s", o.code, err, o.stdout, o.stderr)
	}
}

// TestBindings works on a MongoDB named by a configuration file (-config), here an embedded
// FerretDB, as an operator's `api admin -config /etc/ucs/config.yaml …` does.
func TestBindings(t *testing.T) {
	if testing.Short() {
		t.Skip("starts FerretDB")
	}
	f := embeddedtest.FerretDB(t)
	dir := t.TempDir()
	cfgPath := dir + "/config.yaml"
	db := embeddedtest.DBName(t)
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf("mongodb:\n  uri: %s\n  database: %s\n", f.URI(), db)), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	type rejection struct {
		Line   int    `json:"line"`
		Reason string `json:"reason"`
	}
	type summary struct {
		Rows      int         `json:"rows"`
		Inserted  int         `json:"inserted"`
		Updated   int         `json:"updated"`
		Unchanged int         `json:"unchanged"`
		Rejected  []rejection `json:"rejected"`
	}
	csvFile := write("bindings.csv", "\ufeffuserid,openid\n"+
		"2021000001,oAlpha_000000000000000000001\n"+
		"2021000002, oBravo-00000000000000000002\n"+
		"\n"+
		"2021000003,\n"+
		"bad user,oCharlie\n"+
		"2021000001,oAlpha_again\n"+
		"2021000004,oDelta,extra\n"+
		"\"2021000005\",\"oEcho\"\n"+
		"\"2021000006,oFoxtrot\n"+
		"2021000007,oGolf\n"+
		"2021000011,oGolf\n")
	wantRejected := []rejection{
		{5, "openid: empty"},
		{6, `userid "bad user": only letters, digits, '.', '_' and '-'`},
		{7, "userid 2021000001: given before, on line 2"},
		{8, "3 fields, want 2: userid,openid"},
		{10, `userid "\"2021000006": only letters, digits, '.', '_' and '-'`},
		{12, "openid oGolf: given before, on line 11 (a follower is bound to one user number)"},
	}
	// Rows are imported even when others are rejected; the exit code says some were.
	o := wantExit(t, admin.ExitFailure, "-config", cfgPath, "bindings", "import", csvFile, "--json")
	s := decode[summary](t, o)
	if s.Rows != 10 || s.Inserted != 4 || s.Updated != 0 || s.Unchanged != 0 || fmt.Sprint(s.Rejected) != fmt.Sprint(wantRejected) {
		t.Fatalf("first import: %+v\nwant rejections %v", s, wantRejected)
	}
	// Again: nothing changes.
	o = wantExit(t, admin.ExitFailure, "-config", cfgPath, "bindings", "import", csvFile, "--json")
	if s := decode[summary](t, o); s.Inserted != 0 || s.Updated != 0 || s.Unchanged != 4 || len(s.Rejected) != 6 {
		t.Fatalf("second import: %+v", s)
	}
	// For a person: counts, then each rejected line.
	o = wantExit(t, admin.ExitFailure, "-config", cfgPath, "bindings", "import", csvFile)
	for _, want := range []string{"10 rows", "unchanged         4", "rejected          6", "Rejected rows:", "line 8: 3 fields, want 2: userid,openid"} {
		if !strings.Contains(o.stdout, want) {
			t.Errorf("import summary lacks %q:\n%s", want, o.stdout)
		}
	}

	// JSON lines: one changed, one new, one as stored; a malformed line is rejected.
	jl := write("more.jsonl", `{"userid":"2021000001","openid":"oAlpha_changed"}
{"userid":"2021000008","openid":"oHotel"}
{"userid":"2021000007","openid":"oGolf"}
{"userid":"2021000009"}
not json
`)
	o = wantExit(t, admin.ExitFailure, "-config", cfgPath, "bindings", "import", jl, "--json")
	if s := decode[summary](t, o); s.Inserted != 1 || s.Updated != 1 || s.Unchanged != 1 || len(s.Rejected) != 2 ||
		s.Rejected[0].Line != 4 || s.Rejected[1].Line != 5 {
		t.Fatalf("jsonl import: %+v", s)
	}
	clean := write("clean.csv", "2021000010,oIndia\n")
	if o := mustRun(t, "-config", cfgPath, "bindings", "import", clean); !strings.Contains(o.stdout, "inserted          1") {
		t.Fatalf("clean import: %s", o.stdout)
	}
	// A follower another user number keeps is not bound to a second one.
	taken := write("taken.csv", "2021000013,oIndia\n")
	o = wantExit(t, admin.ExitFailure, "-config", cfgPath, "bindings", "import", taken, "--json")
	if s := decode[summary](t, o); s.Rows != 1 || s.Inserted != 0 || len(s.Rejected) != 1 || s.Rejected[0] !=
		(rejection{1, "openid oIndia: bound to user number 2021000010; unbind it first (bindings delete 2021000010)"}) {
		t.Fatalf("import of a taken follower: %+v", s)
	}

	type binding struct {
		UserID    string `json:"userid"`
		OpenID    string `json:"openid"`
		Following bool   `json:"following"`
	}
	if b := decode[binding](t, mustRun(t, "-config", cfgPath, "bindings", "show", "2021000001", "--json")); b.OpenID != "oAlpha_changed" || !b.Following {
		t.Fatalf("show: %+v", b)
	}
	if o := mustRun(t, "-config", cfgPath, "bindings", "show", "2021000002"); !strings.Contains(o.stdout, "oBravo-00000000000000000002") ||
		!strings.Contains(o.stdout, "following:  yes") {
		t.Fatalf("show, for a person:\n%s", o.stdout)
	}
	if o := wantExit(t, admin.ExitFailure, "-config", cfgPath, "bindings", "show", "2029999999"); !strings.Contains(o.stderr, "user 2029999999 has no binding") {
		t.Fatalf("show of an unbound user: %q", o.stderr)
	}

	// Export writes what import reads: importing it again changes nothing.
	exp := mustRun(t, "-config", cfgPath, "bindings", "export")
	wantCSV := "userid,openid\n2021000001,oAlpha_changed\n2021000002,oBravo-00000000000000000002\n2021000005,oEcho\n" +
		"2021000007,oGolf\n2021000008,oHotel\n2021000010,oIndia\n"
	if exp.stdout != wantCSV {
		t.Fatalf("export:\n%s\nwant\n%s", exp.stdout, wantCSV)
	}
	if s := decode[summary](t, mustRun(t, "-config", cfgPath, "bindings", "import", write("export.csv", exp.stdout), "--json")); s.Unchanged != 6 || s.Inserted+s.Updated != 0 {
		t.Fatalf("import of the export: %+v", s)
	}
	jexp := mustRun(t, "-config", cfgPath, "bindings", "export", "--json")
	if lines := strings.Split(strings.TrimSpace(jexp.stdout), "\n"); len(lines) != 6 || lines[0] != `{"openid":"oAlpha_changed","userid":"2021000001"}` {
		t.Fatalf("export --json:\n%s", jexp.stdout)
	}
	out := dir + "/out.csv"
	mustRun(t, "-config", cfgPath, "bindings", "export", "-o", out)
	if b, err := os.ReadFile(out); err != nil || string(b) != wantCSV {
		t.Fatalf("export -o: %q %v", b, err)
	}

	if o := mustRun(t, "-config", cfgPath, "bindings", "delete", "2021000005", "--json"); decode[map[string]any](t, o)["deleted"] != true {
		t.Fatalf("delete: %s", o.stdout)
	}
	wantExit(t, admin.ExitFailure, "-config", cfgPath, "bindings", "show", "2021000005")
	if o := wantExit(t, admin.ExitFailure, "-config", cfgPath, "bindings", "delete", "2021000005"); !strings.Contains(o.stderr, "has no binding") {
		t.Fatalf("second delete: %q", o.stderr)
	}
	wantExit(t, admin.ExitFailure, "-config", cfgPath, "bindings", "import", dir+"/missing.csv")
}

// nextSecond waits until the clock is past the second of t: a token's iat counts whole
// seconds, and tokens issued in the second a client was disabled or registered again pass.
func nextSecond(t *testing.T, at time.Time) {
	t.Helper()
	embeddedtest.Eventually(t, 3*time.Second, "the next second", func() bool { return time.Now().Unix() > at.Unix() })
}

// TestOldTokensStayRefused: a client's tokens refused when an operator disables it stay
// refused once it is enabled again (with a new secret, after a leak), and the tokens of a
// deleted client are refused for a new client registered under the same id.
func TestOldTokensStayRefused(t *testing.T) {
	st := runningStack(t)
	data, a := st.DataDir, st.Info.BaseURL
	const within = 10 * time.Second
	type created struct {
		Secret string `json:"client_secret"`
	}
	rep := decode[created](t, mustRun(t, "-data", data, "clients", "create", "leaky", "-scopes", "notification.mp", "--json"))
	stolen := tokenWithin(t, within, a, "leaky", rep.Secret)["access_token"].(string)
	if s := bearerStatus(t, a, stolen); s != http.StatusNotFound {
		t.Fatalf("the token is not accepted to begin with: %d", s)
	}
	nextSecond(t, time.Now())
	rot := decode[created](t, mustRun(t, "-data", data, "clients", "rotate-secret", "leaky", "--json"))
	mustRun(t, "-data", data, "clients", "disable", "leaky")
	embeddedtest.Eventually(t, within, "the disabled client's token refused", func() bool {
		return bearerStatus(t, a, stolen) == http.StatusUnauthorized
	})
	mustRun(t, "-data", data, "clients", "enable", "leaky")
	fresh := tokenWithin(t, within, a, "leaky", rot.Secret)["access_token"].(string)
	issued := time.Now()
	if s := bearerStatus(t, a, stolen); s != http.StatusUnauthorized {
		t.Fatalf("a token issued before the client was disabled is accepted after enable: %d, want 401", s)
	}
	if s := bearerStatus(t, a, fresh); s != http.StatusNotFound {
		t.Fatalf("a token issued after enable: %d, want it accepted", s)
	}
	nextSecond(t, issued)
	mustRun(t, "-data", data, "clients", "delete", "leaky")
	embeddedtest.Eventually(t, within, "the deleted client's token refused", func() bool {
		return bearerStatus(t, a, fresh) == http.StatusUnauthorized
	})
	again := decode[created](t, mustRun(t, "-data", data, "clients", "create", "leaky", "-scopes", "notification.mp", "--json"))
	tokenWithin(t, within, a, "leaky", again.Secret)
	if s := bearerStatus(t, a, fresh); s != http.StatusUnauthorized {
		t.Fatalf("a token of the deleted client is accepted for the new client of its id: %d, want 401", s)
	}
}
