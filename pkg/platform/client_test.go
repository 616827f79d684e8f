package platform_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/platform/simulator"
)

const (
	appID    = "wx1234567890abcdef"
	secret   = "s3cr3t-app-secret-0123456789abcd"
	tplExam  = "tpl_exam_reminder"
	follower = "oFollower0000000000000000001"
)

// newClock is a fake clock at the fixed start of these tests.
func newClock() *clocktest.Clock { return clocktest.New(time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC)) }

type env struct {
	sim    *simulator.Simulator
	srv    *httptest.Server
	client *platform.Client
	logs   *embeddedtest.SyncBuffer
	// tokens holds every access token a send carried, to check that none
	// reaches a log or an error.
	tokensMu sync.Mutex
	tokens   map[string]bool
}

type envOptions struct {
	simNow    func() time.Time
	clientNow func() time.Time
	// wrap lets a test answer in the platform's place before the simulator.
	wrap func(next http.Handler) http.Handler
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	sim := simulator.New(simulator.Config{AppID: appID, Secret: secret, Now: o.simNow, Seed: 1})
	sim.AddTemplate(tplExam, []string{"thing1", "time2", "character_string3"})
	sim.AddFollower(follower)
	e := &env{sim: sim, logs: &embeddedtest.SyncBuffer{}, tokens: map[string]bool{}}
	h := sim.Handler()
	if o.wrap != nil {
		h = o.wrap(h)
	}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok := r.URL.Query().Get("access_token"); tok != "" {
			e.tokensMu.Lock()
			e.tokens[tok] = true
			e.tokensMu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { e.srv.Close(); sim.Close() })
	client, err := platform.New(platform.Config{
		APIBase: e.srv.URL + "/",
		AppID:   appID,
		Secret:  secret,
		Now:     o.clientNow,
		Logger:  slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.client = client
	return e
}

// assertNoSecrets fails if the secret or any access token appears in the
// logs or in the given error texts.
func (e *env) assertNoSecrets(t *testing.T, errs ...error) {
	t.Helper()
	texts := []string{e.logs.String()}
	for _, err := range errs {
		if err != nil {
			texts = append(texts, err.Error())
		}
	}
	e.tokensMu.Lock()
	defer e.tokensMu.Unlock()
	if len(e.tokens) == 0 {
		t.Fatal("no token was used")
	}
	for _, text := range texts {
		if strings.Contains(text, secret) {
			t.Errorf("the secret appears in %q", text)
		}
		for tok := range e.tokens {
			if strings.Contains(text, tok) {
				t.Errorf("an access token appears in %q", text)
			}
		}
	}
}

// platformToken calls the token endpoint as another worker process would.
func (e *env) platformToken(t *testing.T, force bool) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"grant_type": "client_credential", "appid": appID, "secret": secret, "force_refresh": force})
	resp, err := e.srv.Client().Post(e.srv.URL+"/cgi-bin/stable_token", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || a.AccessToken == "" {
		t.Fatalf("stable_token: %v", err)
	}
	return a.AccessToken
}

func exam(openid, ucsID string) platform.TemplateMessage {
	return platform.TemplateMessage{
		ToUser:      openid,
		TemplateID:  tplExam,
		URL:         "https://campus.example.edu/exams/42",
		ClientMsgID: ucsID,
		Data: map[string]string{
			"thing1":            "高等数学期末考试",
			"time2":             "2025-01-08 09:00",
			"character_string3": "A-101",
		},
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  platform.Config
		want string
	}{
		{"valid", platform.Config{APIBase: "https://api.weixin.qq.com", AppID: "wx1", Secret: "s"}, ""},
		{"valid with path and slash", platform.Config{APIBase: "http://127.0.0.1:8089/wx/", AppID: "wx1", Secret: "s"}, ""},
		{"everything missing", platform.Config{},
			"platform: invalid config: APIBase must be an absolute http or https URL; AppID is empty; Secret is empty"},
		{"relative", platform.Config{APIBase: "api.weixin.qq.com", AppID: "wx1", Secret: "s"},
			"platform: invalid config: APIBase must be an absolute http or https URL"},
		{"other scheme", platform.Config{APIBase: "ftp://api.weixin.qq.com", AppID: "wx1", Secret: "s"},
			"platform: invalid config: APIBase must be an absolute http or https URL"},
		{"query", platform.Config{APIBase: "https://api.weixin.qq.com/?x=1", AppID: "wx1"},
			"platform: invalid config: APIBase must not have a query or fragment; Secret is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if got := fmt.Sprint(err); (tt.want == "" && err != nil) || (tt.want != "" && got != tt.want) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
			if _, nerr := platform.New(tt.cfg); (nerr == nil) != (err == nil) {
				t.Errorf("New disagrees with Validate: %v", nerr)
			}
		})
	}
}

func TestSendTemplate(t *testing.T) {
	e := newEnv(t, envOptions{})
	id, err := e.client.SendTemplate(context.Background(), exam(follower, "01JH5Z0000000000000000000A"))
	if err != nil {
		t.Fatal(err)
	}
	sent := e.sim.Sent()
	if len(sent) != 1 {
		t.Fatalf("%d messages sent", len(sent))
	}
	m := sent[0]
	want := exam(follower, "01JH5Z0000000000000000000A")
	if m.MsgID != id || m.ToUser != want.ToUser || m.TemplateID != want.TemplateID || m.URL != want.URL ||
		m.ClientMsgID != want.ClientMsgID || fmt.Sprint(m.Data) != fmt.Sprint(want.Data) {
		t.Errorf("sent %+v with msgid %d, want %+v", m, id, want)
	}
	// The platform's msgids exceed 2^53: they must arrive exactly.
	if id != m.MsgID || id < 1<<53 {
		t.Errorf("msgid %d", id)
	}

	// A repeat with the same idempotency key reaches nobody twice.
	again, err := e.client.SendTemplate(context.Background(), exam(follower, "01JH5Z0000000000000000000A"))
	if err != nil || again != id || len(e.sim.Sent()) != 1 {
		t.Errorf("repeat: msgid %d, %v, %d sent; want msgid %d and 1 sent", again, err, len(e.sim.Sent()), id)
	}
}

func TestPermanentAnswers(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.sim.AddFollower("oLeft")
	e.sim.RemoveFollower("oLeft")
	e.sim.AddFollower("oRefusing")
	e.sim.SetRefusing("oRefusing", true)

	tooLong := exam(follower, "")
	tooLong.Data["thing1"] = strings.Repeat("考", 21)
	unknownTemplate := exam(follower, "")
	unknownTemplate.TemplateID = "tpl_deleted"

	tests := []struct {
		name   string
		m      platform.TemplateMessage
		code   int
		reason string
	}{
		{"not following", exam("oLeft", ""), 43004, "43004 require subscribe"},
		{"unknown openid", exam("oStranger", ""), 40003, "40003 invalid openid"},
		{"refuses messages", exam("oRefusing", ""), 43101, "43101 user refuse to accept the msg"},
		{"unknown template: the account's configuration, not the message", unknownTemplate, 40037, ""},
		{"value breaks the rule", tooLong, 47003, "47003 argument invalid! data.thing1.value invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := e.client.SendTemplate(context.Background(), tt.m)
			var pe *platform.Error
			if !errors.As(err, &pe) || pe.Code != tt.code || id != 0 {
				t.Fatalf("SendTemplate = %d, %v; want errcode %d", id, err, tt.code)
			}
			reason, ok := platform.Permanent(err)
			if ok != (tt.reason != "") || reason != tt.reason {
				t.Errorf("Permanent = %q, %v; want %q", reason, ok, tt.reason)
			}
			if _, _, account := platform.AccountProblem(err); account != (tt.reason == "") {
				t.Errorf("AccountProblem = %v", account)
			}
		})
	}
}

func TestRetryableAnswers(t *testing.T) {
	tests := []struct {
		name     string
		faults   simulator.Faults
		code     int    // errcode expected, 0 if none
		contains string // in the error text
	}{
		{"system busy", simulator.Faults{BusyRate: 1}, -1, "platform error -1: system error"},
		{"bad gateway", simulator.Faults{ServerErrorRate: 1}, 0, "HTTP status 502 Bad Gateway"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			e.sim.SetFaults(tt.faults)
			_, err := e.client.SendTemplate(context.Background(), exam(follower, ""))
			if err == nil || !strings.Contains(err.Error(), tt.contains) {
				t.Fatalf("SendTemplate error %v, want one containing %q", err, tt.contains)
			}
			var pe *platform.Error
			if got := errors.As(err, &pe); got != (tt.code != 0) || (got && pe.Code != tt.code) {
				t.Errorf("error %v: want errcode %d", err, tt.code)
			}
			if reason, ok := platform.Permanent(err); ok {
				t.Errorf("Permanent = %q, true; want retryable", reason)
			}
		})
	}
}

func TestUnusableAnswersAreRetryable(t *testing.T) {
	tests := []struct {
		name     string
		answer   func(w http.ResponseWriter)
		contains string
	}{
		{"not JSON", func(w http.ResponseWriter) { _, _ = io.WriteString(w, "<html>maintenance</html>") }, "unparsable answer"},
		{"too long", func(w http.ResponseWriter) {
			_, _ = w.Write(bytes.Repeat([]byte(" "), 2<<20))
		}, "answer longer than 65536 bytes"},
		{"connection dropped", func(w http.ResponseWriter) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}, "EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOptions{wrap: func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if strings.HasSuffix(r.URL.Path, "/template/send") {
						tt.answer(w)
						return
					}
					next.ServeHTTP(w, r)
				})
			}})
			_, err := e.client.SendTemplate(context.Background(), exam(follower, ""))
			if err == nil || !strings.Contains(err.Error(), tt.contains) {
				t.Fatalf("error %v, want one containing %q", err, tt.contains)
			}
			if _, ok := platform.Permanent(err); ok {
				t.Error("an unusable answer classified permanent")
			}
			e.assertNoSecrets(t, err)
		})
	}
}

func TestTokenFetchedOnceForConcurrentSends(t *testing.T) {
	e := newEnv(t, envOptions{})
	const goroutines, each = 32, 25
	var wg sync.WaitGroup
	var failures atomic.Int64
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				if _, err := e.client.SendTemplate(context.Background(), exam(follower, fmt.Sprintf("ucs-%d-%d", g, i))); err != nil {
					failures.Add(1)
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	st := e.sim.Stats()
	if st.TokenRequests != 1 || st.Accepted != goroutines*each || failures.Load() != 0 {
		t.Errorf("stats %+v: want 1 token request and %d accepted", st, goroutines*each)
	}
}

func TestTokenRefetchedBeforeItExpires(t *testing.T) {
	clk := newClock()
	e := newEnv(t, envOptions{simNow: clk.Now, clientNow: clk.Now})
	ctx := context.Background()
	if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(90 * time.Minute)
	if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Stats().TokenRequests; n != 1 {
		t.Fatalf("%d token requests within the token's life", n)
	}
	// Five minutes before the end the client asks again, behind the send, and
	// the platform hands out the next token without invalidating the current one.
	clk.Advance(26 * time.Minute)
	if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 5*time.Second, "the renewal", func() bool { return e.sim.Stats().TokenRequests == 2 })
	st := e.sim.Stats()
	if st.TokenRequests != 2 || st.TokenForceRefreshes != 0 || len(st.Errors) != 0 {
		t.Errorf("stats %+v: want a second, normal token request and no errors", st)
	}
}

// TestSendsDoNotWaitForTheRenewal: the token is renewed five minutes before its end; a slow
// token endpoint then holds no send (a worker's handlers, each holding its share of the send
// budget, would all call at once when the token came). Sends go on with the token in hand,
// and one renewal runs behind them.
func TestSendsDoNotWaitForTheRenewal(t *testing.T) {
	clk := newClock()
	var hold atomic.Bool
	release := make(chan struct{})
	e := newEnv(t, envOptions{simNow: clk.Now, clientNow: clk.Now, wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/stable_token") && hold.Load() {
				<-release
			}
			next.ServeHTTP(w, r)
		})
	}})
	ctx := context.Background()
	if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(116 * time.Minute)
	hold.Store(true)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if _, err := e.client.SendTemplate(sctx, exam(follower, fmt.Sprintf("ucs-renewal-%d", i))); err != nil {
				t.Errorf("a send while the renewal is held: %v", err)
			}
		})
	}
	wg.Wait()
	close(release)
	embeddedtest.Eventually(t, 5*time.Second, "the renewal", func() bool { return e.sim.Stats().TokenRequests == 2 })
	if st := e.sim.Stats(); st.Accepted != 21 || st.TokenRequests != 2 || len(st.Errors) != 0 {
		t.Errorf("stats %+v: want every send taken with the token in hand and one renewal", st)
	}
}

func TestExpiredTokenRefreshedOnce(t *testing.T) {
	// The platform's clock runs ahead of the worker's: the token the worker
	// still thinks valid has expired there.
	platformClock, workerClock := newClock(), newClock()
	e := newEnv(t, envOptions{simNow: platformClock.Now, clientNow: workerClock.Now})
	ctx := context.Background()
	if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
		t.Fatal(err)
	}
	platformClock.Advance(7201 * time.Second)

	id, err := e.client.SendTemplate(ctx, exam(follower, "ucs-after-expiry"))
	if err != nil || id == 0 {
		t.Fatalf("SendTemplate after expiry = %d, %v", id, err)
	}
	st := e.sim.Stats()
	if st.Errors["42001"] != 1 || st.TokenRequests != 2 || st.TokenForceRefreshes != 0 || st.Accepted != 2 {
		t.Errorf("stats %+v: want one 42001, one normal refetch, no forced refresh", st)
	}
}

func TestForcedRefreshElsewhereRecoversWithoutForcing(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
		t.Fatal(err)
	}
	e.platformToken(t, true) // another process forces a refresh

	if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
		t.Fatal(err)
	}
	st := e.sim.Stats()
	if st.Errors["40001"] != 1 || st.TokenRequests != 3 || st.TokenForceRefreshes != 1 {
		t.Errorf("stats %+v: want one 40001, the client's two normal requests and only the other process's forced one", st)
	}
	e.assertNoSecrets(t)
}

func TestConcurrentSendsShareOneRefresh(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
		t.Fatal(err)
	}
	e.platformToken(t, true)
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	st := e.sim.Stats()
	if st.TokenRequests != 3 || st.TokenForceRefreshes != 1 {
		t.Errorf("stats %+v: want one shared normal refetch", st)
	}
}

// TestTokenRejectedTwiceIsNotSent: a send refused for its access token, and refused again with
// the token fetched again (the same, handed out in normal mode) and with the token of a forced
// refresh, took no call of the platform: a NotSentError naming the rejection, so that the
// message's attempts are not spent on the account's token.
func TestTokenRejectedTwiceIsNotSent(t *testing.T) {
	var sends atomic.Int32
	e := newEnv(t, envOptions{wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/template/send") {
				sends.Add(1)
				_, _ = io.WriteString(w, `{"errcode":40001,"errmsg":"invalid credential, access_token is invalid or not latest rid: 1-2-3"}`)
				return
			}
			next.ServeHTTP(w, r)
		})
	}})
	_, err := e.client.SendTemplate(context.Background(), exam(follower, ""))
	var ns *platform.NotSentError
	if !errors.As(err, &ns) || ns.Rejected != 40001 || sends.Load() != 3 {
		t.Fatalf("sends refused for their tokens: %v (%d sends), want a NotSentError of 40001 after three", err, sends.Load())
	}
	if st := e.sim.Stats(); st.TokenForceRefreshes != 1 {
		t.Errorf("stats %+v: want one forced refresh, for the token rejected again once handed out again", st)
	}
	if _, ok := platform.Permanent(err); ok {
		t.Error("a token refused twice classified permanent")
	}
	e.assertNoSecrets(t, err)
}

// TestStubbornTokenIsForcedAtMostOncePerMinute covers a token the platform
// keeps rejecting while normal mode keeps handing it out.
func TestStubbornTokenIsForcedAtMostOncePerMinute(t *testing.T) {
	var poisoned atomic.Value // a token the "platform" rejects with 40001
	poisoned.Store("")
	workerClock := newClock()
	// One clock for both: the platform too refuses a second forced refresh within 30 s.
	e := newEnv(t, envOptions{clientNow: workerClock.Now, simNow: workerClock.Now, wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/template/send") && r.URL.Query().Get("access_token") == poisoned.Load() {
				_, _ = io.WriteString(w, `{"errcode":40001,"errmsg":"invalid credential, access_token is invalid or not latest rid: 1-2-3"}`)
				return
			}
			next.ServeHTTP(w, r)
		})
	}})
	ctx := context.Background()

	poisoned.Store(e.platformToken(t, false))
	if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
		t.Fatalf("first stubborn token: %v", err)
	}
	if st := e.sim.Stats(); st.TokenRequests != 4 || st.TokenForceRefreshes != 1 {
		t.Fatalf("stats %+v: want normal fetch, normal refetch, then one forced refresh", st)
	}

	// The next stubborn token within a minute: no second forced refresh, and no token to send
	// with: nothing was sent.
	poisoned.Store(e.platformToken(t, false))
	_, err := e.client.SendTemplate(ctx, exam(follower, ""))
	if !errors.As(err, new(*platform.NotSentError)) || !strings.Contains(err.Error(), "40001") {
		t.Fatalf("second stubborn token within a minute: %v, want a NotSentError naming the 40001", err)
	}
	if _, ok := platform.Permanent(err); ok {
		t.Error("a persistent token failure classified permanent")
	}
	if st := e.sim.Stats(); st.TokenForceRefreshes != 1 {
		t.Errorf("stats %+v: forced again within a minute", st)
	}

	workerClock.Advance(61 * time.Second)
	if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
		t.Fatalf("after a minute: %v", err)
	}
	if st := e.sim.Stats(); st.TokenForceRefreshes != 2 {
		t.Errorf("stats %+v: want a second forced refresh after a minute", st)
	}
	e.assertNoSecrets(t, err)
}

func TestTokenErrorsAreRetryable(t *testing.T) {
	e := newEnv(t, envOptions{})
	bad, err := platform.New(platform.Config{APIBase: e.srv.URL, AppID: appID, Secret: "wrong-" + secret})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.SendTemplate(context.Background(), exam(follower, ""))
	var pe *platform.Error
	if !errors.As(err, &pe) || pe.Code != 40125 {
		t.Fatalf("error %v, want errcode 40125", err)
	}
	if _, ok := platform.Permanent(err); ok {
		t.Error("a token error classified permanent")
	}
	if strings.Contains(err.Error(), secret) {
		t.Error("the secret appears in the error")
	}
}

func TestContextCancelledWhileWaitingForToken(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	e := newEnv(t, envOptions{wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/stable_token") {
				close(arrived)
				<-release
			}
			next.ServeHTTP(w, r)
		})
	}})
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() {
		_, err := e.client.SendTemplate(ctx, exam(follower, ""))
		started <- err
	}()
	<-arrived // the first send is fetching the token
	waiting := make(chan error, 1)
	go func() {
		_, err := e.client.SendTemplate(context.Background(), exam(follower, ""))
		waiting <- err
	}()
	cancel()
	if err := <-started; !errors.Is(err, context.Canceled) {
		t.Errorf("the send that started the fetch: %v, want context.Canceled", err)
	}
	// The fetch goes on for the other waiter.
	close(release)
	if err := <-waiting; err != nil {
		t.Errorf("the waiting send: %v", err)
	}
	if n := e.sim.Stats().TokenRequests; n != 1 {
		t.Errorf("%d token requests, want 1", n)
	}
}

func TestNoSecretsInLogs(t *testing.T) {
	platformClock, workerClock := newClock(), newClock()
	e := newEnv(t, envOptions{simNow: platformClock.Now, clientNow: workerClock.Now})
	ctx := context.Background()
	var errs []error
	send := func(m platform.TemplateMessage) {
		_, err := e.client.SendTemplate(ctx, m)
		errs = append(errs, err)
	}
	send(exam(follower, "a"))    // first fetch
	send(exam("oStranger", "b")) // permanent error
	e.platformToken(t, true)     // forced elsewhere: 40001, refetch
	send(exam(follower, "c"))    //
	platformClock.Advance(3 * time.Hour)
	send(exam(follower, "d")) // 42001, refetch
	e.sim.SetFaults(simulator.Faults{ServerErrorRate: 1})
	send(exam(follower, "e"))

	if !strings.Contains(e.logs.String(), "fetched the platform access token") {
		t.Fatalf("nothing logged: %s", e.logs.String())
	}
	e.assertNoSecrets(t, errs...)
}

// TestPassingRejectionForcesNoRefresh: two worker processes share the account's token through
// stable_token in normal mode, which never ends another's. The platform rejects one send of
// worker A with 40001 once while the token is current (normal mode hands it out again). A sends
// again with it; worker B, whose token was never rejected, keeps sending with it: no forced
// refresh, which would have ended B's token (and its sends in flight), and spent one of the
// account's 20 a day.
func TestPassingRejectionForcesNoRefresh(t *testing.T) {
	var rejectOnce atomic.Bool
	e := newEnv(t, envOptions{wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/template/send") && rejectOnce.CompareAndSwap(true, false) {
				_, _ = io.WriteString(w, `{"errcode":40001,"errmsg":"invalid credential, access_token is invalid or not latest rid: 1-2-3"}`)
				return
			}
			next.ServeHTTP(w, r)
		})
	}})
	b, err := platform.New(platform.Config{APIBase: e.srv.URL, AppID: appID, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []*platform.Client{e.client, b} {
		if _, err := c.SendTemplate(ctx, exam(follower, "")); err != nil {
			t.Fatal(err)
		}
	}
	rejectOnce.Store(true)
	if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
		t.Fatalf("worker A after one passing rejection: %v", err)
	}
	before := e.sim.Stats().Errors["40001"]
	if _, err := b.SendTemplate(ctx, exam(follower, "")); err != nil {
		t.Fatal(err)
	}
	st := e.sim.Stats()
	if st.TokenForceRefreshes != 0 || st.Errors["40001"] != before {
		t.Errorf("one passing rejection at worker A: %d forced refreshes, and worker B's send refused %d times for its token (stats %+v)",
			st.TokenForceRefreshes, st.Errors["40001"]-before, st)
	}
}

// TestPassingRejectionsApartForceNoRefresh: a token rejected once and handed out again stays
// known as such; a second passing rejection half an hour later, after sends that passed with
// it, is checked in normal mode again, not taken for a stubborn token: no forced refresh.
func TestPassingRejectionsApartForceNoRefresh(t *testing.T) {
	var rejectOnce atomic.Bool
	clock := newClock()
	e := newEnv(t, envOptions{clientNow: clock.Now, simNow: clock.Now, wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/template/send") && rejectOnce.CompareAndSwap(true, false) {
				_, _ = io.WriteString(w, `{"errcode":40001,"errmsg":"invalid credential, access_token is invalid or not latest rid: 1-2-3"}`)
				return
			}
			next.ServeHTTP(w, r)
		})
	}})
	ctx := context.Background()
	if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		rejectOnce.Store(true)
		if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
			t.Fatalf("passing rejection %d: %v", round+1, err)
		}
		for range 3 { // half an hour of sends that pass, with the same token
			clock.Advance(10 * time.Minute)
			if _, err := e.client.SendTemplate(ctx, exam(follower, "")); err != nil {
				t.Fatal(err)
			}
		}
		if st := e.sim.Stats(); st.TokenForceRefreshes != 0 {
			t.Fatalf("stats %+v: forced after passing rejection %d", st, round+1)
		}
	}
}
