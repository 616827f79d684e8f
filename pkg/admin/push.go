package admin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/store"
)

func pushCommand() *command {
	return &command{
		name:    "push",
		summary: "Send a test message to a user and follow it to its final state.",
		sub:     []*command{pushTest()},
	}
}

// TestClientPrefix begins the id of the client push test registers for one run.
const TestClientPrefix = "admin-push-test-"

// pushTrace is the answer of push test.
type pushTrace struct {
	UcsID  string `json:"ucsId"`
	UserID string `json:"userId"`
	// State is the last state seen: delivered or failed when the push finished in time.
	State  string      `json:"state"`
	Reason string      `json:"reason,omitempty"`
	MsgID  string      `json:"msgId,omitempty"`
	States []pushState `json:"states"`
	// Seconds from the push's acceptance to its last state.
	Seconds float64 `json:"seconds"`
	// Error says why the trace ended before a final state (the timeout, a failed lookup), so
	// that --json answers one document.
	Error string `json:"error,omitempty"`
}

type pushState struct {
	State     string  `json:"state"`
	LastError string  `json:"lastError,omitempty"`
	AfterSecs float64 `json:"after"`
}

func pushTest() *command {
	var (
		baseURL, clientID string
		timeout           time.Duration
	)
	return &command{
		name: "test", args: "USERID", nargs: 1,
		summary: "Push a test to-do message to USERID through the front end, and follow it until delivered or failed.",
		help: fmt.Sprintf(`
The message takes the path every application's does: a token from the token endpoint (client
credentials), the push endpoint, the queue, a worker, the platform, its delivery receipt, and the
result lookup, which is polled until the state is final. Each state is shown as it is seen.

By default the command registers a client of its own for the run (%s…, scope
notification.mp, its secret never leaving this process), waits the %s the front ends take to
see it, and deletes it at the end. With -client ID it uses that client instead, whose secret it
reads from the environment variable UCS_CLIENT_SECRET (never a flag: flags show in process lists).

The exit code is 0 when the message was delivered, 1 when it failed or was not final in time.`,
			TestClientPrefix, oauth.ClientsReload),
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&baseURL, "url", "", "the front end's address (default: public_url of -config, base_url of -data)")
			fs.StringVar(&clientID, "client", "", "push as this client (secret in UCS_CLIENT_SECRET) rather than a client registered for the run")
			fs.DurationVar(&timeout, "timeout", 2*time.Minute, "how long to follow the message before giving up")
		},
		run: func(ctx context.Context, a *app, args []string) error {
			userID := args[0]
			if reason := checkBinding(userID, "x"); reason != "" {
				return usagef("USERID: %s", strings.TrimPrefix(reason, "userid: "))
			}
			secret := ""
			if clientID != "" {
				if secret = a.env.Getenv("UCS_CLIENT_SECRET"); secret == "" {
					return usagef("-client %s: put its secret in the environment variable UCS_CLIENT_SECRET", clientID)
				}
			}
			st, err := a.open(ctx)
			if err != nil {
				return err
			}
			if baseURL != "" {
				a.baseURL = strings.TrimRight(baseURL, "/")
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			p := &pusher{a: a, base: a.baseURL, clientID: clientID, secret: secret}
			if clientID == "" {
				cleanup, err := p.registerClient(ctx, st)
				if err != nil {
					return err
				}
				defer cleanup()
			}
			return p.run(ctx, userID)
		},
	}
}

// pusher is one run of push test.
type pusher struct {
	a                *app
	base             string
	clientID, secret string
	token            string
}

func (p *pusher) say(format string, args ...any) {
	if !p.a.json {
		fmt.Fprintf(p.a.env.Stdout, format+"\n", args...)
	}
}

// registerClient registers a client for this run and returns what removes it.
func (p *pusher) registerClient(ctx context.Context, st *store.Store) (func(), error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	p.clientID, p.secret = TestClientPrefix+hex.EncodeToString(b[:]), newSecret()
	err := st.CreateClient(ctx, store.Client{
		ID: p.clientID, SecretSHA256: secretHash(p.secret), Grants: []string{oauth.GrantClientCredentials},
		Scopes: []string{oauth.ScopeNotificationMP}, AccessTokenTTL: 300, Source: store.SourceAdmin,
	})
	if err != nil {
		return nil, fmt.Errorf("register the test client: %w", err)
	}
	p.say("Registered client %s for this test; it is deleted at the end.", p.clientID)
	return func() {
		// Removed even when the run was interrupted: its context is over by then.
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := st.DeleteClient(dctx, p.clientID); err != nil && !errors.Is(err, store.ErrNotFound) {
			fmt.Fprintf(p.a.env.Stderr, "warning: the test client %s could not be deleted: %v (api admin clients delete %s)\n", p.clientID, err, p.clientID)
		}
	}, nil
}

func (p *pusher) run(ctx context.Context, userID string) error {
	if err := p.getToken(ctx); err != nil {
		return err
	}
	ucsID, err := p.push(ctx, userID)
	if err != nil {
		return err
	}
	p.say("Pushed a test message to %s: ucsId %s", userID, ucsID)
	tr, err := p.follow(ctx, ucsID, userID)
	if tr != nil {
		if err != nil {
			tr.Error = err.Error()
		}
		p.a.out(tr, func(w io.Writer) {
			switch tr.State {
			case "delivered":
				fmt.Fprintf(w, "Delivered to %s %.1fs after it was accepted.\n", userID, tr.Seconds)
			case "failed":
				fmt.Fprintf(w, "Failed: %s\n", tr.Reason)
			}
		})
	}
	if err != nil && tr != nil {
		fmt.Fprintln(p.a.env.Stderr, "error:", err)
		return errReported // written with the trace
	}
	if err != nil {
		return err
	}
	if tr.State != "delivered" {
		return errReported
	}
	return nil
}

// getToken gets a token with client credentials. A client registered for this run is known to
// the front ends only after their next reload: the first request waits for that, and a refusal
// is asked again a little later. The retries are spaced by more than the brute-force detection's
// quick-failure window (oauth.brute_force.quick_login_check, 1 s), so that they never block this
// machine's address.
func (p *pusher) getToken(ctx context.Context) error {
	registered := p.clientID != "" && strings.HasPrefix(p.clientID, TestClientPrefix)
	if registered {
		p.say("Waiting %s for the front ends to see it…", oauth.ClientsReload)
		if err := wait(ctx, oauth.ClientsReload+200*time.Millisecond); err != nil {
			return err
		}
	}
	for attempt := 1; ; attempt++ {
		tok, status, err := p.tokenOnce(ctx)
		if err == nil {
			p.token = tok
			return nil
		}
		if !registered || status != http.StatusUnauthorized || attempt == 4 {
			return err
		}
		if err := wait(ctx, 1500*time.Millisecond); err != nil {
			return err
		}
	}
}

func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (p *pusher) tokenOnce(ctx context.Context) (string, int, error) {
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {p.clientID}, "client_secret": {p.secret}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+"/v1/token", strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	var out struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	status, err := p.do(req, &out)
	if err != nil {
		return "", status, fmt.Errorf("token endpoint: %w", err)
	}
	if status != http.StatusOK || out.AccessToken == "" {
		return "", status, fmt.Errorf("token endpoint answered %d %s: %s", status, out.Error, out.Description)
	}
	return out.AccessToken, status, nil
}

// do sends req and decodes its JSON answer into out; it returns the status.
func (p *pusher) do(req *http.Request, out any) (int, error) {
	resp, err := p.a.env.HTTPClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return resp.StatusCode, fmt.Errorf("answer %d is not JSON: %.200s", resp.StatusCode, b)
	}
	return resp.StatusCode, nil
}

// envelope is the data interfaces' answer.
type envelope[T any] struct {
	Data T      `json:"data"`
	Code string `json:"code"`
	Msg  string `json:"msg"`
}

func (p *pusher) push(ctx context.Context, userID string) (string, error) {
	body, _ := json.Marshal(map[string]any{
		"userId": userID, "type": "TDL",
		"data": map[string]string{
			"header": "测试消息", "type": "运维测试", "list": "推送检查", "step": "送达确认",
			"content": "这是一条测试消息无需处理", "remark": "由 api admin push test 发送",
		},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+"/v1/infra/notification/mp", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+p.token)
	var out envelope[struct {
		UcsID string `json:"ucsId"`
	}]
	status, err := p.do(req, &out)
	if err != nil {
		return "", fmt.Errorf("push endpoint: %w", err)
	}
	if status != http.StatusOK || out.Code != "A00000" || out.Data.UcsID == "" {
		return "", fmt.Errorf("push endpoint answered %d %s: %s", status, out.Code, out.Msg)
	}
	return out.Data.UcsID, nil
}

type result struct {
	State     string `json:"state"`
	Reason    string `json:"reason"`
	LastError string `json:"lastError"`
	MsgID     string `json:"msgId"`
}

// follow polls the result lookup until the push's state is final or ctx ends, and shows each
// state as it first sees it.
func (p *pusher) follow(ctx context.Context, ucsID, userID string) (*pushTrace, error) {
	t0 := time.Now()
	tr := &pushTrace{UcsID: ucsID, UserID: userID, States: []pushState{}}
	last := ""
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/v1/infra/notification/mp/"+url.PathEscape(ucsID), nil)
		if err != nil {
			return tr, err
		}
		req.Header.Set("Authorization", "Bearer "+p.token)
		var out envelope[result]
		status, err := p.do(req, &out)
		switch {
		case ctx.Err() != nil:
			return tr, fmt.Errorf("%s is %s, not final after the timeout", ucsID, orNone(tr.State))
		case err != nil:
			return tr, fmt.Errorf("result lookup: %w", err)
		case status == http.StatusServiceUnavailable:
			// The store is away for a moment; the lookup says to ask again.
		case status != http.StatusOK:
			return tr, fmt.Errorf("result lookup answered %d %s: %s", status, out.Code, out.Msg)
		default:
			r := out.Data
			tr.State, tr.Reason, tr.MsgID = r.State, r.Reason, r.MsgID
			tr.Seconds = time.Since(t0).Seconds()
			if key := r.State + "|" + r.LastError; key != last {
				last = key
				tr.States = append(tr.States, pushState{State: r.State, LastError: r.LastError, AfterSecs: tr.Seconds})
				line := fmt.Sprintf("  %6.2fs  %s", tr.Seconds, r.State)
				switch {
				case r.MsgID != "" && r.State == "sent":
					line += " (the platform's msgId " + r.MsgID + ")"
				case r.LastError != "":
					line += " (last error: " + r.LastError + "; retrying)"
				}
				p.say("%s", line)
			}
			if r.State == "delivered" || r.State == "failed" {
				return tr, nil
			}
		}
		// Often at first, to show the states a delivery passes through quickly; then less.
		every := 50 * time.Millisecond
		if time.Since(t0) > 3*time.Second {
			every = 250 * time.Millisecond
		}
		if err := wait(ctx, every); err != nil {
			return tr, fmt.Errorf("%s is %s, not final after the timeout", ucsID, orNone(tr.State))
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
