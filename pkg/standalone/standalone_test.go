package standalone_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/standalone"
)

func call(t *testing.T, method, u, ctype, auth, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: %d %q", method, u, resp.StatusCode, b)
	}
	return resp.StatusCode, m
}

// lookup reads the delivery result of id, which must be found.
func lookup(t *testing.T, base, tok, id string) map[string]any {
	t.Helper()
	st, m := call(t, "GET", base+"/v1/infra/notification/mp/"+id, "", tok, "")
	if st != 200 {
		t.Fatalf("lookup %s: %d %v", id, st, m)
	}
	return m["data"].(map[string]any)
}

func start(t *testing.T, dir string) *standalone.Stack {
	t.Helper()
	s, err := standalone.Start(context.Background(), standalone.Options{DataDir: dir, Listen: "127.0.0.1:0", Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func clientSecret(t *testing.T, info standalone.Info, id string) string {
	for _, c := range info.Clients {
		if c.ClientID == id {
			return c.ClientSecret
		}
	}
	t.Fatalf("no client %s in standalone.json", id)
	return ""
}

func token(t *testing.T, base, id, secret string) string {
	t.Helper()
	st, m := call(t, "POST", base+"/v1/token", "application/x-www-form-urlencoded", "",
		url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}.Encode())
	if st != 200 {
		t.Fatalf("token: %d %v", st, m)
	}
	return "Bearer " + m["access_token"].(string)
}

// bodyFor makes a valid push of type t whose main items are distinct, so the test can tell
// where each landed.
func bodyFor(t push.TypeSpec, user string) (string, map[string]string) {
	data := map[string]string{}
	for i, f := range t.Fields {
		switch {
		case f.Main:
			data[f.Name] = fmt.Sprintf("%s的%s第%d项", t.Type, f.Name, i)
		case f.Name == "header":
			data[f.Name] = "您有一条新消息"
		default:
			data[f.Name] = "请及时处理"
		}
	}
	b, _ := json.Marshal(map[string]any{"userId": user, "type": t.Type, "url": "https://portal.example.edu/m/1", "time": time.Now().Unix(), "data": data})
	return string(b), data
}

// TestEndToEnd drives the standalone stack as a campus application would: a token, a push of
// every type, each message reaching the platform exactly once with its fields mapped onto the
// template, and the delivery result read back by ucsId. A restart on the same data folder
// keeps identities and results.
func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir)
	stopped := false
	defer func() {
		if !stopped {
			s.Close()
		}
	}()
	info := readInfo(t, dir)
	if fi, _ := os.Stat(filepath.Join(dir, "standalone.json")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("standalone.json mode %v", fi.Mode().Perm())
	}
	if info.BaseURL == "" || !strings.HasPrefix(info.NATSURL, "nats://") || !strings.HasPrefix(info.MongoDBURI, "mongodb://") ||
		!strings.HasPrefix(info.PlatformURL, "http://") || len(info.Clients) != 2 || len(info.Users) < 3 {
		t.Fatalf("standalone.json: %+v", info)
	}
	// The simulated account's callbacks are in safe mode; a worker has no use for the key.
	if info.Platform == nil || len(info.Platform.EncodingAESKey) != 43 || s.Config.Platform.EncodingAESKey != info.Platform.EncodingAESKey {
		t.Fatalf("standalone.json: no EncodingAESKey, or not the one in force: %+v", info.Platform)
	}
	if wc, err := os.ReadFile(filepath.Join(dir, standalone.WorkerConfigFile)); err != nil || strings.Contains(string(wc), info.Platform.EncodingAESKey) {
		t.Fatalf("%s holds the EncodingAESKey (%v)", standalone.WorkerConfigFile, err)
	}
	base := info.BaseURL
	tok := token(t, base, standalone.DemoClient, clientSecret(t, info, standalone.DemoClient))

	// The test client sees who it is.
	if st, m := call(t, "GET", base+"/v1/fake_api/user", "", token(t, base, standalone.TestClient, clientSecret(t, info, standalone.TestClient)), ""); st != 200 ||
		m["data"].(map[string]any)["clientId"] != standalone.TestClient {
		t.Fatalf("fake_api: %d %v", st, m)
	}

	type pushed struct {
		id   string
		typ  push.Type
		data map[string]string
	}
	var all []pushed
	for _, ts := range push.Types() {
		body, data := bodyFor(ts, standalone.DemoUsers[0])
		st, m := call(t, "POST", base+"/v1/infra/notification/mp", "application/json", tok, body)
		if st != 200 || m["code"] != "A00000" || m["msg"] != "success" {
			t.Fatalf("push %s: %d %v", ts.Type, st, m)
		}
		all = append(all, pushed{id: m["data"].(map[string]any)["ucsId"].(string), typ: ts.Type, data: data})
	}
	unbound, _ := bodyFor(push.Types()[0], standalone.UnboundUser)
	_, m := call(t, "POST", base+"/v1/infra/notification/mp", "application/json", tok, unbound)
	unboundID := m["data"].(map[string]any)["ucsId"].(string)

	result := func(id string) map[string]any { return lookup(t, base, tok, id) }
	for _, p := range all {
		embeddedtest.Eventually(t, 30*time.Second, string(p.typ)+" delivered", func() bool { return result(p.id)["state"] == "delivered" })
	}
	embeddedtest.Eventually(t, 10*time.Second, "unbound user's push failed", func() bool { return result(unboundID)["state"] == "failed" })
	if r := result(unboundID); !strings.HasPrefix(r["reason"].(string), "no binding") || r["attempts"] != 0.0 {
		t.Fatalf("unbound: %v", r)
	}

	sent := s.Sim.Sent()
	if len(sent) != len(all) {
		t.Fatalf("the platform got %d messages, want %d", len(sent), len(all))
	}
	byID := map[string]int{}
	for _, m := range sent {
		byID[m.ClientMsgID]++
	}
	tpls := standalone.DefaultTemplates()
	for _, p := range all {
		if byID[p.id] != 1 {
			t.Fatalf("%s reached the platform %d times", p.id, byID[p.id])
		}
		var got = sentFor(sent, p.id)
		tpl := tpls[string(p.typ)]
		if got.TemplateID != tpl.TemplateID || got.URL != "https://portal.example.edu/m/1" || got.ToUser != info.Bindings[0].OpenID {
			t.Fatalf("%s sent as %+v", p.typ, got)
		}
		for field, kw := range tpl.Fields {
			if got.Data[kw] != p.data[field] {
				t.Fatalf("%s: keyword %s = %q, want data.%s = %q", p.typ, kw, got.Data[kw], field, p.data[field])
			}
		}
		if len(got.Data) != len(tpl.Fields) {
			t.Fatalf("%s: sent %d keywords (header and remark must not be sent): %v", p.typ, len(got.Data), got.Data)
		}
		r := result(p.id)
		if r["attempts"] != 1.0 || r["msgId"] == "" || r["sentAt"] == "" || r["finishedAt"] == "" {
			t.Fatalf("result %v", r)
		}
	}

	// Restart on the same folder: same identities, results kept. A callback token of an
	// earlier version, which the platform's console would not take, is replaced.
	if !config.ValidCallbackToken(info.Platform.CallbackToken) {
		t.Fatalf("callback token %q is no platform Token", info.Platform.CallbackToken)
	}
	s.Close()
	stopped = true
	raw, err := os.ReadFile(filepath.Join(dir, "standalone.json"))
	if err != nil {
		t.Fatal(err)
	}
	const oldToken = "aT_0-earlier-version-token_x"
	raw = bytes.Replace(raw, []byte(`"callback_token": "`+info.Platform.CallbackToken+`"`), []byte(`"callback_token": "`+oldToken+`"`), 1)
	if err := os.WriteFile(filepath.Join(dir, "standalone.json"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	s2 := start(t, dir)
	defer s2.Close()
	if s2.Info.Clients[0].ClientSecret != info.Clients[0].ClientSecret {
		t.Fatal("restart made new client secrets")
	}
	if tok := readInfo(t, dir).Platform.CallbackToken; !config.ValidCallbackToken(tok) || tok == info.Platform.CallbackToken {
		t.Fatalf("after a restart with the earlier token %q: %q", oldToken, tok)
	}
	base = s2.Info.BaseURL
	tok = token(t, base, standalone.DemoClient, clientSecret(t, info, standalone.DemoClient))
	if st, m := call(t, "GET", base+"/v1/infra/notification/mp/"+all[0].id, "", tok, ""); st != 200 || m["data"].(map[string]any)["state"] != "delivered" {
		t.Fatalf("after restart: %d %v", st, m)
	}
}

func sentFor(sent []simMsg, id string) simMsg {
	for _, m := range sent {
		if m.ClientMsgID == id {
			return m
		}
	}
	return simMsg{}
}

type simMsg = simulator.SentMessage

// TestConfigSectionsWin: under standalone, a configuration's sections are used where given (a
// platform account, a client) and embedded parts fill in the rest.
func TestConfigSectionsWin(t *testing.T) {
	ext := simulator.New(simulator.Config{AppID: "wxreal", Secret: "wxrealsecret"})
	defer ext.Close()
	srv := httptest.NewServer(ext.Handler())
	defer srv.Close()
	ext.AddTemplate("REAL-JML", []string{"thing7", "thing8"})
	ext.AddFollower("oRealUser")
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
oauth:
  clients:
    - {client_id: registrar, client_secret: registrar-secret-0001, grants: [client_credentials], scopes: [notification.mp]}
bindings: [{userid: "2019000123", openid: oRealUser}]
platform:
  api_base: %s
  appid: wxreal
  secret: wxrealsecret
  callback_token: realCallbackToken
  templates:
    JML: {template_id: REAL-JML, fields: {class: thing7, info: thing8}}
`, srv.URL)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := standalone.Start(context.Background(), standalone.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Config: cfg, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Sim != nil || s.Info.PlatformURL != srv.URL {
		t.Fatalf("the simulator ran although the file names a platform: %q", s.Info.PlatformURL)
	}
	base := s.Info.BaseURL
	tok := token(t, base, "registrar", "registrar-secret-0001")
	st, m := call(t, "POST", base+"/v1/infra/notification/mp", "application/json", tok,
		`{"userId":"2019000123","type":"JML","data":{"class":"线性代数","info":"期中作业已发布"}}`)
	if st != 200 {
		t.Fatalf("push: %d %v", st, m)
	}
	id := m["data"].(map[string]any)["ucsId"].(string)
	embeddedtest.Eventually(t, 20*time.Second, "the configured platform receives the message", func() bool { return len(ext.Sent()) == 1 })
	got := ext.Sent()[0]
	if got.ClientMsgID != id || got.TemplateID != "REAL-JML" || got.Data["thing7"] != "线性代数" || got.Data["thing8"] != "期中作业已发布" {
		t.Fatalf("sent %+v", got)
	}
	// The seeded clients exist beside the configured one.
	tok2 := token(t, base, standalone.DemoClient, clientSecret(t, s.Info, standalone.DemoClient))
	if st, _ := call(t, "GET", base+"/v1/infra/notification/mp/"+id, "", tok2, ""); st != 404 {
		t.Fatalf("another client read the push: %d", st)
	}
}

// A public_url written with a trailing slash is the same address: the simulated platform's
// delivery receipts reach the front end, and a push is delivered.
func TestPublicURLWithTrailingSlash(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	_ = probe.Close()
	cfg := &config.Config{Listen: addr, PublicURL: "http://" + addr + "/"}
	s, err := standalone.Start(context.Background(), standalone.Options{DataDir: t.TempDir(), Config: cfg, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "http://" + addr
	tok := token(t, base, standalone.DemoClient, clientSecret(t, s.Info, standalone.DemoClient))
	st, m := call(t, "POST", base+"/v1/infra/notification/mp", "application/json", tok,
		`{"userId":"2020000001","type":"JML","data":{"class":"线性代数","info":"期中作业已发布"}}`)
	if st != 200 {
		t.Fatalf("push: %d %v", st, m)
	}
	id := m["data"].(map[string]any)["ucsId"].(string)
	embeddedtest.Eventually(t, 20*time.Second, "the push delivered (its receipt taken)", func() bool {
		return lookup(t, base, tok, id)["state"] == "delivered"
	})
}

// A listen address for every interface gives the standalone stack an address this machine
// reaches it at (127.0.0.1), not the unspecified one, as its issuer.
func TestListenOnEveryInterface(t *testing.T) {
	s, err := standalone.Start(context.Background(), standalone.Options{DataDir: t.TempDir(), Listen: "0.0.0.0:0", Workers: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.HasPrefix(s.Info.BaseURL, "http://127.0.0.1:") {
		t.Fatalf("base URL %q, want one at 127.0.0.1", s.Info.BaseURL)
	}
	st, m := call(t, "GET", s.Info.BaseURL+"/auth/realms/"+s.Config.OAuth.Realm+"/.well-known/openid-configuration", "", "", "")
	if st != 200 || m["issuer"] != s.Info.BaseURL+"/auth/realms/"+s.Config.OAuth.Realm {
		t.Fatalf("discovery: %d %v", st, m["issuer"])
	}
}

// Close lets a request under way finish before it stops the parts under the front end: a push
// whose body is still arriving when Close is called gets its ucsId.
func TestCloseAnswersRequestsUnderWay(t *testing.T) {
	s := start(t, t.TempDir())
	tok := token(t, s.Info.BaseURL, standalone.DemoClient, clientSecret(t, s.Info, standalone.DemoClient))
	body, _ := bodyFor(push.Types()[0], standalone.DemoUsers[0])
	c, err := net.Dial("tcp", s.Config.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Expect: 100-continue: the front end says "100 Continue" when the handler begins to read
	// the body, and from then on the push is under way.
	fmt.Fprintf(c, "POST /v1/infra/notification/mp HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n",
		tok, len(body))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("no 100 Continue: %q %v", line, err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "\r\n" {
		t.Fatalf("after 100 Continue: %q %v", line, err)
	}
	fmt.Fprint(c, body[:10])
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a push was under way")
	case <-time.After(500 * time.Millisecond): // a span in which Close must not return
	}
	fmt.Fprint(c, body[10:])
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"ucsId"`) {
		t.Fatalf("the push under way: %d %s", resp.StatusCode, b)
	}
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return once the push was answered")
	}
}
