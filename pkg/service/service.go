// Package service assembles the two programs from a configuration: the front end (API) and the
// delivery worker (Worker). The api and worker commands and standalone mode all build them here,
// so that production and a developer's machine run the same wiring.
package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/event"
	"golang.org/x/sync/errgroup"

	"github.com/campus-it/ucs/pkg/activity"
	"github.com/campus-it/ucs/pkg/announce"
	"github.com/campus-it/ucs/pkg/cas"
	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/keys"
	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/natskv"
	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/sending"
	"github.com/campus-it/ucs/pkg/server"
	"github.com/campus-it/ucs/pkg/store"
)

// Deps are what the programs take from outside the configuration.
type Deps struct {
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// HTTPClient is used for the platform; nil means the platform client's default.
	HTTPClient *http.Client
	// MongoMonitor, when set, sees every command sent to MongoDB.
	MongoMonitor *event.CommandMonitor
	// NATSInProcess, when set, is a NATS server in this process to connect to directly,
	// without a socket (the standalone stack's embedded server).
	NATSInProcess nats.InProcessConnProvider
	// Registry holds the program's metrics, served at /metrics; nil makes a new one. Each
	// program needs its own.
	Registry *prometheus.Registry
	// Metrics, when set, are the metrics registered on Registry that the parts of one process
	// share (the standalone stack's front end and in-process workers: metrics.New); nil makes
	// those of the part on Registry (metrics.NewFrontEnd, metrics.NewWorker), so that each
	// program exports what it does.
	Metrics *metrics.Metrics
	// Routes, when set, adds routes of the program that runs the front end to it (the
	// standalone stack's sandbox phones).
	Routes func(e *echo.Echo)
}

func (d *Deps) fill() {
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
}

// QueueConfig is the stream and consumer configuration of cfg.
func QueueConfig(cfg *config.Config) queue.Config {
	return queue.Config{
		Stream: cfg.NATS.Stream, Consumer: cfg.NATS.Consumer, Replicas: cfg.NATS.Replicas,
		MaxBytes: cfg.NATS.MaxBytes, MaxAge: cfg.NATS.MaxAge.D(), AckWait: cfg.Worker.AckWait.D(),
	}
}

// connections are what both programs open.
type connections struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	st     *store.Store
	closed chan struct{} // closed when nc is
}

func connect(ctx context.Context, cfg *config.Config, d Deps, name string) (*connections, error) {
	st, err := store.Open(ctx, store.Options{
		URI: cfg.MongoDB.URI, Database: cfg.MongoDB.Database, Retention: cfg.MongoDB.Retention.D(),
		Now: d.Now, Logger: d.Logger, Monitor: d.MongoMonitor,
	})
	if err != nil {
		return nil, err
	}
	nc, js, closed, err := connectNATS(cfg, d, name)
	if err != nil {
		_ = st.Close(context.Background())
		return nil, err
	}
	// A stream left by an earlier version is converted first; nothing in it is lost.
	if _, err := queue.Migrate(ctx, js, QueueConfig(cfg), d.Logger); err != nil {
		nc.Close()
		_ = st.Close(context.Background())
		return nil, err
	}
	stream, err := queue.EnsureStream(ctx, js, QueueConfig(cfg))
	if err != nil {
		nc.Close()
		_ = st.Close(context.Background())
		return nil, err
	}
	return &connections{nc: nc, js: js, stream: stream, st: st, closed: closed}, nil
}

// connectNATS connects to NATS; closed is closed when the connection is.
func connectNATS(cfg *config.Config, d Deps, name string) (nc *nats.Conn, js jetstream.JetStream, closed chan struct{}, err error) {
	closed = make(chan struct{})
	opts := []nats.Option{nats.Name(name),
		nats.MaxReconnects(-1),
		// No publish is kept for later while the connection is down: a push answered 503
		// then must not be stored once it comes back, or the caller's retry makes two.
		nats.ReconnectBufSize(-1),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				d.Logger.Warn("disconnected from nats", "err", err)
			}
		}),
		// The address only: a user part of nats.url may be a token, which ConnectedUrlRedacted
		// leaves in place (it hides only a password).
		nats.ReconnectHandler(func(c *nats.Conn) { d.Logger.Info("reconnected to nats", "addr", c.ConnectedAddr()) }),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
	}
	if d.NATSInProcess != nil {
		opts = append(opts, nats.InProcessServer(d.NATSInProcess))
	}
	nc, err = nats.Connect(cfg.NATS.URL, opts...)
	if err != nil {
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			// url.Error quotes the URL, and so does the error it wraps, with any password in it:
			// left out.
			err = errors.New("a server's URL does not parse")
		}
		return nil, nil, nil, fmt.Errorf("connect to nats: %w", err)
	}
	if js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, closed, nil
}

// pending reads the messages of the stream the workers have not finished: those their
// consumer has not handed out yet, and those handed out and not yet answered.
func (c *connections) pending(consumer string) func() (float64, error) {
	return func() (float64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		pushes, found, err := c.consumerPending(ctx, consumer)
		if err != nil {
			return 0, err
		}
		if !found {
			// No worker has started yet: every message in the stream waits.
			info, err := c.stream.Info(ctx)
			if err != nil {
				return 0, err
			}
			return float64(info.State.Msgs), nil
		}
		return pushes, nil
	}
}

// consumerPending reads the messages the consumer name has not finished, and whether it exists.
func (c *connections) consumerPending(ctx context.Context, name string) (float64, bool, error) {
	cons, err := c.stream.Consumer(ctx, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, false, err
	}
	return float64(info.NumPending + uint64(info.NumAckPending)), true, nil
}

func (c *connections) close() {
	// Drain only begins the close: the acknowledgements and hand-backs published last (a
	// receipt applied as the program stops, the events it gives back) reach NATS before the
	// program ends, or NATS holds them for another program only after their ack wait. Bounded,
	// for a NATS that does not answer.
	if err := c.nc.Drain(); err != nil {
		c.nc.Close()
	}
	t := time.NewTimer(natsCloseWait)
	select {
	case <-c.closed:
	case <-t.C:
		c.nc.Close()
	}
	t.Stop()
	// A store that does not answer is let go after a while: a stopping program must end
	// within its grace period, not wait out the driver's server selection.
	ctx, cancel := context.WithTimeout(context.Background(), storeCloseWait)
	defer cancel()
	_ = c.st.Close(ctx)
}

// storeCloseWait bounds the disconnect from the store when a program stops.
const storeCloseWait = time.Second

// natsCloseWait bounds the drain of the NATS connection when a program stops.
const natsCloseWait = 500 * time.Millisecond

// API is the front end with its connections.
type API struct {
	cfg    *config.Config
	deps   Deps
	conn   *connections
	writer *store.Writer
	// events keeps platform events (receipts, follows) through store outages.
	events *queue.PlatformEvents
	Server *server.Server
	// Notify is the push pipeline's front half, which Server adapts to HTTP.
	Notify  *notification.Service
	Store   *store.Store
	Keys    *keys.Set
	oauth   *oauth.Service
	Clients *oauth.Clients
	// caches are the shared state buckets the front end follows.
	caches  []*natskv.Cache
	closers []func()
	Metrics *metrics.Metrics
	// DrainDelay is how long a stopping front end keeps serving with /readyz failing before it
	// closes its listener: a fifth of shutdown_grace, at most 5 s. 0 where no load balancer
	// is in front (a developer's machine).
	DrainDelay time.Duration
	// bg is the work Serve runs beside the listener (the store's sweeper, key refresh, client
	// reload, applying kept platform events, the stream's check), most of which use the store:
	// Serve's return and Close end it and wait for it, so that the store is never closed under it.
	bg struct {
		mu     sync.Mutex
		cancel context.CancelFunc
		g      *errgroup.Group
	}
}

// RevocationsBucket is the NATS key-value bucket of ended sessions and revoked token families,
// which every front end honours at once.
const RevocationsBucket = "ucs_revocations"

// SharedCacheSize bounds the entries each front end keeps in memory of RevocationsBucket and
// of FailuresBucket: with keys of at most 140 bytes and values of at most 200, at most 30 MB
// each, whatever callers do (see natskv.Cache).
const SharedCacheSize = 50_000

// FailuresBucket holds the failed authentications and blocks of brute-force detection, and
// RateBucket the token buckets of the rate limits; both are shared by every front end.
const (
	FailuresBucket = "ucs_failures"
	RateBucket     = "ucs_rates"
	// IdempotencyBucket holds the records of Idempotency-Keys for 24 hours, KeyRecordBytes of
	// them at most.
	IdempotencyBucket = "ucs_idempotency"
	// KeySharesBucket holds each client's share of the Idempotency-Key records (KeyShare).
	KeySharesBucket = "ucs_key_shares"
	// CallbackNoncesBucket holds the (timestamp, nonce) pairs of the platform's callbacks, each
	// accepted once by whichever front end takes it first.
	CallbackNoncesBucket = "ucs_callback_nonces"
)

// KeyRecordBytes bounds the Idempotency-Key records: a quarter of the push stream's
// nats.max_bytes (2 GiB by default, the records of about eight million keyed pushes). A request
// is refused with its key when the records are full, or its client's share of them (KeyShare)
// is used up: 503, nothing accepted, until the oldest records expire or the share has room.
// Forgetting a record early instead would let a retry take the key afresh and get ucsIds the
// stream's dedupe never stored.
func KeyRecordBytes(cfg *config.Config) int64 { return cfg.NATS.MaxBytes / 4 }

// KeyShare is each client's share of the Idempotency-Key records, a token bucket of bytes: an
// eighth of KeyRecordBytes at once, refilled at that much a day (the records' lifetime), so
// that one client's live records take at most a quarter of the bucket and a client that
// fills its share keeps no other client from a new key. It is at least minKeyShare, whatever
// nats.max_bytes.
func KeyShare(cfg *config.Config) natskv.Rate {
	share := max(KeyRecordBytes(cfg)/8, minKeyShare)
	return natskv.Rate{PerSecond: float64(share) / notification.KeyTTL.Seconds(), Burst: int(share)}
}

// keyShares are the clients' shares of the Idempotency-Key records (notification.KeyShares),
// token buckets of bytes in the bucket KeySharesBucket.
type keyShares struct {
	tb   *natskv.TokenBuckets
	rate natskv.Rate
}

func (k keyShares) Take(ctx context.Context, client string, bytes int) (bool, time.Duration, error) {
	return k.tb.TakeN(ctx, shareKey(client), bytes, k.rate)
}

func (k keyShares) Give(ctx context.Context, client string, bytes int) error {
	return k.tb.GiveN(ctx, shareKey(client), bytes, k.rate)
}

// shareKey is client's key in KeySharesBucket: a client id may hold what a key may not.
func shareKey(client string) string {
	sum := sha256.Sum256([]byte(client))
	return "share." + hex.EncodeToString(sum[:16])
}

// minKeyShare is the least share of a client: the records of two batches of 1,000 (a claim
// of one is about 33 KB).
const minKeyShare = 96 << 10

// NewAPI connects to NATS and MongoDB, loads or creates the signing key, loads the bindings of
// the configuration into the store, and builds the server.
func NewAPI(ctx context.Context, cfg *config.Config, d Deps) (*API, error) {
	d.fill()
	conn, err := connect(ctx, cfg, d, "ucs-api")
	if err != nil {
		return nil, err
	}
	a := &API{cfg: cfg, deps: d, conn: conn, Store: conn.st, DrainDelay: min(cfg.ShutdownGrace.D()/5, 5*time.Second)}
	if err := a.build(ctx); err != nil {
		for _, m := range a.caches {
			m.Close()
		}
		for _, c := range a.closers {
			c()
		}
		conn.close()
		return nil, err
	}
	return a, nil
}

func (a *API) build(ctx context.Context) error {
	cfg, d := a.cfg, a.deps
	ks, err := keys.Load(ctx, a.Store, cfg.OAuth.SigningAlg, d.Now)
	if err != nil {
		return fmt.Errorf("signing key: %w", err)
	}
	a.Keys = ks
	// ID tokens: RS256 by default, as OpenID Connect prescribes; ES256 for clients that ask.
	idKeys := map[string]*keys.Set{ks.Alg(): ks}
	for _, alg := range []string{"RS256", "ES256"} {
		if idKeys[alg] == nil {
			if idKeys[alg], err = keys.Load(ctx, a.Store, alg, d.Now); err != nil {
				return fmt.Errorf("signing key: %w", err)
			}
		}
	}
	// The clients live in the store: the file's are loaded into it, then every client
	// registered there (the admin commands' too) is read, and read again every ClientsReload.
	if err := LoadClients(ctx, a.Store, cfg.OAuth.Clients); err != nil {
		return err
	}
	clients := oauth.NewClients(nil, cfg.OAuth.AccessTokenTTL.D())
	if err := clients.Reload(ctx, a.Store); err != nil {
		return fmt.Errorf("registered clients: %w", err)
	}
	a.Clients = clients
	if err := LoadBindings(ctx, a.Store, cfg.Bindings, d.Logger); err != nil {
		return err
	}
	loc, err := time.LoadLocation(cfg.TimeZone)
	if err != nil {
		return err
	}
	// A revocation must outlive every access token it refuses: the longest lifetime a client
	// may be given, plus the clock skew the checks allow.
	revoked, err := natskv.OpenCache(ctx, a.conn.js, RevocationsBucket, config.MaxAccessTokenTTL+time.Hour, cfg.NATS.Replicas, SharedCacheSize, d.Now)
	if err != nil {
		return err
	}
	a.caches = append(a.caches, revoked)
	// Failures are forgotten after failure_reset without one: the bucket's entries expire then.
	failures, err := natskv.OpenCache(ctx, a.conn.js, FailuresBucket, cfg.OAuth.BruteForce.FailureReset.D(), cfg.NATS.Replicas, SharedCacheSize, d.Now)
	if err != nil {
		return err
	}
	a.caches = append(a.caches, failures)
	buckets, err := natskv.OpenCounters(ctx, a.conn.js, RateBucket, time.Hour, cfg.NATS.Replicas)
	if err != nil {
		return err
	}
	a.Metrics = d.Metrics
	if a.Metrics == nil {
		a.Metrics = metrics.NewFrontEnd(d.Registry)
	}
	svc := &oauth.Service{Metrics: a.Metrics,
		Issuer: cfg.PublicURL + "/auth/realms/" + cfg.OAuth.Realm, Clients: clients, Keys: ks, IDKeys: idKeys,
		Store: a.Store, RefreshTTL: cfg.OAuth.RefreshTokenTTL.D(), SessionTTL: cfg.OAuth.SessionTTL.D(), Revoked: revoked, Now: d.Now, Logger: d.Logger,
		Backchannel: oauth.NewBackchannel(oauth.BackchannelConfig{Logger: d.Logger}),
		Guard: &oauth.Guard{Limits: rateLimits(cfg.OAuth.RateLimits), BruteForce: bruteForce(cfg.OAuth.BruteForce), Failures: failures,
			Buckets: natskv.NewTokenBuckets(buckets, natskv.TokenBucketsConfig{Now: d.Now}), Now: d.Now, Logger: d.Logger},
	}
	a.oauth = svc
	a.closers = append(a.closers, svc.Backchannel.Close)
	var proxies []*net.IPNet
	for _, cidr := range cfg.OAuth.TrustedProxies {
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			return err
		}
		proxies = append(proxies, n)
	}
	signIn, err := buildSignIn(ctx, cfg, a.Store, d)
	if err != nil {
		return err
	}
	bind, err := buildBind(ctx, cfg, a.Store, d, a.conn.nc, signIn)
	if err != nil {
		return err
	}
	records, err := natskv.OpenRecords(ctx, a.conn.js, IdempotencyBucket, notification.KeyTTL, cfg.NATS.Replicas, KeyRecordBytes(cfg))
	if err != nil {
		return err
	}
	// A share's state must outlive the records it counts, or an idle day would not be needed
	// to refill it.
	shareKV, err := natskv.OpenCounters(ctx, a.conn.js, KeySharesBucket, notification.KeyTTL, cfg.NATS.Replicas)
	if err != nil {
		return err
	}
	shares, shareRate := natskv.NewTokenBuckets(shareKV, natskv.TokenBucketsConfig{Now: d.Now}), KeyShare(cfg)
	pause, err := sending.OpenPause(ctx, a.conn.js, cfg.NATS.Replicas, d.Now)
	if err != nil {
		return err
	}
	a.closers = append(a.closers, pause.Close)
	events, err := queue.OpenPlatformEvents(ctx, a.conn.js, QueueConfig(cfg))
	if err != nil {
		return err
	}
	a.events = events
	nonces, err := natskv.OpenRecords(ctx, a.conn.js, CallbackNoncesBucket, platform.NoncesTTL, cfg.NATS.Replicas, 0)
	if err != nil {
		return err
	}
	metrics.PendingFunc(d.Registry, a.conn.pending(cfg.NATS.Consumer))
	// act counts what the operations page shows; nil (counting nothing) when the page is off.
	var ops *server.Ops
	var act *activity.Recorder
	if len(cfg.Ops.Users) > 0 {
		act = activity.New(d.Now)
		ops = &server.Ops{Users: cfg.Ops.Users, Activity: act,
			Backlog: a.conn.pending(cfg.NATS.Consumer), History: a.Store.History}
	}
	publisher, err := queue.NewPublisher(a.conn.js)
	if err != nil {
		return err
	}
	a.writer = a.Store.NewWriter(store.WriterOptions{})
	parser, err := push.NewParser(cfg.Platform.TemplateFields())
	if err != nil {
		return err
	}
	// The workers' consumer is made here too when missing, as the stream is: a lookup tells a
	// push no worker can have received yet by it (queue.Waiting), and without it reads the store.
	if _, err := a.conn.stream.Consumer(ctx, cfg.NATS.Consumer); errors.Is(err, jetstream.ErrConsumerNotFound) {
		if _, err := queue.EnsureConsumer(ctx, a.conn.js, QueueConfig(cfg)); err != nil {
			d.Logger.Warn("the workers' consumer could not be made; lookups read the store until a worker makes it", "err", err)
		}
	}
	waiting := queue.NewWaiting(a.conn.js, a.conn.stream, cfg.NATS.Consumer)
	a.Notify, err = notification.New(notification.Config{
		Publisher: publisher, Waiting: waiting, Store: a.Store, Events: a.writer,
		KeepEvent: events.Keep, Records: records, Paused: pause.Paused, Location: loc,
		KeyShares: keyShares{tb: shares, rate: shareRate},
		Announce:  announce.NewFinals(a.conn.nc).Announce,
		Accepted:  func(n int) { a.Metrics.Accepted(n); act.Accepted(n) },
		Final:     act.Final, Sent: act.Sent, ReceiptUnknown: a.Metrics.ReceiptUnknown,
		Replayed: a.Metrics.Replayed, Rejected: a.Metrics.Rejected,
		Now: d.Now, Logger: d.Logger,
	})
	if err != nil {
		a.writer.Close()
		return err
	}
	srv, err := server.New(server.Config{
		Push:    parser,
		Metrics: a.Metrics, Paused: pause.Paused, Ops: ops, Routes: d.Routes,
		Realm: cfg.OAuth.Realm, OAuth: svc, Verifier: oauth.NewVerifier(svc, 0),
		Notify: a.Notify, Waiting: waiting, Store: a.Store,
		CallbackToken: cfg.Platform.CallbackToken, CallbackAESKey: cfg.Platform.EncodingAESKey, AppID: cfg.Platform.AppID,
		Nonces: nonces, Location: loc, SignIn: signIn, Bind: bind,
		QueueReady: func() error {
			if !a.conn.nc.IsConnected() {
				return errors.New("not connected to nats")
			}
			return nil
		},
		TrustedProxies: proxies, Now: d.Now, Logger: d.Logger,
	})
	if err != nil {
		a.writer.Close()
		return err
	}
	if _, err := announce.SubscribeFinals(a.conn.nc, a.Notify.Remember); err != nil {
		a.writer.Close()
		return err
	}
	if _, err := announce.SubscribeSent(a.conn.nc, a.Notify.RememberSent); err != nil {
		a.writer.Close()
		return err
	}
	a.Server = srv
	return nil
}

// buildSignIn configures the browser side of sign-in from the identity providers of cfg; nil
// when none is configured.
func buildSignIn(ctx context.Context, cfg *config.Config, st *store.Store, d Deps) (*server.SignIn, error) {
	idp := cfg.OAuth.IdentityProviders
	if idp.CAS.URL == "" && !idp.Local.Enabled {
		return nil, nil
	}
	key, err := st.SharedSecret(ctx, "auth-requests", oauth.NewSealingKey)
	if err != nil {
		return nil, err
	}
	sealer, err := oauth.NewSealer(key, "authorization request")
	if err != nil {
		return nil, err
	}
	logouts, err := oauth.NewSealer(key, "logout confirmation")
	if err != nil {
		return nil, err
	}
	si := &server.SignIn{Store: st, Requests: sealer, Logouts: logouts, DefaultIDP: idp.Default, SessionTTL: cfg.OAuth.SessionTTL.D(), PublicURL: cfg.PublicURL}
	if idp.Local.Enabled {
		dir, err := oauth.NewDirectory(directoryUsers(cfg.Directory))
		if err != nil {
			return nil, err
		}
		si.Directory = dir
	}
	if idp.CAS.URL != "" {
		c, err := cas.New(cas.Config{BaseURL: idp.CAS.URL, HTTPClient: d.HTTPClient})
		if err != nil {
			return nil, err
		}
		si.CAS = c
	}
	return si, nil
}

// LoadClients writes the clients of the configuration into the store (store.SyncConfigClients
// says how a start treats clients stored before). Only the hash of each secret is stored.
func LoadClients(ctx context.Context, st *store.Store, cs []config.Client) error {
	recs := make([]store.Client, 0, len(cs))
	for _, c := range cs {
		r, err := ClientRecord(c)
		if err != nil {
			return err
		}
		recs = append(recs, r)
	}
	return st.SyncConfigClients(ctx, recs)
}

// ClientRecord returns a client of the configuration as the store keeps it, with the digest of
// its entry (store.Client.ConfigDigest).
func ClientRecord(c config.Client) (store.Client, error) {
	h, err := c.SecretHash()
	if err != nil {
		return store.Client{}, fmt.Errorf("client %s: %w", c.ClientID, err)
	}
	r := store.Client{
		ID: c.ClientID, SecretSHA256: hex.EncodeToString(h[:]), Grants: c.Grants, Scopes: c.Scopes,
		RedirectURIs: c.RedirectURIs, PostLogoutRedirectURIs: c.PostLogoutRedirectURIs, SkipConsent: c.SkipConsent,
		AccessTokenTTL: int64(c.AccessTokenTTL.D() / time.Second), Introspect: c.Introspect, RateLimit: c.RateLimit,
		IDTokenAlg: c.IDTokenAlg, RefreshTokens: c.RefreshTokens, Source: store.SourceConfig,
		BackchannelLogoutURI: c.BackchannelLogoutURI, BackchannelLogoutSessionRequired: c.BackchannelLogoutSessionRequired,
	}
	// The digest covers every field the file gives, the secret only as its hash: a changed
	// entry is loaded again, an unchanged one leaves what an operator changed alone.
	b, err := json.Marshal(r)
	if err != nil {
		return r, err
	}
	d := sha256.Sum256(append(b, r.SecretSHA256...))
	r.ConfigDigest = hex.EncodeToString(d[:])
	return r, nil
}

// LoadBindings writes the bindings of the configuration into the store as the binding page
// binds (store.Bind): with the follower's owner, which the binding page reads, over the user
// number's earlier binding, and over another user number's binding of the same follower (one
// follower, one user number), which is logged: at every start the file's bindings hold. One
// already as configured costs two reads by key and no write. A binding's openid is taken as
// following until the platform's unsubscribe event says otherwise.
func LoadBindings(ctx context.Context, st *store.Store, bs []config.Binding, log *slog.Logger) error {
	for _, b := range bs {
		owner, err := st.BindingOf(ctx, b.OpenID)
		switch {
		case err == nil && owner.UserID == b.UserID:
			continue
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("bindings: %w", err)
		}
		replaced, err := st.Bind(ctx, b.UserID, b.OpenID)
		if err != nil {
			return fmt.Errorf("bindings: %w", err)
		}
		if replaced != "" {
			log.Warn("a binding of the configuration replaced another user number's binding of its follower",
				"userid", b.UserID, "replaced", replaced)
		}
	}
	return nil
}

// Serve answers HTTP on ln until ctx ends, then stops gracefully within shutdown_grace:
// /readyz fails first, for DrainDelay, in which load balancers stop sending requests and those
// that come are still served; then the listener closes and the requests under way finish (a
// push under way gets its ucsId).
func (a *API) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           a.Server,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    32 << 10,
	}
	a.startBackground(ctx)
	defer a.stopBackground()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	grace := a.cfg.ShutdownGrace.D()
	if grace <= 0 {
		grace = 25 * time.Second
	}
	a.Server.Stopping()
	delay := min(a.DrainDelay, grace/2)
	a.deps.Logger.Info("stopping: readiness fails now; the listener closes after a delay", "delay", delay, "grace", grace)
	time.Sleep(delay) // the load balancer's time to notice /readyz; requests are still served
	sctx, cancel := context.WithTimeout(context.Background(), grace-delay)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return err
	}
	// hs.Serve returned http.ErrServerClosed at once; anything else failed on its own.
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// startBackground starts the work Serve runs beside the listener, until ctx ends or
// stopBackground is called.
func (a *API) startBackground(ctx context.Context) {
	a.bg.mu.Lock()
	defer a.bg.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	g := new(errgroup.Group)
	// The first sweep a minute after start, out of the way of the start itself.
	g.Go(func() error { a.Store.RunSweeper(ctx, time.Minute, time.Hour); return nil })
	g.Go(func() error { a.refreshKeys(ctx, keys.ReloadEvery); return nil })
	g.Go(func() error { a.Clients.Follow(ctx, a.Store, oauth.ClientsReload, a.deps.Logger); return nil })
	g.Go(func() error {
		queue.KeepStream(ctx, a.conn.js, QueueConfig(a.cfg), queue.KeepStreamEvery, a.deps.Logger)
		return nil
	})
	g.Go(func() error {
		if err := a.ApplyKeptEvents(ctx); err != nil {
			a.deps.Logger.Error("applying kept platform events stopped", "err", err)
		}
		return nil
	})
	a.bg.cancel, a.bg.g = cancel, g
}

// stopBackground ends the work startBackground started and returns once all of it returned.
func (a *API) stopBackground() {
	a.bg.mu.Lock()
	defer a.bg.mu.Unlock()
	if a.bg.g == nil {
		return
	}
	a.bg.cancel()
	_ = a.bg.g.Wait()
	a.bg.cancel, a.bg.g = nil, nil
}

// ApplyKeptEvents applies the platform events the callback stored in their stream (receipts,
// follows), until ctx ends; Serve runs it. One front end at a time applies them, in order;
// the others wait to take over.
func (a *API) ApplyKeptEvents(ctx context.Context) error {
	// The applier stops only once the reading has: the events it hands back then go to the
	// front end that applies events next (see queue.PlatformEvents.Run).
	applyCtx, stopApplying := context.WithCancel(context.WithoutCancel(ctx))
	defer stopApplying()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []*queue.PlatformEvent)
	applied := make(chan error, 1)
	go func() {
		defer cancel()
		applied <- a.Notify.ApplyEvents(applyCtx, batches)
	}()
	events := a.events
	var left []*queue.PlatformEvent // read, not handed to the applier: they follow what it holds
	for {
		var err error
		left, err = events.Run(ctx, batches)
		if ctx.Err() != nil || err == nil {
			break
		}
		queue.ReleaseInOrder(left)
		left = nil
		// The consumer went away (deleted, its stream lost): made again, and read again;
		// unapplied events are in the stream meanwhile.
		a.deps.Logger.Error("reading platform events failed; trying again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
		if ctx.Err() != nil {
			break
		}
		if e, err := queue.OpenPlatformEvents(ctx, a.conn.js, QueueConfig(a.cfg)); err == nil {
			events = e
		}
	}
	stopApplying()
	err := <-applied
	queue.ReleaseInOrder(left)
	return err
}

// HandOutEventsAgain makes the platform events an earlier process was handed and did not finish
// due at once (queue.PlatformEvents.HandOutAgain): only for a front end that is the only one and
// whose NATS server started with it, before Serve.
func (a *API) HandOutEventsAgain(ctx context.Context) error { return a.events.HandOutAgain(ctx) }

// refreshKeys picks up keys another replica rotated, and rotates them when they are due.
func (a *API) refreshKeys(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, ks := range a.oauth.KeySets() {
				if err := ks.Refresh(ctx, a.Store, a.cfg.OAuth.KeyRotation.D(), a.deps.Now); err != nil {
					a.deps.Logger.Warn("refreshing signing keys failed", "alg", ks.Alg(), "err", err)
				}
			}
		}
	}
}

// Close ends the work Serve started beside the listener, waits for it, and releases the
// connections.
func (a *API) Close() {
	a.stopBackground()
	for _, m := range a.caches {
		m.Close()
	}
	for _, c := range a.closers {
		c()
	}
	a.writer.Close()
	a.conn.close()
}

// Worker is a delivery worker with its connections.
type Worker struct {
	cfg     *config.Config
	deps    Deps
	conn    *connections
	writer  *store.Writer
	w       *delivery.Worker
	pc      *platform.Client
	pause   *sending.Pause
	Metrics *metrics.Metrics
	// stopping is closed when the worker begins to stop: readiness fails from then on.
	stopping chan struct{}
	stopOnce sync.Once
	// delivered is closed when the deliveries Run started have all ended; nil before Run.
	mu        sync.Mutex
	delivered chan struct{}
	// stopBy is when the shutdown grace of a stop ends; zero until a stop began.
	stopBy time.Time
}

// NewWorker connects and builds a worker delivering through the platform of cfg.
func NewWorker(ctx context.Context, cfg *config.Config, d Deps) (*Worker, error) {
	d.fill()
	conn, err := connect(ctx, cfg, d, "ucs-worker")
	if err != nil {
		return nil, err
	}
	m := d.Metrics
	if m == nil {
		m = metrics.NewWorker(d.Registry)
	}
	pc, err := platform.New(platform.Config{
		APIBase: cfg.Platform.APIBase, AppID: cfg.Platform.AppID, Secret: cfg.Platform.Secret,
		HTTPClient: d.HTTPClient, Now: d.Now, Logger: d.Logger,
		OnSend: func(took time.Duration, err error) { m.PlatformCall(took.Seconds(), platform.ErrorLabel(err)) },
	})
	if err != nil {
		conn.close()
		return nil, err
	}
	qc := QueueConfig(cfg)
	cons, err := queue.EnsureConsumer(ctx, conn.js, qc)
	if err != nil {
		conn.close()
		return nil, err
	}
	deadLetters, err := queue.EnsureDeadLetters(ctx, conn.js, qc)
	if err != nil {
		conn.close()
		return nil, err
	}
	loc, err := time.LoadLocation(cfg.TimeZone)
	if err != nil {
		conn.close()
		return nil, err
	}
	pause, err := sending.OpenPause(ctx, conn.js, cfg.NATS.Replicas, d.Now)
	if err != nil {
		conn.close()
		return nil, err
	}
	var budget delivery.Budget
	if cfg.Platform.MaxRate > 0 {
		b, err := sending.OpenBudget(ctx, conn.js, cfg.Platform.MaxRate, cfg.NATS.Replicas, d.Now)
		if err != nil {
			pause.Close()
			conn.close()
			return nil, err
		}
		budget = b
	}
	metrics.PendingFunc(d.Registry, conn.pending(cfg.NATS.Consumer))
	writer := conn.st.NewWriter(store.WriterOptions{})
	w, err := delivery.New(delivery.Config{
		Consumer: cons, Store: conn.st, Events: writer, Platform: pc, Templates: cfg.Platform.Templates,
		Reconsume: func(ctx context.Context) (jetstream.Consumer, error) {
			// The stream too when it is gone (NATS restarted without its data); one that is
			// there is left as it is, for the front ends to convert (queue.Migrate).
			if _, err := conn.js.Stream(ctx, qc.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
				if _, err := queue.EnsureStream(ctx, conn.js, qc); err != nil {
					return nil, err
				}
			}
			return queue.EnsureConsumer(ctx, conn.js, qc)
		},
		MaxAge: cfg.NATS.MaxAge.D(),
		Policy: delivery.RetryPolicy{
			Initial: cfg.Worker.BackoffInitial.D(), Max: cfg.Worker.BackoffMax.D(), Multiplier: 2, Jitter: 0.2,
			MaxAttempts: cfg.Worker.MaxAttempts,
		},
		Concurrency: cfg.Worker.Concurrency, Announce: announce.NewFinals(conn.nc).Announce,
		AnnounceSent: announce.NewFinals(conn.nc).AnnounceSent,
		DeadLetter:   deadLetters.Copy, Metrics: m,
		Pause: pause, Budget: budget,
		QuotaReset: func(now time.Time) time.Time { return cfg.Platform.QuotaResetAfter(now, loc) },
		Location:   loc,
		Now:        d.Now, Logger: d.Logger,
	})
	if err != nil {
		writer.Close()
		pause.Close()
		conn.close()
		return nil, err
	}
	if _, err := announce.SubscribeBindings(conn.nc, w.Forget); err != nil {
		writer.Close()
		pause.Close()
		conn.close()
		return nil, err
	}
	return &Worker{cfg: cfg, deps: d, conn: conn, writer: writer, w: w, pc: pc, pause: pause, Metrics: m, stopping: make(chan struct{})}, nil
}

// Run delivers until ctx ends, then stops within shutdown_grace: it fetches nothing more, hands
// back messages waiting for a pause or the send budget, and finishes the deliveries under way
// (each is bounded by the platform's send timeout). A delivery still under way when the grace
// ends is left unanswered: the queue gives it to another worker after ack_wait, and the
// platform's idempotency key keeps the user from getting it twice.
func (w *Worker) Run(ctx context.Context) error {
	done := make(chan error, 1)
	delivered := make(chan struct{})
	w.mu.Lock()
	w.delivered = delivered
	w.mu.Unlock()
	go func() {
		defer close(delivered)
		done <- w.w.Run(ctx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	w.stopOnce.Do(func() { close(w.stopping) })
	grace := w.cfg.ShutdownGrace.D()
	if grace <= 0 {
		grace = 25 * time.Second
	}
	w.mu.Lock()
	w.stopBy = time.Now().Add(grace)
	w.mu.Unlock()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		w.deps.Logger.Warn("deliveries still under way at the end of the shutdown grace; the queue redelivers them", "grace", grace)
		return nil
	}
}

// Handler serves the worker's probes and metrics: /healthz (the process answers), /readyz
// (NATS, MongoDB and the platform's access token reachable, and not stopping; 503 naming the
// failing part otherwise) and /metrics.
func (w *Worker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(rw, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, r *http.Request) {
		if err := w.ready(r.Context()); err != nil {
			rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
			rw.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(rw, err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(rw, "ready\n")
	})
	mux.Handle("GET /metrics", w.Metrics.Handler())
	return mux
}

func (w *Worker) ready(ctx context.Context) error {
	select {
	case <-w.stopping:
		return errors.New("stopping")
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if !w.conn.nc.IsConnected() {
		return errors.New("nats: not connected")
	}
	if why, gone := w.w.ConsumerGone(); gone {
		return errors.New("nats: " + why)
	}
	if err := w.conn.st.Ping(ctx); err != nil {
		return errors.New("mongodb: unreachable")
	}
	// The platform refused this worker's own call for a problem of the account, which stops
	// every worker until an operator acts: not ready, with the cause and what to do. A worker
	// started since, which only waits for that pause, is ready: it may run the corrected
	// configuration, and a rollout of it must not wait for the pause to end. (The daily quota
	// ends by itself: no worker is made unready by it.)
	if why, refused := w.w.AccountRefused(); refused {
		return errors.New("sending paused: " + why)
	}
	if err := w.pc.Ready(ctx); err != nil {
		return errors.New("platform: no access token")
	}
	// The platform refuses this worker's address, or it can get no access token: the others
	// may still send, this one not.
	if why, own := w.w.OwnPause(); own {
		return errors.New("this worker's sending paused: " + why)
	}
	return nil
}

// sideIdle is how long the listeners beside the service's own (a worker's probes and metrics,
// the profiles) keep a connection that asks nothing more: as the front end's, so that whoever
// reaches the port cannot hold connections, and the worker's file descriptors, for ever.
var sideIdle = 120 * time.Second

// sideServer is the server of such a listener, with h; write bounds the writing of an answer
// (0: none, for profiles that stream for as long as they are asked to).
func sideServer(h http.Handler, write time.Duration) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: write, IdleTimeout: sideIdle, MaxHeaderBytes: 32 << 10}
}

// ServeProbes answers the probes and metrics on ln until ctx ends.
func (w *Worker) ServeProbes(ctx context.Context, ln net.Listener) error {
	hs := sideServer(w.Handler(), 30*time.Second)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
		case <-stop:
		}
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	err := hs.Serve(ln)
	close(stop)
	<-stopped
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close releases the connections; call it after Run returned. It waits for deliveries still
// under way, so that the store they record in is closed only after them, but after a stop no
// longer than the shutdown grace allows (closeMargin past it): the whole stop stays within the
// grace period the platform running it gives (Kubernetes' terminationGracePeriodSeconds).
// A delivery cut short is redelivered after ack_wait, its attempt recorded.
func (w *Worker) Close() {
	w.mu.Lock()
	delivered, stopBy := w.delivered, w.stopBy
	w.mu.Unlock()
	if delivered != nil {
		wait := closeWait
		if !stopBy.IsZero() {
			wait = max(0, time.Until(stopBy.Add(closeMargin)))
		}
		t := time.NewTimer(wait)
		select {
		case <-delivered:
		case <-t.C:
			w.deps.Logger.Warn("deliveries still under way at close; the queue redelivers them", "waited", wait)
		}
		t.Stop()
	}
	w.writer.Close()
	w.pause.Close()
	w.conn.close()
}

// closeWait bounds how long Close waits for deliveries under way: one platform call (15 s)
// and the recording of its outcome.
const closeWait = 20 * time.Second

// closeMargin is how long past the shutdown grace Close still waits for deliveries. With the
// writer's, NATS's and the store's own bounds (closeFlushWait, natsCloseWait, storeCloseWait), a
// stop takes at most shutdown_grace + 4.5 s, under the 5 s the shipped manifests leave.
const closeMargin = 2 * time.Second

// Resume ends a pause of sending (after the platform's daily quota) for every worker.
func Resume(ctx context.Context, cfg *config.Config, d Deps) error {
	d.fill()
	// The pause lives in NATS alone: ended while MongoDB is away too, and nothing else touched.
	nc, js, _, err := connectNATS(cfg, d, "ucs-admin")
	if err != nil {
		return err
	}
	defer nc.Close()
	pause, err := sending.OpenPause(ctx, js, cfg.NATS.Replicas, d.Now)
	if err != nil {
		return err
	}
	defer pause.Close()
	return pause.Resume(ctx)
}
