// Package standalone runs the whole service in one process for a developer's machine and for
// tests: an embedded NATS server with JetStream, an embedded FerretDB, the platform simulator,
// the front end and the workers, all keeping their data under one folder. Parts the
// configuration names (a NATS URL, a MongoDB URI, a platform) are used instead of embedded ones.
package standalone

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"
	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/event"
	"go.yaml.in/yaml/v3"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded"
	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/platform/safemode"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/secretfile"
	"github.com/campus-it/ucs/pkg/service"
)

// Options configures Start.
type Options struct {
	// DataDir keeps every part's data; a restart with the same folder keeps everything.
	DataDir string
	// Config is the configuration file's content, or nil. Its sections are used where given.
	Config *config.Config
	// Listen overrides the configuration's listen address (tests pass 127.0.0.1:0).
	Listen string
	// Workers is the number of in-process delivery workers; 0 runs none, for a front end
	// alone (workers can join from outside with <DataDir>/worker.yaml).
	Workers int
	Logger  *slog.Logger
	Now     func() time.Time
	// MongoMonitor, when set, sees every command the front end and workers send to MongoDB.
	MongoMonitor *event.CommandMonitor
}

// Info is what standalone.json holds: where everything is and how to get in.
type Info struct {
	BaseURL     string `json:"base_url"`
	NATSURL     string `json:"nats_url"`
	MongoDBURI  string `json:"mongodb_uri"`
	PlatformURL string `json:"platform_url"`
	// TimeZone is the stack's time_zone, in which `api admin -data` shows times as it does.
	TimeZone string       `json:"time_zone,omitempty"`
	Clients  []InfoClient `json:"clients"`
	Users    []InfoUser   `json:"users"`
	// Platform holds the simulated account's credentials, kept so a restart reuses them.
	Platform *InfoPlatform `json:"platform,omitempty"`
	// Bindings of the demo users, written to the store at the first start; the followers are
	// the simulator's at every start.
	Bindings []config.Binding `json:"bindings,omitempty"`
	// UnboundFollowers follow the official account with no campus account bound: the binding
	// page's simulated "which follower are you" offers them, to bind 2020000009 to.
	UnboundFollowers []string `json:"unbound_followers,omitempty"`
	// NATS holds the credentials the embedded NATS server takes, generated at first start.
	NATS *InfoNATS `json:"nats,omitempty"`
}

// InfoNATS are the embedded NATS server's only credentials.
type InfoNATS struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// InfoClient is a seeded client.
type InfoClient struct {
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	Scope        string `json:"scope"`
}

// InfoUser is a seeded user of the built-in directory.
type InfoUser struct {
	UserID   string `json:"userid"`
	Password string `json:"password"`
}

// InfoPlatform is the simulated platform account.
type InfoPlatform struct {
	AppID         string `json:"appid"`
	Secret        string `json:"secret"`
	CallbackToken string `json:"callback_token"`
	// EncodingAESKey puts the simulated account's callbacks in safe mode (encrypted, signed
	// over the body); a file of an earlier version without one gets one at the next start.
	EncodingAESKey string `json:"encoding_aes_key,omitempty"`
}

// MemoryLimit is the soft limit of the Go heap that `api -standalone` sets unless GOMEMLIMIT
// is given: NATS, FerretDB, the simulator, the front end and a worker share one process on a
// developer's machine, and past this the garbage collector works harder rather than the process
// growing. It is a ceiling, not a target: a limit close to the live heap (which a backlog of
// 100,000 queued pushes and the front end's caches put near 150 MiB) makes the collector run
// without pause and costs half the throughput, so it sits well above what the loads of
// scripts/bench need.
const MemoryLimit = 512 << 20

// Demo identities seeded on first start.
const (
	DemoClient = "demo-app"
	TestClient = "fake-api-test"
	// UnboundUser is a directory user with no binding: pushes to it fail with that reason.
	UnboundUser = "2020000009"
)

// DemoUsers are the seeded users that follow the official account.
var DemoUsers = []string{"2020000001", "2020000002", "2020000003"}

// Stack is a running standalone service.
type Stack struct {
	Info    Info
	Config  *config.Config
	Sim     *simulator.Simulator
	DataDir string
	API     *service.API
	log     *slog.Logger
	closers []func()
	// cancel stops the front end, stopWork the workers (wg).
	cancel, stopWork context.CancelFunc
	wg               sync.WaitGroup
	// served is closed once the front end's Serve returned, with serveErr.
	served   chan struct{}
	serveErr error
}

// lockFile is held by the standalone process that runs on a data folder.
const lockFile = ".lock"

// stackFolder refuses a data folder that holds files of something else, since every file in
// the folder is made the owner's alone at start: an empty folder, one a stack wrote
// (standalone.json), or one holding only what a stack makes, is taken.
func stackFolder(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("data folder: %w", err)
	}
	if slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == "standalone.json" }) {
		return nil
	}
	for _, e := range entries {
		switch n := e.Name(); {
		case n == lockFile, n == "nats", n == "ferretdb", n == CredentialsDir, n == WorkerConfigFile, strings.HasSuffix(n, ".tmp"):
		default:
			return fmt.Errorf("data folder %s holds %s, which no standalone stack made: give an empty folder, or the folder of a stack", dir, n)
		}
	}
	return nil
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// Start starts everything and returns once the front end accepts requests.
func Start(ctx context.Context, o Options) (*Stack, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Workers < 0 {
		return nil, fmt.Errorf("workers: %d, want 0 or more", o.Workers)
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, err
	}
	// Only the owner may read the data folder: it holds every secret of the stack. Files
	// the embedded servers create later are the owner's alone too (umask 077); files of an
	// earlier version are made so.
	// A folder that is not a stack's is refused as it is, before anything changes it.
	if err := stackFolder(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	restrictUmask()
	if err := secretfile.PrivateDir(dir); err != nil {
		return nil, fmt.Errorf("data folder: %w", err)
	}
	// One stack a folder: two would run NATS and FerretDB on the same files, and lose what
	// either stored.
	lock := flock.New(filepath.Join(dir, lockFile))
	if locked, err := lock.TryLock(); err != nil || !locked {
		return nil, fmt.Errorf("data folder %s: in use by another standalone process (%s is locked)%s", dir, lockFile, errSuffix(err))
	}
	s := &Stack{DataDir: dir, log: o.Logger, served: make(chan struct{})}
	s.closers = append(s.closers, func() { _ = lock.Unlock() })
	ok := false
	defer func() {
		if !ok {
			s.shutdown()
		}
	}()
	if err := secretfile.Restrict(dir); err != nil {
		return nil, fmt.Errorf("data folder: %w", err)
	}
	cfg := &config.Config{}
	if o.Config != nil {
		c := *o.Config
		cfg = &c
	}
	if o.Listen != "" {
		cfg.Listen = o.Listen
	}
	seed, err := loadOrSeed(filepath.Join(dir, "standalone.json"))
	if err != nil {
		return nil, err
	}

	if cfg.Listen == "" {
		cfg.Listen = config.DefaultListen
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	s.closers = append(s.closers, func() { _ = ln.Close() })
	cfg.Listen = ln.Addr().String()
	if cfg.PublicURL == "" {
		// On this machine: a listen address for every interface (":8080", "0.0.0.0:8080") is
		// reached at 127.0.0.1. Clients elsewhere need public_url set to the address they use.
		host, port, _ := net.SplitHostPort(cfg.Listen)
		if !config.ReachableHost(host) {
			host = "127.0.0.1"
		}
		cfg.PublicURL = "http://" + net.JoinHostPort(host, port)
	}
	// Without a trailing slash, as Defaults leaves it: the simulator's callback address is
	// made from it before Defaults runs.
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")

	deps := service.Deps{Logger: o.Logger, Now: o.Now, MongoMonitor: o.MongoMonitor, Registry: prometheus.NewRegistry()}
	// One registry for the front end and the in-process workers: /metrics shows both. Without
	// workers, the front end's series alone: a worker's would read 0 whatever the workers do.
	if o.Workers == 0 {
		deps.Metrics = metrics.NewFrontEnd(deps.Registry)
	} else {
		deps.Metrics = metrics.New(deps.Registry)
	}
	ownNATS := cfg.NATS.URL == ""
	if ownNATS {
		n, err := embedded.StartNATS(embedded.NATSOptions{Dir: filepath.Join(dir, "nats"),
			User: seed.info.NATS.User, Password: seed.info.NATS.Password})
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, n.Shutdown)
		u, err := url.Parse(n.URL())
		if err != nil {
			return nil, err
		}
		u.User = url.UserPassword(seed.info.NATS.User, seed.info.NATS.Password)
		cfg.NATS.URL = u.String()
		deps.NATSInProcess = n.InProcess()
	}
	var ferret *embedded.FerretDB
	if cfg.MongoDB.URI == "" {
		if _, err := os.Stat(filepath.Join(dir, "ferretdb")); errors.Is(err, os.ErrNotExist) {
			seed.fresh = true // a new store (its folder removed to start afresh): seeded anew
		}
		f, err := embedded.StartFerretDB(embedded.FerretDBOptions{Dir: filepath.Join(dir, "ferretdb"),
			CredentialsDir: filepath.Join(dir, CredentialsDir)})
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, f.Shutdown)
		cfg.MongoDB.URI = f.URI()
		ferret = f
	}
	mergeSeed(cfg, seed)
	// The built-in directory's login form is on for development, beside any CAS the file names.
	cfg.OAuth.IdentityProviders.Local.Enabled = true
	if cfg.Platform.APIBase == "" {
		url, err := s.startSimulator(cfg, seed, o)
		if err != nil {
			return nil, err
		}
		cfg.Platform.APIBase = url
		if cfg.Platform.OAuthBase == "" {
			cfg.Platform.OAuthBase = url // the simulator serves the web authorization too
		}
		deps.Routes = s.sandboxRoutes(cfg, seed)
	}
	if len(cfg.Ops.Users) == 0 {
		// The operations page is on for the first demo user, who signs in with the password
		// in standalone.json.
		cfg.Ops.Users = []string{DemoUsers[0]}
	}
	cfg.Defaults()
	if err := cfg.Validate(config.RoleStandalone); err != nil {
		return nil, err
	}
	s.Config = cfg

	api, err := service.NewAPI(ctx, cfg, deps)
	if err != nil {
		return nil, err
	}
	s.API = api
	api.DrainDelay = 0 // no load balancer in front
	s.closers = append(s.closers, api.Close)
	// A NATS server the stack started, with no other front end: the receipts the last run took
	// as it stopped, which that server forgot were handed back, are applied now, not after
	// their ack wait.
	if ownNATS {
		if err := api.HandOutEventsAgain(ctx); err != nil {
			return nil, err
		}
	}
	if ferret != nil {
		if err := ferret.IndexIDs(ctx, cfg.MongoDB.Database); err != nil {
			return nil, err
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	s.stopWork = stopWork
	for range o.Workers {
		w, err := service.NewWorker(ctx, cfg, deps)
		if err != nil {
			return nil, err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer w.Close()
			if err := w.Run(workCtx); err != nil {
				o.Logger.Error("worker stopped", "err", err)
			}
		}()
	}
	go func() {
		defer close(s.served)
		s.serveErr = api.Serve(runCtx, ln)
	}()

	s.Info = seed.info
	s.Info.BaseURL = cfg.PublicURL
	s.Info.NATSURL = cfg.NATS.URL
	s.Info.MongoDBURI = cfg.MongoDB.URI
	s.Info.PlatformURL = cfg.Platform.APIBase
	s.Info.TimeZone = cfg.TimeZone
	if err := writeInfo(filepath.Join(dir, "standalone.json"), s.Info); err != nil {
		return nil, err
	}
	if err := writeWorkerConfig(filepath.Join(dir, WorkerConfigFile), cfg); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

func (s *Stack) startSimulator(cfg *config.Config, seed *seedState, o Options) (string, error) {
	p := seed.info.Platform
	if p.EncodingAESKey == "" {
		p.EncodingAESKey = letters(safemode.KeyLen)
	}
	if !config.ValidCallbackToken(p.CallbackToken) {
		// A token of an earlier version's data folder, which the platform's console would
		// not take: the simulator and the front end get a new one together.
		p.CallbackToken = letters(32)
	}
	cfg.Platform.AppID, cfg.Platform.Secret, cfg.Platform.CallbackToken = p.AppID, p.Secret, p.CallbackToken
	if cfg.Platform.EncodingAESKey == "" { // a key the file gives is kept: the simulator speaks it
		cfg.Platform.EncodingAESKey = p.EncodingAESKey
	} else if _, err := safemode.ParseKey(cfg.Platform.EncodingAESKey); err != nil {
		return "", fmt.Errorf("platform.encoding_aes_key: %w", err)
	}
	sim := simulator.New(simulator.Config{
		AppID: p.AppID, Secret: p.Secret,
		CallbackURL:   cfg.PublicURL + "/v1/infra/notification/mp/callback",
		CallbackToken: p.CallbackToken, EncodingAESKey: cfg.Platform.EncodingAESKey,
		// The binding page's host is the account's authorization domain, as on the platform.
		WebAuthHosts: []string{publicHost(cfg.PublicURL)},
		// /sim/messages is for a person to look at; the rest need not stay in memory.
		MaxSent: 10_000,
		Now:     o.Now,
		Logger:  o.Logger,
	})
	if cfg.Platform.Templates == nil {
		cfg.Platform.Templates = map[string]config.Template{}
	}
	for t, tpl := range DefaultTemplates() {
		if _, given := cfg.Platform.Templates[t]; !given {
			cfg.Platform.Templates[t] = tpl
		}
	}
	for _, tpl := range cfg.Platform.Templates {
		var kws []string
		for _, kw := range tpl.Fields {
			kws = append(kws, kw)
		}
		slices.Sort(kws)
		sim.AddTemplate(tpl.TemplateID, kws)
	}
	for _, b := range slices.Concat(cfg.Bindings, seed.info.Bindings) {
		sim.AddFollower(b.OpenID)
	}
	for _, openID := range seed.info.UnboundFollowers {
		sim.AddFollower(openID)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		sim.Close()
		return "", err
	}
	hs := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	s.closers = append(s.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		sim.Close()
	})
	s.Sim = sim
	return "http://" + ln.Addr().String(), nil
}

// publicHost is the host[:port] of the front end's public address.
func publicHost(publicURL string) string {
	u, err := url.Parse(publicURL)
	if err != nil {
		return ""
	}
	return u.Host
}

// DefaultTemplates maps every push type onto a simulator template whose keywords are thing1,
// thing2, … for the type's main items in order (thing values are at most 20 characters, as
// main items are).
func DefaultTemplates() map[string]config.Template {
	out := map[string]config.Template{}
	for _, t := range push.Types() {
		fields := map[string]string{}
		n := 0
		for _, f := range t.Fields {
			if f.Main {
				n++
				fields[f.Name] = fmt.Sprintf("thing%d", n)
			}
		}
		out[string(t.Type)] = config.Template{TemplateID: "tpl-" + string(t.Type), Fields: fields}
	}
	return out
}

// Wait blocks until the front end stops, returning why.
func (s *Stack) Wait() error {
	<-s.served
	return s.serveErr
}

// Close stops everything, in order: the workers (once the deliveries they hold are done), the
// simulator's pushes of the events it still holds (the receipts of those last sends), which
// the front end still takes, then the front end (once the requests under way are answered),
// the store and the queue.
func (s *Stack) Close() {
	if s.stopWork != nil {
		s.stopWork()
	}
	s.wg.Wait()
	if s.Sim != nil {
		s.Sim.Close() // pushes what it holds at once, and waits for the answers
	}
	if s.cancel != nil {
		s.cancel()
	}
	_ = s.Wait()
	s.shutdown()
}

func (s *Stack) shutdown() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

type seedState struct {
	info Info
	// fresh says the identities were made at this start: the seeded bindings are written to
	// the store then only, so that a binding made since (on the binding page) stays.
	fresh bool
	// secrets are the seeded clients' configurations.
	clients []config.Client
	users   []config.User
}

// loadOrSeed reads the seeded identities of an earlier start, or makes new ones.
func loadOrSeed(path string) (*seedState, error) {
	var info Info
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &info); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	case errors.Is(err, os.ErrNotExist):
		info = Info{
			Clients: []InfoClient{
				{ClientID: DemoClient, ClientSecret: secret(), Scope: "openid notification.mp"},
				{ClientID: TestClient, ClientSecret: secret(), Scope: "fake_api"},
			},
			Platform: &InfoPlatform{AppID: "wx" + hexish(16), Secret: hexish(32), CallbackToken: letters(32)},
		}
		for _, u := range append(slices.Clone(DemoUsers), UnboundUser) {
			info.Users = append(info.Users, InfoUser{UserID: u, Password: secret()[:12]})
		}
		for _, u := range DemoUsers {
			info.Bindings = append(info.Bindings, config.Binding{UserID: u, OpenID: "o" + secret()[:27]})
		}
	default:
		return nil, err
	}
	fresh := errors.Is(err, os.ErrNotExist)
	if len(info.UnboundFollowers) == 0 { // also a file of an earlier version
		info.UnboundFollowers = []string{"o" + secret()[:27]}
	}
	if info.Platform == nil {
		return nil, fmt.Errorf("%s: no platform section; remove the file to seed anew", path)
	}
	if info.NATS == nil { // a file of an earlier version: credentials from now on
		info.NATS = &InfoNATS{User: "ucs", Password: secret()}
	}
	st := &seedState{info: info, fresh: fresh}
	for _, c := range info.Clients {
		cc := config.Client{ClientID: c.ClientID, ClientSecret: c.ClientSecret}
		switch c.ClientID {
		case DemoClient:
			cc.Grants = []string{oauth.GrantClientCredentials, oauth.GrantAuthorizationCode, oauth.GrantRefreshToken}
			cc.Scopes = []string{oauth.ScopeOpenID, oauth.ScopeNotificationMP}
			cc.RedirectURIs = []string{"http://127.0.0.1:8081/callback"}
		case TestClient:
			cc.Grants = []string{oauth.GrantClientCredentials}
			cc.Scopes = []string{oauth.ScopeFakeAPI}
		default:
			continue
		}
		st.clients = append(st.clients, cc)
	}
	for _, u := range info.Users {
		st.users = append(st.users, config.User{UserID: u.UserID, Password: u.Password})
	}
	return st, nil
}

// mergeSeed adds the seeded identities to what the configuration gives; the file wins where
// both name the same client, user or binding. The seeded bindings are added at the first start
// only: written to the store then, they are the store's to keep or change (on the binding
// page), and a later start must not put them back over a binding made since.
func mergeSeed(cfg *config.Config, st *seedState) {
	for _, c := range st.clients {
		if _, given := cfg.Client(c.ClientID); !given {
			cfg.OAuth.Clients = append(cfg.OAuth.Clients, c)
		}
	}
	for _, u := range st.users {
		if !slices.ContainsFunc(cfg.Directory.Users, func(x config.User) bool { return x.UserID == u.UserID }) {
			cfg.Directory.Users = append(cfg.Directory.Users, u)
		}
	}
	for _, b := range st.info.Bindings {
		if st.fresh && !slices.ContainsFunc(cfg.Bindings, func(x config.Binding) bool { return x.UserID == b.UserID }) {
			cfg.Bindings = append(cfg.Bindings, b)
		}
	}
}

func writeInfo(path string, info Info) error {
	// Not escaped for HTML: mongodb_uri's '&' is copied from the file as it is.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(info); err != nil {
		return err
	}
	return writeSecret(path, b.Bytes())
}

// writeSecret replaces the file at path with b, readable by the owner only.
func writeSecret(path string, b []byte) error { return secretfile.Write(path, b) }

// CredentialsDir is the folder of the data folder that holds the embedded FerretDB's
// certificates: the server's, and the one client certificate it accepts.
const CredentialsDir = "credentials"

// WorkerConfigFile is the worker configuration the stack writes into its data folder:
// `go run ./worker -config <data>/worker.yaml` adds a delivery worker to the running stack.
const WorkerConfigFile = "worker.yaml"

// workerConfig is the part of the configuration a worker reads.
type workerConfig struct {
	TimeZone string          `yaml:"time_zone"`
	NATS     config.NATS     `yaml:"nats"`
	MongoDB  config.MongoDB  `yaml:"mongodb"`
	Platform config.Platform `yaml:"platform"`
	Worker   config.Worker   `yaml:"worker"`
}

// writeWorkerConfig writes what a worker process needs to join the stack: its NATS and
// MongoDB (the embedded ones, whose ports change with every start), and the platform account
// (the simulator's, or the configuration's) with its templates.
func writeWorkerConfig(path string, cfg *config.Config) error {
	p := cfg.Platform
	p.CallbackToken, p.EncodingAESKey = "", "" // the front end's, not a worker's
	w := cfg.Worker
	// Several worker processes start from this file on one machine: each takes a free port
	// for its probes and metrics, and logs it.
	w.Listen = "127.0.0.1:0"
	b, err := yaml.Marshal(workerConfig{TimeZone: cfg.TimeZone, NATS: cfg.NATS, MongoDB: cfg.MongoDB, Platform: p, Worker: w})
	if err != nil {
		return err
	}
	head := "# A delivery worker for the running standalone stack, rewritten at every start:\n" +
		"#   go run ./worker -config " + path + "\n"
	return writeSecret(path, append([]byte(head), b...))
}

func secret() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// letters makes a random secret of n letters and digits, as the platform's EncodingAESKey (43)
// and callback Token (3 to 32) are.
func letters(n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	out := make([]byte, 0, n)
	var b [64]byte
	for len(out) < n {
		_, _ = rand.Read(b[:])
		for _, c := range b {
			// 248 is the largest multiple of 62 a byte holds: below it every letter is as likely.
			if c < 248 && len(out) < n {
				out = append(out, alphabet[c%62])
			}
		}
	}
	return string(out)
}

// redacted is a URL, or a comma-separated list of them (NATS servers, a MongoDB URI's hosts),
// without the passwords and tokens it carries, in its user information or its query; "" when
// it does not parse.
func redacted(u string) string {
	parts := strings.Split(u, ",") // a list of servers, or a MongoDB URI's hosts
	for i, part := range parts {
		p, err := url.Parse(part)
		if err != nil {
			return ""
		}
		if q, masked := p.Query(), false; len(q) > 0 {
			for k := range q {
				if strings.Contains(strings.ToLower(k), "password") {
					q.Set(k, "xxxxx")
					masked = true
				}
			}
			if masked {
				p.RawQuery = q.Encode()
			}
		}
		if _, hasPassword := p.User.Password(); p.User != nil && !hasPassword {
			p.User = url.User("xxxxx") // a user without a password is a token (NATS)
		}
		parts[i] = p.Redacted()
	}
	return strings.Join(parts, ",")
}

func hexish(n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = digits[b[i]%16]
	}
	return string(b)
}

// PrintWalkthrough writes commands a person can paste to try the running service. Secrets are
// not printed: the commands read them from standalone.json.
func (s *Stack) PrintWalkthrough(w io.Writer) {
	base := s.Info.BaseURL
	info := filepath.Join(s.DataDir, "standalone.json")
	fmt.Fprintf(w, `
The campus identity and notification service is running (standalone).
  front end     %[1]s
  NATS          %[2]s
  MongoDB       %[3]s  (FerretDB, SQLite files in %[4]s)
  platform      %[5]s  (simulator)
  everything    %[6]s

Try it (paste into a shell):

  SECRET=$(grep -A1 '"client_id": "%[7]s"' %[6]s | sed -n 's/.*"client_secret": "\(.*\)".*/\1/p')
  TOKEN=$(curl -s %[1]s/v1/token -d grant_type=client_credentials \
    -d client_id=%[7]s -d client_secret=$SECRET | sed -E 's/.*"access_token":"([^"]+)".*/\1/')

  UCS=$(curl -s %[1]s/v1/infra/notification/mp -H "Authorization: Bearer $TOKEN" \
    -H 'Content-Type: application/json' \
    -d '{"userId":"%[8]s","type":"TDL","data":{"header":"您有一条待办","type":"请假审批","list":"学生请假","step":"辅导员审批","content":"张三的请假申请待您审批","remark":"请尽快处理"}}' \
    | sed -E 's/.*"ucsId":"([^"]+)".*/\1/'); echo $UCS

  curl -s %[1]s/v1/infra/notification/mp/$UCS -H "Authorization: Bearer $TOKEN"

Message types and their fields:   curl -s %[1]s/v1/meta/notification/mp/types
What the simulated platform got:  curl -s %[5]s/sim/messages
The demo users' phones:           %[1]s/sandbox
The operations page:              %[1]s/ops  (sign in as %[8]s, password in %[6]s)
Bind a campus account to a follower (as a student, in a browser):  %[1]s/bind
  (user %[9]s has no binding; its password is in %[6]s)

`, base, redacted(s.Info.NATSURL), redacted(s.Info.MongoDBURI), filepath.Join(s.DataDir, "ferretdb"), s.Info.PlatformURL,
		info, DemoClient, DemoUsers[0], UnboundUser)
}
