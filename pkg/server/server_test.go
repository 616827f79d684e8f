package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/service"
	"github.com/campus-it/ucs/pkg/store"
)

const (
	pushSecret = "push-client-secret-0001"
	fakeSecret = "fake-client-secret-0001"
	userSecret = "user-client-secret-0001"
	cbToken    = "callbacktoken"
)

type env struct {
	t     testing.TB
	url   string
	api   *service.API
	js    jetstream.JetStream
	nats  *embedded.NATS
	clock *clocktest.Clock
	cfg   *config.Config
	// stopKept stops the front end's application of kept platform events (once).
	stopKept func()
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvWith(t, nil)
}

// newEnvWith is newEnv with the configuration changed by mod before the service starts.
// newEnvStoreBehindProxy is newEnv with MongoDB reached through a proxy, which the test may
// cut (the store down).
func newEnvStoreBehindProxy(t testing.TB) (*env, *embeddedtest.Proxy) {
	t.Helper()
	var proxy *embeddedtest.Proxy
	e := newEnvWith(t, func(c *config.Config) {
		host := strings.TrimSuffix(strings.TrimPrefix(c.MongoDB.URI, "mongodb://"), "/")
		host, _, _ = strings.Cut(host, "/")
		proxy = embeddedtest.NewProxy(t, host)
		c.MongoDB.URI = strings.Replace(c.MongoDB.URI, host, proxy.Addr(), 1)
	})
	return e, proxy
}

func newEnvWith(t testing.TB, mod func(*config.Config)) *env {
	t.Helper()
	return newEnvLogged(t, mod, nil)
}

// newEnvLogged is newEnvWith with the service logging to logger (nil: nowhere).
func newEnvLogged(t testing.TB, mod func(*config.Config), logger *slog.Logger) *env {
	t.Helper()
	return newEnvDeps(t, mod, service.Deps{Logger: logger})
}

// newEnvDeps is newEnvWith with the service's dependencies d (its clock is the env's).
func newEnvDeps(t testing.TB, mod func(*config.Config), d service.Deps) *env {
	t.Helper()
	n, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	f := embeddedtest.FerretDB(t)
	clk := clocktest.New(time.Now().Truncate(time.Second))
	cfg := &config.Config{
		NATS:    config.NATS{URL: n.URL()},
		MongoDB: config.MongoDB{URI: f.URI(), Database: embeddedtest.DBName(t)},
		OAuth: config.OAuth{Clients: []config.Client{
			{ClientID: "pusher", ClientSecret: pushSecret, Grants: []string{"client_credentials"}, Scopes: []string{"notification.mp", "openid"}},
			{ClientID: "other", ClientSecret: pushSecret, Grants: []string{"client_credentials"}, Scopes: []string{"notification.mp"}},
			{ClientID: "fake-api-test", ClientSecret: fakeSecret, Grants: []string{"client_credentials"}, Scopes: []string{"fake_api"}},
			{ClientID: "webapp", ClientSecret: userSecret, Grants: []string{"authorization_code"}, Scopes: []string{"openid"},
				RedirectURIs: []string{"https://app.example.edu/cb"}},
		}},
		Bindings: []config.Binding{{UserID: "2020000001", OpenID: "oA"}},
		Platform: config.Platform{CallbackToken: cbToken},
	}
	cfg.Defaults()
	if mod != nil {
		mod(cfg)
	}
	if err := cfg.Validate(config.RoleAPI); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d.Now = clk.Now
	api, err := service.NewAPI(ctx, cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	if err := f.IndexIDs(ctx, cfg.MongoDB.Database); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(api.Server)
	t.Cleanup(ts.Close)
	// What Serve runs beside the server: kept platform events are applied.
	kctx, cancelKept := context.WithCancel(ctx)
	kept := make(chan struct{})
	go func() { defer close(kept); _ = api.ApplyKeptEvents(kctx) }()
	stopKept := func() { cancelKept(); <-kept }
	t.Cleanup(stopKept)
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	return &env{t: t, url: ts.URL, api: api, js: js, nats: n, clock: clk, cfg: cfg, stopKept: stopKept}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("body %q: %v", a.body, err)
	}
	return m
}

func (e *env) do(method, path, contentType, auth string, body string) answer {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

const form = "application/x-www-form-urlencoded"

func (e *env) token(id, secret string) string {
	e.t.Helper()
	a := e.do("POST", "/v1/token", form, "", url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}.Encode())
	if a.status != 200 {
		e.t.Fatalf("token: %d %s", a.status, a.body)
	}
	return "Bearer " + a.json(e.t)["access_token"].(string)
}

func (e *env) streamMsgs() uint64 {
	e.t.Helper()
	return e.streamMsgsOf(e.cfg.NATS.Stream)
}

// streamMsgsOf counts the messages of stream name.
func (e *env) streamMsgsOf(name string) uint64 {
	e.t.Helper()
	st, err := e.js.Stream(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

// streamPushes counts the pushes the push stream holds: one message each.
func (e *env) streamPushes() int {
	e.t.Helper()
	return int(e.streamMsgs())
}

func TestClientCredentialsToken(t *testing.T) {
	e := newEnv(t)
	a := e.do("POST", "/v1/token", form, "", "grant_type=client_credentials&client_id=pusher&client_secret="+pushSecret)
	if a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	m := a.json(t)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if got := strings.Join(keys, ","); got != "access_token,expires_in,not-before-policy,refresh_expires_in,scope,token_type" {
		t.Fatalf("fields: %s", got)
	}
	if m["expires_in"] != 7200.0 || m["token_type"] != "Bearer" || m["not-before-policy"] != 0.0 ||
		m["refresh_expires_in"] != 0.0 || m["scope"] != "notification.mp" {
		t.Fatalf("answer %v", m)
	}
	if a.header.Get("Cache-Control") != "no-store" {
		t.Fatal("token answer may be cached")
	}
	// The claims, and the key that signed them, as a relying party sees them.
	jwks := e.do("GET", "/auth/realms/campus/protocol/openid-connect/certs", "", "", "")
	var set struct {
		Keys []struct{ Kid, Kty, Alg, Crv, X, Y string }
	}
	// Two keys: ES256 signs access tokens, RS256 the ID tokens of clients that choose nothing.
	if err := json.Unmarshal(jwks.body, &set); err != nil || len(set.Keys) != 2 || set.Keys[0].Kty != "EC" || set.Keys[1].Kty != "RSA" {
		t.Fatalf("jwks %s %v", jwks.body, err)
	}
	tok, err := jwt.Parse(m["access_token"].(string), func(tk *jwt.Token) (any, error) {
		k := set.Keys[0]
		if tk.Header["kid"] != k.Kid {
			return nil, fmt.Errorf("kid %v not in jwks", tk.Header["kid"])
		}
		x, _ := base64.RawURLEncoding.DecodeString(k.X)
		y, _ := base64.RawURLEncoding.DecodeString(k.Y)
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		return pub, err
	}, jwt.WithValidMethods([]string{"ES256"}), jwt.WithTimeFunc(e.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	c := tok.Claims.(jwt.MapClaims)
	if c["iss"] != e.url[:0]+e.cfg.PublicURL+"/auth/realms/campus" || c["azp"] != "pusher" || c["sub"] != "service-account-pusher" ||
		c["typ"] != "Bearer" || c["grant_type"] != "client_credentials" || c["scope"] != "notification.mp" || c["jti"] == "" {
		t.Fatalf("claims %v", c)
	}
	if c["exp"].(float64)-c["iat"].(float64) != 7200 {
		t.Fatalf("lifetime %v", c["exp"].(float64)-c["iat"].(float64))
	}
}

func TestTokenBasicAuthAndSeveralValid(t *testing.T) {
	e := newEnv(t)
	req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/token", strings.NewReader("grant_type=client_credentials&scope=notification.mp"))
	req.Header.Set("Content-Type", form)
	req.SetBasicAuth("pusher", pushSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		AccessToken string `json:"access_token"`
		Scope       string
	}
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || tr.Scope != "notification.mp" {
		t.Fatalf("basic: %d %+v", resp.StatusCode, tr)
	}
	t2 := e.token("pusher", pushSecret)
	for _, tok := range []string{"Bearer " + tr.AccessToken, t2} {
		a := e.do("GET", "/v1/infra/notification/mp/"+push.NewID(time.Now()), "", tok, "")
		if a.status != 404 {
			t.Fatalf("a token of several stopped working: %d %s", a.status, a.body)
		}
	}
}

func TestTokenErrors(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name, ctype, body string
		status            int
		code              string
	}{
		{"no grant_type", form, "client_id=pusher&client_secret=" + pushSecret, 400, "invalid_request"},
		{"wrong secret", form, "grant_type=client_credentials&client_id=pusher&client_secret=nope", 401, "invalid_client"},
		{"unknown client", form, "grant_type=client_credentials&client_id=ghost&client_secret=" + pushSecret, 401, "invalid_client"},
		{"no credentials", form, "grant_type=client_credentials", 401, "invalid_client"},
		{"password grant", form, "grant_type=password&client_id=pusher&client_secret=" + pushSecret + "&username=a&password=b", 400, "unsupported_grant_type"},
		{"unknown grant", form, "grant_type=magic&client_id=pusher&client_secret=" + pushSecret, 400, "unsupported_grant_type"},
		{"grant not allowed", form, "grant_type=client_credentials&client_id=webapp&client_secret=" + userSecret, 400, "unauthorized_client"},
		{"scope not allowed", form, "grant_type=client_credentials&client_id=pusher&client_secret=" + pushSecret + "&scope=fake_api", 400, "invalid_scope"},
		{"json body", "application/json", `{"grant_type":"client_credentials"}`, 400, "invalid_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := e.do("POST", "/v1/token", c.ctype, "", c.body)
			m := a.json(t)
			if a.status != c.status || m["error"] != c.code || m["error_description"] == "" {
				t.Fatalf("%d %s", a.status, a.body)
			}
			if strings.Contains(string(a.body), pushSecret) {
				t.Fatal("secret echoed")
			}
		})
	}
}

func TestBearerRefusals(t *testing.T) {
	e := newEnv(t)
	fake := e.token("fake-api-test", fakeSecret)
	pusher := e.token("pusher", pushSecret)
	// A token signed by a key the service does not hold.
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	forged := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": e.cfg.PublicURL + "/auth/realms/campus", "azp": "pusher", "scope": "notification.mp", "typ": "Bearer",
		"grant_type": "client_credentials", "exp": e.clock.Now().Add(time.Hour).Unix(), "iat": e.clock.Now().Unix(),
	})
	forged.Header["kid"] = "made-up"
	forgedTok, _ := forged.SignedString(k)
	// alg none, with the claims of a real token.
	parts := strings.Split(strings.TrimPrefix(pusher, "Bearer "), ".")
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	cases := []struct {
		name, auth, wantErr string
	}{
		{"no token", "", ""},
		{"not bearer", "Basic abc", "invalid_request"},
		{"garbage", "Bearer abc.def.ghi", "invalid_token"},
		{"forged", "Bearer " + forgedTok, "invalid_token"},
		{"alg none", "Bearer " + none, "invalid_token"},
		{"wrong scope", fake, "insufficient_scope"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := e.do("POST", "/v1/infra/notification/mp", "application/json", c.auth, `{}`)
			h := a.header.Get("WWW-Authenticate")
			if a.status != 401 || !strings.HasPrefix(h, `Bearer realm="campus"`) {
				t.Fatalf("%d %q %s", a.status, h, a.body)
			}
			if c.wantErr == "" && strings.Contains(h, "error=") || c.wantErr != "" && !strings.Contains(h, `error="`+c.wantErr+`"`) {
				t.Fatalf("WWW-Authenticate %q", h)
			}
			if m := a.json(t); m["code"] != "A00401" {
				t.Fatalf("envelope %v", m)
			}
		})
	}
	// Expiry: the same token, cached as verified, is refused once its time is up.
	if a := e.do("GET", "/v1/fake_api/user", "", fake, ""); a.status != 200 {
		t.Fatalf("fresh token: %d %s", a.status, a.body)
	}
	e.clock.Advance(7201 * time.Second)
	a := e.do("GET", "/v1/fake_api/user", "", fake, "")
	if a.status != 401 || !strings.Contains(a.header.Get("WWW-Authenticate"), `error="invalid_token", error_description="the access token expired"`) {
		t.Fatalf("expired: %d %q", a.status, a.header.Get("WWW-Authenticate"))
	}
}

func TestFakeAPIUser(t *testing.T) {
	e := newEnv(t)
	a := e.do("GET", "/v1/fake_api/user", "", e.token("fake-api-test", fakeSecret), "")
	m := a.json(t)
	d, _ := m["data"].(map[string]any)
	if a.status != 200 || m["code"] != "A00000" || d["clientId"] != "fake-api-test" || d["scope"] != "fake_api" || d["grantType"] != "client_credentials" {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if a := e.do("GET", "/v1/fake_api/user", "", e.token("pusher", pushSecret), ""); a.status != 401 {
		t.Fatalf("a token without fake_api: %d", a.status)
	}
}

var envelopeTime = regexp.MustCompile(`^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}$`)

const goodBody = `{"userId":"2020000001","type":"TDL","url":"https://oa.example.edu/todo/1","time":"1767225600",
 "data":{"header":"您有一条待办","type":"请假审批","list":"学生请假","step":"辅导员审批","content":"张三的请假申请待您审批","remark":"请尽快处理"}}`

func TestPushAcceptedAndQueued(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	a := e.do("POST", "/v1/infra/notification/mp", "application/json; charset=utf-8", tok, goodBody)
	m := a.json(t)
	if a.status != 200 || m["code"] != "A00000" || m["msg"] != "success" {
		t.Fatalf("%d %s", a.status, a.body)
	}
	ts, _ := m["time"].(string)
	sh, _ := time.LoadLocation("Asia/Shanghai")
	if !envelopeTime.MatchString(ts) || ts != e.clock.Now().In(sh).Format("2006-01-02 15:04:05.000") {
		t.Fatalf("time %q", ts)
	}
	id := m["data"].(map[string]any)["ucsId"].(string)
	if !push.ValidID(id) {
		t.Fatalf("ucsId %q", id)
	}
	// In the stream, as published, under its client's subject of its ucsId.
	st, _ := e.js.Stream(context.Background(), e.cfg.NATS.Stream)
	raw, err := st.GetLastMsgForSubject(context.Background(), "ucs.push.mp.pusher."+id)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := push.DecodeMessage(raw.Data)
	if err != nil || msg.UcsID != id || msg.ClientID != "pusher" || msg.UserID != "2020000001" || msg.Data["content"] != "张三的请假申请待您审批" || msg.Time != 1767225600000 {
		t.Fatalf("message %+v %v", msg, err)
	}
	// Visible at once as queued, to its client only.
	a = e.do("GET", "/v1/infra/notification/mp/"+id, "", tok, "")
	m = a.json(t)
	d, _ := m["data"].(map[string]any)
	if a.status != 200 || d["state"] != "queued" || d["ucsId"] != id || d["type"] != "TDL" || d["attempts"] != 0.0 {
		t.Fatalf("lookup %d %s", a.status, a.body)
	}
	other := e.token("other", pushSecret)
	if a := e.do("GET", "/v1/infra/notification/mp/"+id, "", other, ""); a.status != 404 || a.json(t)["code"] != "A00404" {
		t.Fatalf("another client saw it: %d %s", a.status, a.body)
	}
	for _, bad := range []string{"nope", push.NewID(time.Now()), "../../etc"} {
		if a := e.do("GET", "/v1/infra/notification/mp/"+url.PathEscape(bad), "", tok, ""); a.status != 404 {
			t.Fatalf("%s: %d", bad, a.status)
		}
	}
}

// TestPushTakesNullAsNotGiven: a JSON writer that puts null for a member not set (Jackson's
// and Json.NET's default, a Go *string) writes null for url, time and the optional header and
// remark: each is taken as not given, and the push queued without them.
func TestPushTakesNullAsNotGiven(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	body := `{"userId":"2020000001","type":"TDL","url":null,"time":null,"data":{"header":null,"type":"请假审批","list":"学生请假","step":"辅导员审批","content":"张三的请假申请待您审批","remark":null}}`
	a := e.do("POST", "/v1/infra/notification/mp", "application/json", tok, body)
	if a.status != 200 {
		t.Fatalf("null url, time, header and remark: %d %s", a.status, a.body)
	}
	id := a.json(t)["data"].(map[string]any)["ucsId"].(string)
	st, _ := e.js.Stream(context.Background(), e.cfg.NATS.Stream)
	raw, err := st.GetLastMsgForSubject(context.Background(), "ucs.push.mp.pusher."+id)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := push.DecodeMessage(raw.Data)
	if err != nil || len(msg.Data) != 4 || msg.URL != "" || msg.Time != 0 {
		t.Fatalf("queued %+v %v; want the four main items and nothing else", msg, err)
	}
}

func TestPushRefusedChangesNothing(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	cases := []struct {
		name, ctype, body string
		status            int
		msg               string
	}{
		{"long content", "application/json", `{"userId":"2020000001","type":"TDL","data":{"type":"a","list":"b","step":"c","content":"一二三四五六七八九十一二三四五六七八九十一二三"}}`,
			400, "data.content: 23 characters, at most 20"},
		{"emoji and line break", "application/json", `{"userId":"2020000001","type":"WR","data":{"title":"会议😀","date":"今天","content":"第一行\n第二行"}}`,
			400, "data.title: contains emoji; data.content: contains a line break"},
		{"unknown type", "application/json", `{"userId":"2020000001","type":"XYZ","data":{}}`,
			400, `type: "XYZ" is not one of TDL, EN, JML, WR, JDS, FWR, MDAN, AR, OPPAN`},
		{"missing everything", "application/json", `{}`, 400, "userId: required"},
		{"not json", "application/json", `{"userId":`, 400, "body: not valid JSON"},
		{"javascript url", "application/json", `{"userId":"2020000001","type":"JML","url":"javascript:alert(1)","data":{"class":"a","info":"b"}}`,
			400, "url: must be an absolute http or https URL"},
		{"wrong content type", "text/plain", goodBody, 415, "Content-Type must be application/json"},
		{"too large", "application/json", `{"userId":"` + strings.Repeat("1", push.MaxBodyBytes) + `"}`, 413, "body: larger than 65536 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := e.do("POST", "/v1/infra/notification/mp", c.ctype, tok, c.body)
			m := a.json(t)
			msg, _ := m["msg"].(string)
			if a.status != c.status || !strings.Contains(msg, c.msg) || m["data"] != nil || m["code"] == "A00000" {
				t.Fatalf("%d %s", a.status, a.body)
			}
		})
	}
	if n := e.streamMsgs(); n != 0 {
		t.Fatalf("refused pushes published %d messages", n)
	}
}

func TestPushWhenQueueIsDown(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	e.nats.Shutdown()
	a := e.do("POST", "/v1/infra/notification/mp", "application/json", tok, goodBody)
	m := a.json(t)
	if a.status != 503 || m["code"] != "A00503" || m["data"] != nil || a.header.Get("Retry-After") == "" {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if strings.Contains(string(a.body), "nats") {
		t.Fatalf("internal error text reached the client: %s", a.body)
	}
}

func sign(token, ts, nonce string) string {
	p := []string{token, ts, nonce}
	sort.Strings(p)
	s := sha1.Sum([]byte(strings.Join(p, "")))
	return hex.EncodeToString(s[:])
}

func TestCallback(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ts := strconv.FormatInt(e.clock.Now().Unix(), 10)
	// Each request its own nonce: a (timestamp, nonce) pair is accepted once.
	var n int
	q := func(token string) string {
		n++
		nonce := "n" + strconv.Itoa(n)
		return "signature=" + sign(token, ts, nonce) + "&timestamp=" + ts + "&nonce=" + nonce
	}
	a := e.do("GET", "/v1/infra/notification/mp/callback?"+q(cbToken)+"&echostr=hello", "", "", "")
	if a.status != 200 || string(a.body) != "hello" {
		t.Fatalf("verify: %d %s", a.status, a.body)
	}
	if a := e.do("GET", "/v1/infra/notification/mp/callback?"+q("wrong")+"&echostr=hello", "", "", ""); a.status != 401 {
		t.Fatalf("bad signature: %d", a.status)
	}
	// A sent message, then the platform's final report on it.
	st := e.api.Store
	w := st.NewWriter(store.WriterOptions{})
	defer w.Close()
	const id = "01KAAAAAAAAAAAAAAAAAAAAAAA"
	now := e.clock.Now()
	sent := push.Result{UcsID: id, ClientID: "pusher", State: push.StateSent, Attempts: 1, MsgID: 555, Accepted: now, Updated: now, Sent: now}
	if err := w.Write(ctx, store.SentRecords(sent, "oA", now)...); err != nil {
		t.Fatal(err)
	}
	receipt := func(openID string, msgID int64) string { return receiptEvent(openID, msgID, simulator.StatusUserBlock) }
	finish := receipt("oA", 555)
	if a := e.do("POST", "/v1/infra/notification/mp/callback?"+q("wrong"), "text/xml", "", finish); a.status != 401 {
		t.Fatalf("bad signature accepted: %d", a.status)
	}
	stale := strconv.FormatInt(e.clock.Now().Add(-time.Hour).Unix(), 10)
	if a := e.do("POST", "/v1/infra/notification/mp/callback?signature="+sign(cbToken, stale, "n")+"&timestamp="+stale+"&nonce=n", "text/xml", "", finish); a.status != 401 {
		t.Fatalf("replayed old push accepted: %d", a.status)
	}
	// A receipt naming another follower than the message went to is answered, and ignored.
	if a := e.do("POST", "/v1/infra/notification/mp/callback?"+q(cbToken), "text/xml", "", receipt("oEvil", 555)); a.status != 200 {
		t.Fatalf("receipt of another follower: %d %s", a.status, a.body)
	}
	// A receipt for a msgid this service never sent is answered (the platform would only push
	// it again), waits for its msgid, and stores nothing that a later message with that msgid
	// could pick up.
	if a := e.do("POST", "/v1/infra/notification/mp/callback?"+q(cbToken), "text/xml", "", receipt("oA", 556)); a.status != 200 {
		t.Fatalf("receipt of an unknown msgid: %d %s", a.status, a.body)
	}
	e.applied(1)
	if _, _, err := st.SentByMsgID(ctx, 556); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown msgid recorded: %v", err)
	}
	if r, _ := st.Current(ctx, id); r.State != push.StateSent {
		t.Fatalf("an ignored callback changed the result: %s", r.State)
	}
	if a := e.do("POST", "/v1/infra/notification/mp/callback?"+q(cbToken), "text/xml", "", finish); a.status != 200 || string(a.body) != "success" {
		t.Fatalf("finish: %d %s", a.status, a.body)
	}
	e.applied(1)
	tok := e.token("pusher", pushSecret)
	a = e.do("GET", "/v1/infra/notification/mp/"+id, "", tok, "")
	d, _ := a.json(t)["data"].(map[string]any)
	if d["state"] != "failed" || d["reason"] != "failed:user block" || d["msgId"] != "555" {
		t.Fatalf("after finish: %s", a.body)
	}
	unsub := `<xml><ToUserName>gh_1</ToUserName><FromUserName>oA</FromUserName><CreateTime>` + ts + `</CreateTime><MsgType>event</MsgType><Event>unsubscribe</Event></xml>`
	if a := e.do("POST", "/v1/infra/notification/mp/callback?"+q(cbToken), "text/xml", "", unsub); a.status != 200 {
		t.Fatalf("unsubscribe: %d %s", a.status, a.body)
	}
	e.applied(1)
	if b, _ := st.Binding(ctx, "2020000001"); b.Following {
		t.Fatal("unsubscribe did not mark the binding")
	}
	if a := e.do("POST", "/v1/infra/notification/mp/callback?"+q(cbToken), "text/xml", "", "<xml><oops"); a.status != 400 {
		t.Fatalf("broken xml: %d", a.status)
	}
}

func TestMetaTypesNeedsNoToken(t *testing.T) {
	e := newEnv(t)
	a := e.do("GET", "/v1/meta/notification/mp/types", "", "", "")
	var m struct {
		Code string
		Data struct {
			Types []struct {
				Type   string
				Fields []struct {
					Name     string
					Main     bool
					MaxChars int
				}
			}
		}
	}
	if err := json.Unmarshal(a.body, &m); err != nil || a.status != 200 || m.Code != "A00000" || len(m.Data.Types) != 9 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if m.Data.Types[0].Type != "TDL" || len(m.Data.Types[0].Fields) != 6 {
		t.Fatalf("TDL: %+v", m.Data.Types[0])
	}
	// Every class of characters the platform refuses, with what the service does about it.
	var chars struct {
		Data struct {
			Characters []struct{ Class, Treatment, DescZH, DescEN string }
		}
	}
	if err := json.Unmarshal(a.body, &chars); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range chars.Data.Characters {
		if c.DescZH == "" || c.DescEN == "" {
			t.Errorf("class %s is not described", c.Class)
		}
		got[c.Class] = c.Treatment
	}
	want := map[string]string{"line_break": "refuse", "control": "refuse", "space": "space", "invisible": "remove",
		"format": "refuse", "private_use": "refuse", "not_a_character": "refuse"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("characters %v, want %v", got, want)
	}
	if a := e.do("GET", "/v1/meta/notification/mp/schema", "", "", ""); a.status != 200 || !strings.Contains(string(a.body), "OPPAN") {
		t.Fatalf("schema %d", a.status)
	}
	if a := e.do("GET", "/v1/nothing", "", "", ""); a.status != 404 || a.json(t)["code"] != "A00404" {
		t.Fatalf("unknown path: %d %s", a.status, a.body)
	}
}

// TestQueuedVisibleBehindBacklog: with thousands of messages waiting for workers, a push just
// answered is readable by its ucsId as queued. The queued record is written before the answer,
// so the very next request sees it: no waiting, however long the backlog.
func TestQueuedVisibleBehindBacklog(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	body := `{"userId":"2020000001","type":"JML","data":{"class":"高等数学","info":"第三章作业"}}`
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 375 {
				if a := e.do("POST", "/v1/infra/notification/mp", "application/json", tok, body); a.status != 200 {
					t.Errorf("backlog push: %d", a.status)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := e.streamPushes(); n != 3000 {
		t.Fatalf("backlog of %d, want 3000", n)
	}
	a := e.do("POST", "/v1/infra/notification/mp", "application/json", tok, goodBody)
	id := a.json(t)["data"].(map[string]any)["ucsId"].(string)
	a = e.do("GET", "/v1/infra/notification/mp/"+id, "", tok, "")
	if a.status != 200 || a.json(t)["data"].(map[string]any)["state"] != "queued" {
		t.Fatalf("lookup right after the answer: %d %s", a.status, a.body)
	}
}
