package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/campus-it/ucs/pkg/activity"
	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/platform/safemode"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/sending"
	"github.com/campus-it/ucs/pkg/store"
)

// Store is what the front end reads and writes; *store.Store implements it.
type Store interface {
	Current(ctx context.Context, ucsID string) (push.Result, error)
	Outcome(ctx context.Context, ucsID string) (push.Result, error)
	InProgress(ctx context.Context, ucsID string) (push.Result, error)
	SentByMsgID(ctx context.Context, msgID int64) (push.Result, string, error)
	SetFollowing(ctx context.Context, openID string, following bool, at time.Time) error
	Ping(ctx context.Context) error
}

// Events records delivery results; *store.Writer implements it.
type Events interface {
	Write(ctx context.Context, ws ...store.Write) error
}

// Waiting reads pushes still in the queue, by the client that sent them; *queue.Waiting
// implements it. Get returns queue.ErrNotWaiting for a push that is not there.
type Waiting interface {
	Get(ctx context.Context, client, ucsID string) (queue.Waited, error)
	// GetMany returns those of ids that wait, by ucsId, in one read of the queue.
	GetMany(ctx context.Context, client string, ids []string) (map[string]queue.Waited, error)
	// Find returns the push ucsID while it waits, whoever sent it: for operators.
	Find(ctx context.Context, ucsID string) (push.Message, error)
}

// Config wires a Server. Every field is required unless it says otherwise.
type Config struct {
	// Realm is the OpenID Connect realm of the /auth/realms/{realm} paths.
	Realm    string
	OAuth    *oauth.Service
	Verifier *oauth.Verifier
	// Publisher, Waiting, Records, Paused and StoreWait are the notification service's
	// (notification.Config), which the server builds and adapts to HTTP.
	Publisher notification.Publisher
	Waiting   Waiting
	Store     Store
	Events    Events
	// CallbackToken checks the signature of the platform's event pushes.
	CallbackToken string
	// CallbackAESKey is the account's EncodingAESKey: set, callbacks are taken in the
	// platform's safe mode only (encrypted, signed over the body, for AppID); empty, in plain
	// mode. A secret.
	CallbackAESKey string
	// AppID is the official account's appid, which safe mode checks in every callback.
	AppID string
	// Nonces keeps the (timestamp, nonce) pairs callbacks have used, for every replica.
	// Required with CallbackToken.
	Nonces Nonces
	// SignIn configures the authorization code flow's browser side; nil turns it off.
	SignIn *SignIn
	// Bind configures the binding page (/bind), which needs SignIn too; nil turns it off.
	Bind *Bind
	// Location is the time zone of the envelope's time. Default Asia/Shanghai.
	Location *time.Location
	// Ready reports whether the queue is reachable, for /readyz; nil: always.
	QueueReady func() error
	// StoreWait bounds how long a lookup of a push still in the queue waits for the store's
	// progress record before it answers from the queue alone. Default 300ms.
	StoreWait time.Duration
	// ReceiptWait bounds how long a delivery receipt whose msgid no message has waits for it
	// (held in the stream of platform events, answered already): its sent record may be
	// written late, or the platform took an attempt whose answer the worker never got and
	// gives the worker's next attempt the same msgid. Then it is dropped as a receipt for a
	// message this service did not send. Default 2 minutes.
	ReceiptWait time.Duration
	// ResultCache bounds the final results kept in memory. Default 100,000 (about 25 MB).
	ResultCache int
	// Announce, when set, tells every front end of a final result this one recorded (a
	// delivery receipt), so that each serves the first lookup of it from memory (Remember).
	Announce func(push.Result)
	// KeepEvent stores a platform event (a delivery receipt, a follow) in the stream of
	// platform events under key, for ApplyEvents to apply; the callback answers "success" once
	// it returns nil. Required with CallbackToken.
	KeepEvent func(ctx context.Context, key string, event []byte) error
	// SentCache bounds the sent messages kept in memory by msgid (RememberSent) for their
	// delivery receipts, which the platform sends within seconds. Default 100,000: receipts
	// come in the order of their sends, so a backlog of receipts larger than the cache would
	// miss it on every receipt. About 370 bytes an entry, held only until its receipt comes.
	SentCache int
	// TrustedProxies are the networks of reverse proxies whose X-Forwarded-For gives the
	// client's address; without them the connection's source address is the client's.
	TrustedProxies []*net.IPNet
	// Paused, when set, reports a pause of sending (the platform's daily quota), which lookups
	// of queued pushes name.
	Paused func() (sending.PauseState, bool)
	// Records keeps Idempotency-Key records for every replica; nil refuses the header.
	Records notification.Records
	// Ops configures the operations page, GET /ops; nil (or no users) turns it off.
	Ops *Ops
	// Sandbox configures the sandbox phones, GET /sandbox, of the standalone stack; nil turns
	// them off.
	Sandbox *Sandbox
	// Push parses push bodies with the keyword kinds of the account's templates, which the
	// metadata dictionary shows too; nil applies the interface's rules only.
	Push *push.Parser
	// Metrics counts pushes and grants and is served at /metrics; nil counts nothing and
	// serves no /metrics.
	Metrics *metrics.Metrics
	Now     func() time.Time
	Logger  *slog.Logger
}

// Server is the front end.
type Server struct {
	cfg     Config
	e       *echo.Echo
	loc     *time.Location
	now     func() time.Time
	log     *slog.Logger
	results *resultCache
	// notify accepts pushes and answers their results; the server adapts it to HTTP.
	notify *notification.Service
	// sent holds messages the platform accepted, by msgid, until their receipt.
	sent *sentCache
	// pushReq and lookupReq are the token requirements of the push interfaces.
	pushReq oauth.Requirement
	// cb authenticates the platform's callbacks.
	cb callbackAuth
	// stopping is set once a graceful stop began.
	stopping atomic.Bool
	docs     *apiDocs
	// activity counts what the operations page shows; nil when it is off.
	activity *activity.Recorder
	// receiptsWaiting is how many delivery receipts wait for their msgid (ApplyEvents).
	receiptsWaiting atomic.Int64
}

// New builds the server and its routes.
func New(cfg Config) (*Server, error) {
	if cfg.OAuth == nil || cfg.Verifier == nil || cfg.Publisher == nil || cfg.Waiting == nil || cfg.Store == nil || cfg.Events == nil {
		return nil, errors.New("server: oauth, verifier, publisher, waiting, store and events are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CallbackToken != "" && cfg.Nonces == nil {
		return nil, errors.New("server: callbacks need nonces, to refuse replays")
	}
	if cfg.CallbackToken != "" && cfg.KeepEvent == nil {
		return nil, errors.New("server: callbacks need KeepEvent, to store the events they take")
	}
	cb := callbackAuth{token: cfg.CallbackToken, now: cfg.Now}
	if cfg.CallbackAESKey != "" {
		c, err := safemode.New(cfg.CallbackAESKey, cfg.AppID)
		if err != nil {
			return nil, fmt.Errorf("server: callback safe mode: %w", err)
		}
		cb.cipher = c
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Location == nil {
		loc, err := time.LoadLocation("Asia/Shanghai")
		if err != nil {
			return nil, err
		}
		cfg.Location = loc
	}
	if cfg.StoreWait <= 0 {
		cfg.StoreWait = 300 * time.Millisecond
	}
	if cfg.ReceiptWait <= 0 {
		cfg.ReceiptWait = 2 * time.Minute
	}
	if cfg.ResultCache <= 0 {
		cfg.ResultCache = 100_000
	}
	results, err := newResultCache(cfg.ResultCache)
	if err != nil {
		return nil, err
	}
	if cfg.SentCache <= 0 {
		cfg.SentCache = 100_000
	}
	sent, err := newSentCache(cfg.SentCache)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, e: echo.New(), loc: cfg.Location, now: cfg.Now, log: cfg.Logger,
		results: results, sent: sent,
		pushReq: oauth.Requirement{Scope: "notification.mp", Grants: []string{"client_credentials", "authorization_code"}},
	}
	s.cb = cb
	if s.notify, err = notification.New(notification.Config{
		Publisher: cfg.Publisher, Waiting: cfg.Waiting, Store: cfg.Store, Records: cfg.Records, Finals: rememberedFinals{s},
		Paused: cfg.Paused, StoreWait: cfg.StoreWait,
		Accepted: s.accepted, Replayed: cfg.Metrics.Replayed, Rejected: s.countRejectedItem,
		Now: cfg.Now, Logger: cfg.Logger,
	}); err != nil {
		return nil, err
	}
	if s.docs, err = newAPIDocs(cfg.Realm); err != nil {
		return nil, err
	}
	if cfg.Ops != nil {
		s.activity = cfg.Ops.Activity
	}
	s.e.HideBanner, s.e.HidePort = true, true
	s.e.HTTPErrorHandler = s.handleError
	// The source address feeds rate limits and brute-force blocks, so a header is believed
	// only from a trusted proxy.
	s.e.IPExtractor = echo.ExtractIPDirect()
	if len(cfg.TrustedProxies) > 0 {
		opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
		for _, n := range cfg.TrustedProxies {
			opts = append(opts, echo.TrustIPRange(n))
		}
		s.e.IPExtractor = echo.ExtractIPFromXFFHeader(opts...)
	}
	s.e.Use(middleware.Recover())
	s.routes()
	return s, nil
}

// Remember keeps a final result in memory, for lookups; another front end or a worker recorded
// it. Anything but a final result is ignored.
func (s *Server) Remember(r push.Result) {
	if r.State.Final() {
		// The LRU tells a repeated announcement (a receipt the platform pushed again) from a
		// new result, so that the operations page counts each push once.
		if !s.results.Seen(r.UcsID) {
			s.activity.Final(r)
		}
		s.results.Add(r.UcsID, r)
	}
}

// rememberedFinals are the front end's final results as the lookups see them: a final result a
// lookup reads from the store before its announcement arrives is remembered as the
// announcement would be, so that the operations page counts it (once) either way.
type rememberedFinals struct{ s *Server }

func (f rememberedFinals) Get(id string) (push.Result, bool) { return f.s.results.Get(id) }
func (f rememberedFinals) Add(_ string, r push.Result)       { f.s.Remember(r) }

// RememberSent keeps a message the platform accepted (a worker recorded it as sent) until
// its delivery receipt comes, so that the receipt costs no store read.
func (s *Server) RememberSent(r push.Result, openID string) {
	if r.State == push.StateSent && r.MsgID != 0 && openID != "" {
		if !s.sent.Seen(r.MsgID) {
			s.activity.Sent(r)
		}
		s.sent.Add(r, openID)
	}
}

// ServeHTTP serves a request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.e.ServeHTTP(w, r) }

// accepted counts n pushes accepted, for the metrics and the operations page.
func (s *Server) accepted(n int) {
	s.cfg.Metrics.Accepted(n)
	s.activity.Accepted(n)
}

// Echo returns the underlying echo instance, for mounting further routes.
func (s *Server) Echo() *echo.Echo { return s.e }

func (s *Server) routes() {
	e := s.e
	e.POST("/v1/token", s.token)
	realm := "/auth/realms/" + s.cfg.Realm
	e.POST(realm+"/protocol/openid-connect/token", s.token)
	e.GET(realm+"/protocol/openid-connect/certs", s.jwks)
	e.GET(realm+"/.well-known/openid-configuration", s.discovery)

	e.GET("/v1/fake_api/user", s.fakeUser, s.bearer(oauth.Requirement{Scope: "fake_api"}))

	e.POST("/v1/infra/notification/mp", s.push, s.bearer(s.pushReq))
	e.POST("/v1/infra/notification/mp/batch", s.batch, s.bearer(s.pushReq))
	e.POST("/v1/infra/notification/mp/results", s.batchResults, s.bearer(s.pushReq))
	e.GET("/v1/infra/notification/mp/callback", s.callbackVerify)
	e.POST("/v1/infra/notification/mp/callback", s.callbackEvent, identityBody)
	e.GET("/v1/infra/notification/mp/:ucsId", s.lookup, s.bearer(s.pushReq))

	e.GET("/v1/meta/notification/mp/types", s.metaTypes)
	e.GET("/v1/meta/notification/mp/schema", s.metaSchema)
	e.GET(OpenAPIPath, s.openAPI)
	e.GET(DocsPath, s.apiDocsPage)

	s.signInRoutes()
	s.opsRoutes()
	s.sandboxRoutes()
	s.bindRoutes()

	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	e.GET("/readyz", s.ready)
	if s.cfg.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(s.cfg.Metrics.Handler()))
	}
	s.headRoutes()
}

// headRoutes answers HEAD on every GET route (RFC 9110 §9.1: a general-purpose server
// supports both): the GET's handler, with its route's middleware, answers; net/http sends
// the status and headers and drops the body of a HEAD. Called once every GET route is in.
func (s *Server) headRoutes() {
	head := map[string]bool{}
	for _, r := range s.e.Routes() {
		if r.Method == http.MethodHead {
			head[r.Path] = true
		}
	}
	for _, r := range s.e.Routes() {
		if r.Method == http.MethodGet && !head[r.Path] {
			s.e.HEAD(r.Path, s.asGet)
			head[r.Path] = true
		}
	}
}

// asGet serves a HEAD request with the handler of the GET route of its path.
func (s *Server) asGet(c echo.Context) error {
	s.e.Router().Find(http.MethodGet, echo.GetPath(c.Request()), c)
	return c.Handler()(c)
}

// ready is /readyz: 503 naming the failing part (stopping, nats, mongodb), else 200.
func (s *Server) ready(c echo.Context) error {
	if s.stopping.Load() {
		return errf(CodeUnavailable, "stopping")
	}
	if s.cfg.QueueReady != nil {
		if err := s.cfg.QueueReady(); err != nil {
			return &Error{Code: CodeUnavailable, Message: "nats: unavailable", Internal: err}
		}
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Store.Ping(ctx); err != nil {
		return &Error{Code: CodeUnavailable, Message: "mongodb: unavailable", Internal: err}
	}
	return c.String(http.StatusOK, "ready\n")
}

// Stopping makes /readyz fail from now on, so that load balancers stop sending requests
// before the server shuts down; requests that still come are served.
func (s *Server) Stopping() { s.stopping.Store(true) }
