package standalone_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/nats-io/nats.go"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/standalone"
)

// splitStack starts the stack as the README's "Two programs" section runs it apart:
// `api -standalone -workers 0`, and a worker process from <data>/worker.yaml. It returns the
// stack and the worker's /metrics URL.
func splitStack(t *testing.T) (*standalone.Stack, string, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := standalone.Start(context.Background(), standalone.Options{DataDir: dir, Listen: "127.0.0.1:0", Workers: 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	cfg := workerConfig(t, dir)
	ctx := context.Background()
	w, err := service.NewWorker(ctx, cfg, service.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done; w.Close() })
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(srv.Close)
	return s, srv.URL + "/metrics", dir
}

func redteamScrape(t *testing.T, u string) []byte {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return b
}

func redteamValue(body []byte, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestStandaloneFrontEndWithoutWorkersSeries: a standalone process without workers (-workers 0,
// the README's way to run the programs apart) exports the front end's series only, not a
// ucs_sending_paused that would read 0 while every worker is paused.
func TestStandaloneFrontEndWithoutWorkersSeries(t *testing.T) {
	s, workerMetrics, dir := splitStack(t)
	info := readInfo(t, dir)
	base := info.BaseURL
	s.Sim.SetFaults(simulator.Faults{QuotaUsedUp: true})
	tok := token(t, base, standalone.DemoClient, clientSecret(t, info, standalone.DemoClient))
	pushTo(t, base, tok, standalone.DemoUsers[0], todo)
	embeddedtest.Eventually(t, 20*time.Second, "the worker's ucs_sending_paused is 1", func() bool {
		return redteamValue(redteamScrape(t, workerMetrics), "ucs_sending_paused") == 1
	})
	front := redteamScrape(t, base+"/metrics")
	if v := redteamValue(front, "ucs_sending_paused"); v == 0 {
		t.Fatalf("while every worker is paused (the worker's /metrics says ucs_sending_paused 1), the standalone front end "+
			"(-workers 0) exports ucs_sending_paused %v: want the series absent (no worker in this process) or 1", v)
	}
}

// TestWorkerExportsOnlyItsSeries: a worker does not export the front end's
// ucs_callback_receipts_unknown_total, which would always read 0 there (pkg/metrics: each
// program exports what it does).
func TestWorkerExportsOnlyItsSeries(t *testing.T) {
	_, workerMetrics, _ := splitStack(t)
	body := redteamScrape(t, workerMetrics)
	if regexp.MustCompile(`(?m)^# TYPE ucs_callback_receipts_unknown_total `).Match(body) {
		t.Fatalf("a worker's /metrics exports ucs_callback_receipts_unknown_total = %v, a front end's series (README: program "+
			"\"front end\") that a worker never moves", redteamValue(body, "ucs_callback_receipts_unknown_total"))
	}
}

// redteamOpsBrowser signs user in to /ops over plain HTTP (cookie jar, the login form) and
// returns the client and a function reading the page.
func redteamOpsBrowser(t *testing.T, base, user, pass string) func() string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	b := &http.Client{Jar: jar}
	get := func() (string, *url.URL) {
		resp, err := b.Get(base + "/ops")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body), resp.Request.URL
	}
	body, at := get()
	if !strings.Contains(body, `name="password"`) {
		t.Fatalf("/ops without a session: no login form at %s: %.300s", at, body)
	}
	m := regexp.MustCompile(`<form[^>]*action="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no form: %.300s", body)
	}
	action, _ := at.Parse(html.UnescapeString(m[1]))
	form := url.Values{"username": {user}, "password": {pass}}
	for _, h := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)"`).FindAllStringSubmatch(body, -1) {
		form.Set(h[1], html.UnescapeString(h[2]))
	}
	resp, err := b.PostForm(action.String(), form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return func() string {
		body, at := get()
		if at.Path != "/ops" || !strings.Contains(body, `data-state="failed"`) {
			t.Fatalf("/ops: at %s: %.300s", at, body)
		}
		return body
	}
}

// TestOpsPageCountsUndecodableFailures: the operations page counts failed pushes and lists
// failures by reason from the final results announced to every front end: a message no worker
// can decode, failed in the store and counted in ucs_delivery_failures_total{reason="undecodable"},
// is announced and shown too.
func TestOpsPageCountsUndecodableFailures(t *testing.T) {
	s, err := standalone.Start(context.Background(), standalone.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	info, base := s.Info, s.Info.BaseURL
	nc, err := nats.Connect(info.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	poison := push.NewID(time.Now())
	if err := nc.Publish(queue.Subject("some-client", poison), []byte("\x00not a push{")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	tok := token(t, base, standalone.DemoClient, clientSecret(t, info, standalone.DemoClient))
	unbound := pushTo(t, base, tok, standalone.UnboundUser, todo)
	if st := final(t, base, tok, unbound); st != "failed" {
		t.Fatalf("the push to a user without a binding ended %s", st)
	}
	embeddedtest.Eventually(t, 20*time.Second, "the poison recorded failed", func() bool {
		r, err := s.API.Store.Current(context.Background(), poison)
		return err == nil && r.State == "failed"
	})
	embeddedtest.Eventually(t, 10*time.Second, "the undecodable failure in /metrics", func() bool {
		return redteamValue(redteamScrape(t, base+"/metrics"), `ucs_delivery_failures_total{reason="undecodable"}`) == 1
	})
	page := redteamOpsBrowser(t, base, standalone.DemoUsers[0], password(t, info, standalone.DemoUsers[0]))
	failedN := regexp.MustCompile(`data-state="failed"><span class="n">(\d+)<`)
	var body string
	embeddedtest.Eventually(t, 10*time.Second, "the no-binding failure on /ops", func() bool {
		body = page()
		return strings.Contains(body, `data-kind="no_binding"`)
	})
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(body, `data-kind="undecodable"`) {
		time.Sleep(200 * time.Millisecond) // polling with a deadline
		body = page()
	}
	n := "?"
	if m := failedN.FindStringSubmatch(body); m != nil {
		n = m[1]
	}
	if !strings.Contains(body, `data-kind="undecodable"`) || n != "2" {
		t.Fatalf("the store has 2 failed pushes (%s no_binding, %s undecodable) and /metrics counts the undecodable one, "+
			"but /ops shows failed = %s and undecodable listed = %v: want 2 and a row undecodable",
			unbound, poison, n, strings.Contains(body, `data-kind="undecodable"`))
	}
}

// workerConfig is the configuration a worker process of the standalone stack in dir reads
// (`go run ./worker -config <dir>/worker.yaml`), with its defaults, validated.
func workerConfig(t *testing.T, dir string) *config.Config {
	t.Helper()
	cfg, err := config.Load(filepath.Join(dir, standalone.WorkerConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults()
	if err := cfg.Validate(config.RoleWorker); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestOpsCountsNoLookupOfAnEarlierPush: the operations page counts what this front end
// has seen since it started: its own accepts and the announcements (ucs.results.final) every
// front end hears (deployments/README.md, "The operations page"; package activity). A client
// that looks up a push delivered before the front end started (after a rolling restart, the
// application polls its earlier ucsIds) must not make that push count as delivered now.
func TestOpsCountsNoLookupOfAnEarlierPush(t *testing.T) {
	dir := t.TempDir()
	s, err := standalone.Start(context.Background(), standalone.Options{DataDir: dir, Listen: "127.0.0.1:0", Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	info := s.Info
	tok := token(t, info.BaseURL, standalone.DemoClient, clientSecret(t, info, standalone.DemoClient))
	var ids []string
	for range 3 {
		ids = append(ids, pushTo(t, info.BaseURL, tok, standalone.DemoUsers[0], todo))
	}
	for _, id := range ids {
		if st := final(t, info.BaseURL, tok, id); st != "delivered" {
			t.Fatalf("%s ended %s", id, st)
		}
	}
	s.Close()

	// The front end restarts (same data): it has seen nothing yet.
	s2, err := standalone.Start(context.Background(), standalone.Options{DataDir: dir, Listen: "127.0.0.1:0", Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	info = s2.Info
	base := info.BaseURL
	page := redteamOpsBrowser(t, base, standalone.DemoUsers[0], password(t, info, standalone.DemoUsers[0]))
	deliveredN := regexp.MustCompile(`data-state="delivered"><span class="n">(\d+)<`)
	count := func() string {
		if m := deliveredN.FindStringSubmatch(page()); m != nil {
			return m[1]
		}
		return "?"
	}
	if n := count(); n != "0" {
		t.Fatalf("a front end just started shows delivered = %s, want 0", n)
	}
	tok = token(t, base, standalone.DemoClient, clientSecret(t, info, standalone.DemoClient))
	for _, id := range ids {
		if st := lookup(t, base, tok, id)["state"]; st != "delivered" {
			t.Fatalf("lookup of %s: %v", id, st)
		}
	}
	// Nothing positive to wait for: the count is watched for 2 s, in which the lookups' results
	// would have been counted.
	watch := time.NewTicker(200 * time.Millisecond)
	defer watch.Stop()
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); <-watch.C {
		if n := count(); n != "0" {
			t.Fatalf("no push was delivered since this front end started, but after a client looked up its %d pushes "+
				"delivered before the restart, /ops shows delivered = %s (want 0: the page counts the announcements "+
				"heard since the start, not lookups)", len(ids), n)
		}
	}
}
