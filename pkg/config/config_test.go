package config_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/schemas"
)

const example = "../../deployments/config.example.yaml"

func TestExampleIsValid(t *testing.T) {
	c, err := config.Load(example)
	if err != nil {
		t.Fatal(err)
	}
	c.Defaults()
	// The example's callback token is a placeholder no platform console takes: a front end
	// started with it refuses to, until the account's Token is set.
	if err := c.Validate(config.RoleAPI); err == nil || !strings.Contains(err.Error(), "platform.callback_token") {
		t.Errorf("the front end starts with the example's placeholder callback token: %v", err)
	}
	c.Platform.CallbackToken = "Token2026"
	for _, role := range []config.Role{config.RoleAPI, config.RoleWorker, config.RoleStandalone} {
		if err := c.Validate(role); err != nil {
			t.Errorf("role %d: %v", role, err)
		}
	}
	if c.OAuth.AccessTokenTTL.D() != 7200*time.Second || c.NATS.Replicas != 3 || len(c.Platform.Templates) != 9 {
		t.Fatalf("example read wrong: %+v", c)
	}
	h, err := c.OAuth.Clients[0].SecretHash()
	if err != nil || h != [32]byte{} {
		t.Fatalf("secret hash: %x %v", h, err)
	}
}

func TestDefaults(t *testing.T) {
	c := &config.Config{}
	c.Defaults()
	if c.Listen != "127.0.0.1:8080" || c.PublicURL != "http://127.0.0.1:8080" || c.TimeZone != "Asia/Shanghai" ||
		c.OAuth.Realm != "campus" || c.OAuth.AccessTokenTTL.D() != 2*time.Hour || c.OAuth.SigningAlg != "ES256" ||
		c.NATS.Stream != "UCS_PUSH" || c.MongoDB.Database != "ucs" || c.Worker.Concurrency != 256 {
		t.Fatalf("defaults: %+v", c)
	}
	if err := c.Validate(config.RoleStandalone); err != nil {
		t.Fatalf("an empty configuration must run standalone: %v", err)
	}
}

func TestValidateReportsEverything(t *testing.T) {
	c, err := config.Parse([]byte(`
listen: nowhere
public_url: ftp://x
time_zone: Mars/Olympus
nats: {replicas: 7, max_age: 12h}
mongodb: {database: "bad name"}
oauth:
  access_token_ttl: 5s
  signing_alg: HS256
  clients:
    - {client_id: a, client_secret: short, grants: [implicit], scopes: [admin]}
    - {client_id: a, client_secret_sha256: zz, grants: [authorization_code], scopes: [openid]}
    - {client_id: "", grants: [], scopes: []}
directory:
  users: [{userid: "1"}, {userid: "1", password: x, password_hash: y}]
bindings: [{userid: "1"}, {userid: "a@b", openid: oX}]
platform:
  api_base: not a url
  templates:
    TDL: {template_id: t, fields: {list: thing2, content: thing2}}
    XX: {template_id: "", fields: {}}
worker: {concurrency: -1, max_attempts: 5000, backoff_initial: 5ms, backoff_max: 1ms, ack_wait: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	c.Defaults()
	err = c.Validate(config.RoleWorker)
	want := `invalid configuration:
  listen: "nowhere" is not host:port (port 0 to 65535)
  public_url: "ftp://x" is not an absolute http(s) URL without query, fragment or user info
  time_zone: "Mars/Olympus" is not a known time zone
  nats.url: required (or set NATS_URL)
  nats.replicas: 7, must be 1 to 5
  nats.max_age: 12h0m0s, at least 24h (an Idempotency-Key is kept 24h, and the stream must remember it as long)
  mongodb.uri: required (or set MONGODB_URI)
  mongodb.database: "bad name" must be letters, digits, - or _
  oauth.access_token_ttl: 5s, must be whole seconds from 60s to 24h
  oauth.signing_alg: "HS256", must be ES256 or RS256
  oauth.clients[0].client_secret: 5 characters, at least 16
  oauth.clients[0].grants: unknown grant "implicit"
  oauth.clients[0].scopes: unknown scope "admin"
  oauth.clients[1].client_id: "a" appears twice
  oauth.clients[1].client_secret_sha256 is not 64 hex digits
  oauth.clients[1].redirect_uris: required for the authorization_code grant
  oauth.clients[2].client_id: "" must be 1 to 64 characters of letters, digits, '.', '_' or '-'
  oauth.clients[2]: client_secret or client_secret_sha256 is required
  oauth.clients[2].grants: at least one grant is required
  oauth.clients[2].scopes: at least one scope is required
  directory.users[0]: exactly one of password and password_hash is required
  directory.users[1].userid: "1" appears twice
  directory.users[1]: exactly one of password and password_hash is required
  bindings[0]: userid and openid are required
  bindings[1].userid: "a@b" is no user number a push can name (1 to 64 of A-Z a-z 0-9 . _ -)
  platform.api_base: "not a url" is not an absolute http(s) URL
  platform.appid: required with api_base
  platform.secret: required with api_base
  platform.templates.TDL.fields: content and list both map to thing2; a keyword takes one field
  platform.templates.XX: unknown push type
  platform.templates.XX.template_id: required
  platform.templates.XX.fields: at least one field is required
  worker.concurrency: -1, must be 1 to 4096
  worker.max_attempts: 5000, must be 1 to 1000
  worker.backoff_initial: 5ms, at least 10ms
  worker.backoff_max: 1ms, less than backoff_initial
  worker.ack_wait: 1s, must be 5s to 9m0s (the copy of a message whose worker stopped during its call must reach the platform within its 10-minute duplicate check)`
	if err == nil || err.Error() != want {
		t.Fatalf("got:\n%v\nwant:\n%s", err, want)
	}
}

// TestCallbackTokenOnlyForTheFrontEnd: the front end checks the platform's signed event pushes
// with the callback token; a worker takes no events and needs none. The token is what the
// platform's console accepts, 3 to 32 letters and digits: the shipped placeholders are not, so
// a front end left with one refuses to start rather than take callbacks anyone can sign.
func TestCallbackTokenOnlyForTheFrontEnd(t *testing.T) {
	c := &config.Config{NATS: config.NATS{URL: "nats://x"}, MongoDB: config.MongoDB{URI: "mongodb://x"},
		Platform: config.Platform{APIBase: "https://api.example.com", AppID: "wx1", Secret: "s"}}
	c.Defaults()
	if err := c.Validate(config.RoleWorker); err != nil {
		t.Fatalf("worker: %v", err)
	}
	for _, tok := range []string{"", "ab", "PLACEHOLDER-callback-token", "change-me-too", "a b c", strings.Repeat("a", 33), "令牌令牌"} {
		c.Platform.CallbackToken = tok
		err := c.Validate(config.RoleAPI)
		if err == nil || !strings.Contains(err.Error(), "platform.callback_token: required with api_base, 3 to 32 letters and digits") {
			t.Errorf("api with callback_token %q: %v", tok, err)
		}
	}
	for _, tok := range []string{"abc", "Token2026", strings.Repeat("Z9", 16)} {
		c.Platform.CallbackToken = tok
		if err := c.Validate(config.RoleAPI); err != nil {
			t.Errorf("api with callback_token %q: %v", tok, err)
		}
	}
}

// TestOAuthBase: the binding page's authorization origin defaults to the platform's with an
// api_base, and must be an absolute http(s) address.
func TestOAuthBase(t *testing.T) {
	c := &config.Config{NATS: config.NATS{URL: "nats://x"}, MongoDB: config.MongoDB{URI: "mongodb://x"},
		Platform: config.Platform{APIBase: "https://api.weixin.qq.com", AppID: "wx1", Secret: "s", CallbackToken: "tok"}}
	c.Defaults()
	if c.Platform.OAuthBase != "https://open.weixin.qq.com" {
		t.Fatalf("default %q", c.Platform.OAuthBase)
	}
	c.Platform.OAuthBase = "ftp://open.example.com"
	err := c.Validate(config.RoleAPI)
	if err == nil || !strings.Contains(err.Error(), `platform.oauth_base: "ftp://open.example.com" is not an absolute http(s) URL without user info, query`) {
		t.Fatalf("got %v", err)
	}
	none := &config.Config{}
	none.Defaults()
	if none.Platform.OAuthBase != "" {
		t.Fatalf("an oauth_base without a platform: %q", none.Platform.OAuthBase)
	}
}

func TestWorkerNeedsPlatform(t *testing.T) {
	c := &config.Config{NATS: config.NATS{URL: "nats://x"}, MongoDB: config.MongoDB{URI: "mongodb://x"}}
	c.Defaults()
	err := c.Validate(config.RoleWorker)
	if err == nil || !strings.Contains(err.Error(), "platform.api_base: required") {
		t.Fatalf("got %v", err)
	}
	if err := c.Validate(config.RoleAPI); err != nil {
		t.Fatalf("api needs no platform: %v", err)
	}
}

func TestUnknownKeyIsAnError(t *testing.T) {
	_, err := config.Parse([]byte("listen: a:1\nlsten: b\n"))
	if err == nil || !strings.Contains(err.Error(), "field lsten not found") {
		t.Fatalf("got %v", err)
	}
}

func TestEnvOverrides(t *testing.T) {
	c := &config.Config{NATS: config.NATS{URL: "nats://file"}, MongoDB: config.MongoDB{URI: "mongodb://file"}}
	env := map[string]string{"NATS_URL": "nats://env", "MONGODB_URI": "mongodb://env"}
	c.ApplyEnv(func(k string) string { return env[k] })
	if c.NATS.URL != "nats://env" || c.MongoDB.URI != "mongodb://env" {
		t.Fatalf("%+v", c)
	}
	c.ApplyEnv(func(string) string { return "" })
	if c.NATS.URL != "nats://env" {
		t.Fatal("an empty variable overrode the file")
	}
}

func TestDurations(t *testing.T) {
	for in, want := range map[string]time.Duration{"7200": 2 * time.Hour, "7200s": 2 * time.Hour, "1h30m": 90 * time.Minute} {
		c, err := config.Parse([]byte("oauth: {access_token_ttl: " + in + "}"))
		if err != nil || c.OAuth.AccessTokenTTL.D() != want {
			t.Errorf("%s: %v %v", in, c, err)
		}
	}
	if _, err := config.Parse([]byte("oauth: {access_token_ttl: soon}")); err == nil || !strings.Contains(err.Error(), `"soon" is not a duration`) {
		t.Errorf("bad duration: %v", err)
	}
}

// TestOperationsSettings checks the settings of limits, logs and stopping.
func TestOperationsSettings(t *testing.T) {
	c, err := config.Parse([]byte("shutdown_grace: 1h\nplatform: {max_rate: 200001, quota_reset: '7:3'}\nlog: {format: xml, level: loud}\nworker: {listen: nowhere}"))
	if err != nil {
		t.Fatal(err)
	}
	c.Defaults()
	err = c.Validate(config.RoleStandalone)
	for _, want := range []string{
		"shutdown_grace: 1h0m0s, must be 1s to 10m",
		"platform.max_rate: 200001, must be 0 (no cap) to 100000",
		`platform.quota_reset: "7:3" is not a time of day HH:MM`,
		`log.format: "xml", must be text or json`,
		`log.level: "loud", must be debug, info, warn or error`,
		`worker.listen: "nowhere" is not host:port`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
	d := &config.Config{}
	d.Defaults()
	if d.ShutdownGrace.D() != 25*time.Second || d.Worker.Listen != "127.0.0.1:9091" || d.Platform.QuotaReset != "00:00" || d.Log.Format != "text" || d.Platform.MaxRate != 0 {
		t.Errorf("defaults: %+v %+v %+v", d.ShutdownGrace, d.Worker, d.Log)
	}
	loc, _ := time.LoadLocation("Asia/Shanghai")
	now := time.Date(2026, 11, 23, 17, 0, 0, 0, loc)
	if got := d.Platform.QuotaResetAfter(now, loc); !got.Equal(time.Date(2026, 11, 24, 0, 0, 0, 0, loc)) {
		t.Errorf("quota reset after %s: %s", now, got)
	}
	d.Platform.QuotaReset = "18:30"
	if got := d.Platform.QuotaResetAfter(now, loc); !got.Equal(time.Date(2026, 11, 23, 18, 30, 0, 0, loc)) {
		t.Errorf("quota reset 18:30 after %s: %s", now, got)
	}
}

// TestSchemaAgrees checks the JSON Schema in schemas/ against the example and against files
// Go rejects for their shape.
func TestSchemaAgrees(t *testing.T) {
	raw, err := schemas.FS.ReadFile("config.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	comp := jsonschema.NewCompiler()
	if err := comp.AddResource("config.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := comp.Compile("config.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	toJSON := func(y []byte) any {
		var v any
		if err := yaml.Unmarshal(y, &v); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	ex, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(toJSON(ex)); err != nil {
		t.Fatalf("schema rejects the example: %v", err)
	}
	// What the service starts with, the schema takes: an operator checking the file against it
	// (in an editor, in CI) is not told that a working file is wrong.
	for _, good := range []string{
		`oauth: {access_token_ttl: "7200"}`,
		`oauth: {access_token_ttl: 1h30m}`,
		`oauth: {access_token_ttl: 1.5h}`,
		`oauth: {access_token_ttl: 90000ms}`,
		`worker: {backoff_initial: ".5s"}`,
		`worker: {backoff_initial: "1.s"}`,
		`nats: {max_bytes: 0}`,
		`oauth: {rate_limits: {per_client: 0, per_client_burst: 0, per_address: 0, per_address_burst: 0}}`,
		`oauth: {brute_force: {failures: 0}}`,
		`platform: {quota_reset: "07:30"}`,
		`oauth: {trusted_proxies: ["10.0.0.0/8", "fd00::/8"]}`,
		`bindings: [{userid: "2020.0001_a-b", openid: oA}]`,
	} {
		c, err := config.Parse([]byte(good))
		if err != nil {
			t.Fatalf("%s: %v", good, err)
		}
		c.Defaults()
		if err := c.Validate(config.RoleStandalone); err != nil {
			t.Errorf("Go refuses %s: %v", good, err)
		}
		if err := sch.Validate(toJSON([]byte(good))); err != nil {
			t.Errorf("the service starts with %s, the schema refuses it: %v", good, err)
		}
	}
	for _, bad := range []string{
		"oauth: {trusted_proxies: ['10.0.0.1']}",
		"bindings: [{userid: '2020 0001', openid: oA}]",
		"platform: {quota_reset: '7:30'}",
		"platform: {api_base: 'HTTPS://api.weixin.qq.com', appid: wx1, secret: s, callback_token: tok}",
		"platform: {oauth_base: 'HTTPS://open.weixin.qq.com'}",
		"oauth: {identity_providers: {cas: {url: 'HTTPS://cas.example.edu/cas'}}}",
		"lsten: x",
		"nats: {replicas: 9}",
		"oauth: {signing_alg: HS256}",
		"oauth: {clients: [{client_id: a, client_secret: 0123456789abcdef, client_secret_sha256: " + strings.Repeat("a", 64) + ", grants: [client_credentials], scopes: [fake_api]}]}",
		"oauth: {clients: [{client_id: a, client_secret: 0123456789abcdef, grants: [implicit], scopes: [fake_api]}]}",
		"platform: {templates: {XX: {template_id: a, fields: {a: b}}}}",
		"worker: {concurrency: -1}",
		"nats: {replicas: -1}",
		"oauth: {access_token_ttl: soon}",
		"log: {format: xml}",
		"log: {level: loud}",
		"platform: {quota_reset: '25:00'}",
		"platform: {max_rate: -1}",
		"ops: {users: ['a b']}",
		"ops: {users: ['1', '1']}",
		"shutdown_grace: soon",
		"platform: {appid: wx1, encoding_aes_key: tooShort}",
		"platform: {oauth_base: 'open.weixin.qq.com'}",
		"platform: {oauth_base: 'https://open.weixin.qq.com/?x=1'}",
		"public_url: 'https://ucs.example.edu/?tenant=campus'",
		"public_url: 'https://ucs.example.edu/#top'",
		"public_url: 'https://admin:pw@ucs.example.edu'",
		"public_url: 'https://ucs.example.edu/a b'",
		"public_url: 'HTTPS://ucs.example.edu'",
		"public_url: \"https://ucs.example.edu/a\\x01\"",
		"public_url: 'http://:8080'",
		"public_url: 'https://:443/ucs'",
		"platform: {api_base: 'https://:443'}",
		"platform: {appid: wx1, encoding_aes_key: " + strings.Repeat("a", 42) + "+}",
	} {
		if err := sch.Validate(toJSON([]byte(bad))); err == nil {
			t.Errorf("schema accepts %q", bad)
		}
		c, perr := config.Parse([]byte(bad))
		if perr == nil {
			c.Defaults()
			if c.Validate(config.RoleStandalone) == nil {
				t.Errorf("Go accepts %q", bad)
			}
		}
	}
}

// TestEncodingAESKey: safe mode's key is 43 letters and digits and needs the appid; a bad key is
// named without being shown, as every secret.
func TestEncodingAESKey(t *testing.T) {
	const key = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
	good := "platform: {appid: wx1, encoding_aes_key: " + key + "}"
	c, err := config.Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	c.Defaults()
	if err := c.Validate(config.RoleStandalone); err != nil || c.Platform.EncodingAESKey != key {
		t.Fatalf("%v %q", err, c.Platform.EncodingAESKey)
	}
	secret := key[:40] + "!!!"
	for yml, want := range map[string]string{
		"platform: {appid: wx1, encoding_aes_key: '" + secret + "'}": "platform.encoding_aes_key: 43 characters; must be the account's EncodingAESKey, 43 letters and digits",
		"platform: {appid: wx1, encoding_aes_key: " + key[:42] + "}": "platform.encoding_aes_key: 42 characters; must be the account's EncodingAESKey, 43 letters and digits",
		"platform: {encoding_aes_key: " + key + "}":                  "platform.appid: required with encoding_aes_key (safe mode checks it in every callback)",
	} {
		c, err := config.Parse([]byte(yml))
		if err != nil {
			t.Fatal(err)
		}
		c.Defaults()
		err = c.Validate(config.RoleStandalone)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", yml, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), key[:20])) {
			t.Errorf("%s: the key is in the message: %v", yml, err)
		}
	}
}

// TestTemplateKeywordKinds: a keyword of no documented kind, or a field the
// type does not have, is refused; every documented kind is taken.
func TestTemplateKeywordKinds(t *testing.T) {
	c := &config.Config{NATS: config.NATS{URL: "nats://x"}, MongoDB: config.MongoDB{URI: "mongodb://x"}}
	c.Defaults()
	c.Platform.Templates = map[string]config.Template{
		"EN": {TemplateID: "t1", Fields: map[string]string{"name": "thing1", "class": "character_string2", "time": "time3"}},
		"AR": {TemplateID: "t2", Fields: map[string]string{"title": "short_thing1", "applicant": "name2", "time": "date3", "remark": "const4"}},
		"WR": {TemplateID: "t3", Fields: map[string]string{"header": "first", "title": "keyword1", "date": "enum", "content": "phrase3", "remark": "remark"}},
	}
	if err := c.Validate(config.RoleAPI); err != nil {
		t.Fatalf("documented kinds refused: %v", err)
	}
	c.Platform.Templates["JML"] = config.Template{TemplateID: "t4", Fields: map[string]string{"class": "things1", "info": "memo", "room": "thing3"}}
	err := c.Validate(config.RoleAPI)
	if err == nil {
		t.Fatal("unknown kinds accepted")
	}
	for _, want := range []string{
		`platform.templates.JML.fields.class: keyword "things1" is of no known kind: a keyword is a kind followed by digits, the kinds being thing, number,`,
		`platform.templates.JML.fields.info: keyword "memo" is of no known kind`,
		`platform.templates.JML.fields.room: not a field of type JML`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nlacks %q", err, want)
		}
	}
}

// TestRetriesWithinThePlatformsDuplicateCheck: a retry after an answer lost on the way must reach
// the platform within its 10-minute duplicate check, so backoff_max is at most 9m; and a waiting
// message's record, which holds its attempts, must outlive the message in the stream.
func TestRetriesWithinThePlatformsDuplicateCheck(t *testing.T) {
	c := &config.Config{NATS: config.NATS{URL: "nats://x"}, MongoDB: config.MongoDB{URI: "mongodb://x"}}
	c.Defaults()
	if c.Worker.BackoffMax.D() > config.MaxBackoff {
		t.Fatalf("default backoff_max %s", c.Worker.BackoffMax.D())
	}
	c.Worker.BackoffMax = config.Duration(10 * time.Minute)
	c.MongoDB.Retention = config.Duration(24 * time.Hour)
	err := c.Validate(config.RoleWorker)
	for _, want := range []string{
		"worker.backoff_max: 10m0s, at most 9m0s",
		"mongodb.retention: 24h0m0s, at least 1h and at least nats.max_age (168h0m0s)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
}

// TestNATSURLNotShown: a NATS URL that does not parse (a password with '/' or '+' not
// percent-encoded) is refused without its text, which would print the password.
func TestNATSURLNotShown(t *testing.T) {
	c := &config.Config{NATS: config.NATS{URL: "nats://a:1@h1:4222,nats://ucs:q9Zt/Kw2pL7+vX@127.0.0.1:4222"}, MongoDB: config.MongoDB{URI: "mongodb://x"}}
	c.Defaults()
	err := c.Validate(config.RoleWorker)
	if err == nil || !strings.Contains(err.Error(), "nats.url: server 2 of the list is not a URL") || strings.Contains(err.Error(), "q9Zt") {
		t.Fatalf("validate: %v", err)
	}
}

// TestNumbersOutOfRange: a port past 65535, and a rate that is not a number (YAML's .nan, which
// fails every comparison) or infinite, are refused.
func TestNumbersOutOfRange(t *testing.T) {
	c, err := config.Parse([]byte(`
listen: 0.0.0.0:80800
nats: {url: "nats://127.0.0.1:4222"}
mongodb: {uri: "mongodb://127.0.0.1:27017"}
oauth:
  rate_limits: {per_client: .nan, per_address: .inf}
  clients:
    - {client_id: a, client_secret: a-long-enough-secret, grants: [client_credentials], scopes: [notification.mp], rate_limit: .nan}
platform: {max_rate: .nan}
worker: {listen: "127.0.0.1:-1"}
`))
	if err != nil {
		t.Fatal(err)
	}
	c.Defaults()
	err = c.Validate(config.RoleAPI)
	for _, want := range []string{
		`listen: "0.0.0.0:80800" is not host:port`, `worker.listen: "127.0.0.1:-1" is not host:port`,
		"oauth.rate_limits: rates must be positive", "oauth.clients[0].rate_limit: NaN", "platform.max_rate: NaN",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate: %v\nwant %q", err, want)
		}
	}
}

// TestRefusedBeforeItBreaksLater: values that start but break something later are refused at
// start: a user number bound twice (the later binding would replace the first without a word),
// a retention past what MongoDB's TTL index holds (it would wrap around to a short one), and a
// main item mapped to a keyword the platform no longer shows (it would reach nobody).
func TestRefusedBeforeItBreaksLater(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"bindings:\n  - {userid: '2020000001', openid: oAAAAAAAAAAAAAAAAAAAAAAAAAA1}\n  - {userid: '2020000001', openid: oBBBBBBBBBBBBBBBBBBBBBBBBBB2}\n",
			`bindings[1].userid: "2020000001" appears twice`},
		{"bindings:\n  - {userid: '2020000001', openid: oAAAAAAAAAAAAAAAAAAAAAAAAAA1}\n  - {userid: '2020000002', openid: oAAAAAAAAAAAAAAAAAAAAAAAAAA1}\n",
			"bindings[1].openid: appears twice"},
		{"mongodb: {retention: 1193047h}\n", "mongodb.retention: 1193047h0m0s, at most"},
		// A key dropped while a session lives would refuse its application's logout by the
		// sign-in's ID token.
		{"oauth: {key_rotation: 24h, session_ttl: 72h, refresh_token_ttl: 72h}\n", "oauth.key_rotation: 24h0m0s, at least session_ttl (72h0m0s)"},
		// The platform no longer shows the old industry templates' first and remark.
		{"platform: {templates: {TDL: {template_id: t1, fields: {content: remark, type: keyword1}}}}\n",
			"platform.templates.TDL.fields.content: a main item cannot go to remark"},
	} {
		cfg, err := config.Parse([]byte(c.yaml))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Defaults()
		if err := cfg.Validate(config.RoleStandalone); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
}

// A file is one YAML document: a second one (an override appended after "---") is refused
// rather than ignored with its keys unchecked.
func TestOneDocument(t *testing.T) {
	for _, file := range []string{
		"listen: 127.0.0.1:8080\n---\nnats:\n  max_age: 1h\n",
		"---\n---\nlisten: 127.0.0.1:8080\n",
		"listen: 127.0.0.1:8080\n---\n",
	} {
		if _, err := config.Parse([]byte(file)); err == nil || !strings.Contains(err.Error(), "more than one YAML document") {
			t.Errorf("Parse(%q) = %v, want the file refused for its second document", file, err)
		}
	}
	for _, file := range []string{"", "---\nlisten: 127.0.0.1:8080\n", "listen: 127.0.0.1:8080\n"} {
		if _, err := config.Parse([]byte(file)); err != nil {
			t.Errorf("Parse(%q) = %v", file, err)
		}
	}
}

// public_url names a host clients can reach: its default from a listen address without one
// (":8080", "0.0.0.0:8080", "[::]:8080") is refused with what to set, rather than made the
// tokens' issuer "http://:8080/...".
func TestPublicURLNamesAHost(t *testing.T) {
	for listen, public := range map[string]string{":8080": "http://:8080", "0.0.0.0:8080": "http://0.0.0.0:8080", "'[::]:8080'": "http://[::]:8080"} {
		c, err := config.Parse([]byte("listen: " + listen + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		c.Defaults()
		err = c.Validate(config.RoleStandalone)
		if err == nil || !strings.Contains(err.Error(), `public_url: "`+public+`" names no host clients can reach`) {
			t.Errorf("listen %s: Validate = %v, want public_url refused for naming no host clients can reach", listen, err)
		}
	}
	for _, public := range []string{"http://[::1]:8080", "https://ucs.example.edu", "http://10.0.0.5:8080"} {
		c := &config.Config{PublicURL: public}
		c.Defaults()
		if err := c.Validate(config.RoleStandalone); err != nil {
			t.Errorf("public_url %s: %v", public, err)
		}
	}
}

// A front end's public_url names a port clients can reach: "api -listen 127.0.0.1:0" without
// public_url (its default then http://127.0.0.1:0), or a public_url of port 0, is refused with
// what to set, rather than made the issuer of every token and the platform's callback address.
// The standalone stack, which sets its address once it listens, may listen on port 0.
func TestPublicURLNamesAPort(t *testing.T) {
	base := func() *config.Config {
		return &config.Config{NATS: config.NATS{URL: "nats://x"}, MongoDB: config.MongoDB{URI: "mongodb://x"}}
	}
	for _, listen := range []string{"127.0.0.1:0", "localhost:0"} {
		c := base()
		c.Listen = listen
		c.Defaults()
		if err := c.Validate(config.RoleAPI); err == nil || !strings.Contains(err.Error(), "public_url") || !strings.Contains(err.Error(), "port 0") {
			t.Errorf("listen %s, no public_url: Validate = %v, want public_url refused for naming port 0", listen, err)
		}
	}
	c := base()
	c.PublicURL = "https://ucs.example.edu:0"
	c.Defaults()
	if err := c.Validate(config.RoleAPI); err == nil || !strings.Contains(err.Error(), "port 0") {
		t.Errorf("public_url %s: Validate = %v, want it refused", c.PublicURL, err)
	}
	c = base()
	c.Listen, c.PublicURL = "127.0.0.1:0", "https://ucs.example.edu"
	c.Defaults()
	if err := c.Validate(config.RoleAPI); err != nil {
		t.Errorf("listen on port 0 behind public_url %s: %v", c.PublicURL, err)
	}
}

// worker.ack_wait is at most 9 minutes: a copy of a message whose worker stopped during its call
// calls the platform again once ack_wait has passed, and only within 10 minutes of the first
// call does the platform answer a repeat without sending it twice.
func TestAckWaitWithinDuplicateCheck(t *testing.T) {
	for wait, ok := range map[string]bool{"9m": true, "60s": true, "9m1s": false, "30m": false} {
		c, err := config.Parse([]byte("worker: {ack_wait: " + wait + "}"))
		if err != nil {
			t.Fatal(err)
		}
		c.Defaults()
		err = c.Validate(config.RoleStandalone)
		if (err == nil) != ok || !ok && !strings.Contains(err.Error(), "worker.ack_wait: ") {
			t.Errorf("worker.ack_wait %s: Validate = %v", wait, err)
		}
	}
}

// TestHugeSecondsRefused: a duration written as a whole number of seconds too large for
// a Go duration must be refused naming its key, not wrap around to a small value that passes
// the range checks. 18446744083 s wraps to about 9.3 s.
func TestHugeSecondsRefused(t *testing.T) {
	for _, c := range []struct{ yaml, key string }{
		{"shutdown_grace: 18446744083\n", "shutdown_grace"},
		{"worker: {ack_wait: 18446744083}\n", "worker.ack_wait"},
		{"shutdown_grace: 99999999999999999999\n", "shutdown_grace"},
	} {
		cfg, err := config.Parse([]byte("nats: {url: 'nats://127.0.0.1:4222'}\nmongodb: {uri: 'mongodb://127.0.0.1:27017'}\n" + c.yaml))
		if err != nil {
			if !strings.Contains(err.Error(), "line") {
				t.Errorf("%q: refused without naming where: %v", c.yaml, err)
			}
			continue
		}
		cfg.Defaults()
		err = cfg.Validate(config.RoleAPI)
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%q accepted: shutdown_grace=%s ack_wait=%s access_token_ttl=%s (Validate: %v)", c.yaml,
				cfg.ShutdownGrace.D(), cfg.Worker.AckWait.D(), cfg.OAuth.AccessTokenTTL.D(), err)
		}
	}
}
