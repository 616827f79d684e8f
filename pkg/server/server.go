package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"golang.org/x/sync/semaphore"

	"github.com/campus-it/ucs/pkg/activity"
	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/sending"
)

// Store is the store as /readyz checks it; *store.Store implements it.
type Store interface {
	Ping(ctx context.Context) error
}

// Waiting finds a push while it is in the queue, whoever sent it (for operators);
// *queue.Waiting implements it, returning queue.ErrNotWaiting for a push that is not there.
type Waiting interface {
	Find(ctx context.Context, ucsID string) (push.Message, error)
}

// Config wires a Server. Every field is required unless it says otherwise.
type Config struct {
	// Realm is the OpenID Connect realm of the /auth/realms/{realm} paths.
	Realm    string
	OAuth    *oauth.Service
	Verifier *oauth.Verifier
	// Notify accepts pushes, answers their results and applies the platform's events; the
	// server adapts it to HTTP.
	Notify  *notification.Service
	Waiting Waiting
	Store   Store
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
	// Location is the time zone of the envelope's time and of the times pages show. Default
	// Asia/Shanghai.
	Location *time.Location
	// Ready reports whether the queue is reachable, for /readyz; nil: always.
	QueueReady func() error
	// TrustedProxies are the networks of reverse proxies whose X-Forwarded-For gives the
	// client's address; without them the connection's source address is the client's.
	TrustedProxies []*net.IPNet
	// Paused, when set, reports a pause of sending (the platform's daily quota), which the
	// operations page names.
	Paused func() (sending.PauseState, bool)
	// Ops configures the operations page, GET /ops; nil (or no users) turns it off.
	Ops *Ops
	// Routes, when set, adds the routes of the program that embeds the server (the standalone
	// stack's sandbox phones); they answer HEAD too.
	Routes func(e *echo.Echo)
	// Push parses push bodies with the keyword kinds of the account's templates, which the
	// metadata dictionary shows too; nil applies the interface's rules only.
	Push *push.Parser
	// Metrics counts pushes and grants and is served at /metrics; nil counts nothing and
	// serves no /metrics.
	Metrics *metrics.Metrics
	// RequestWait bounds the work of every request but the notification interfaces' (see
	// answerInTime). Default 20 s.
	RequestWait time.Duration
	Now         func() time.Time
	Logger      *slog.Logger
}

// Server is the front end.
type Server struct {
	cfg    Config
	e      *echo.Echo
	loc    *time.Location
	now    func() time.Time
	log    *slog.Logger
	notify *notification.Service
	// pushReq and lookupReq are the token requirements of the push interfaces.
	pushReq oauth.Requirement
	// cb authenticates the platform's callbacks.
	cb *platform.CallbackAuth
	// onceGets are the paths of the GET routes HEAD does not run (getOnce).
	onceGets map[string]bool
	// stopping is set once a graceful stop began.
	stopping atomic.Bool
	docs     *apiDocs
	// activity counts what the operations page shows; nil when it is off.
	activity *activity.Recorder
	// batchRoom holds the batch bodies being read and answered, batchRoomSize bytes of them at
	// most, and clientRooms each client's quarter of them, by client (readBatch); a batch waits
	// batchRoomWait for room.
	batchRoom     *semaphore.Weighted
	batchRoomSize int64
	batchRoomWait time.Duration
	clientRooms   sync.Map
}

// New builds the server and its routes.
func New(cfg Config) (*Server, error) {
	if cfg.OAuth == nil || cfg.Verifier == nil || cfg.Notify == nil || cfg.Waiting == nil || cfg.Store == nil {
		return nil, errors.New("server: oauth, verifier, notify, waiting and store are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CallbackToken != "" && cfg.Nonces == nil {
		return nil, errors.New("server: callbacks need nonces, to refuse replays")
	}
	cb, err := platform.NewCallbackAuth(cfg.CallbackToken, cfg.CallbackAESKey, cfg.AppID, cfg.Now)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RequestWait <= 0 {
		cfg.RequestWait = 20 * time.Second
	}
	if cfg.Location == nil {
		loc, err := time.LoadLocation("Asia/Shanghai")
		if err != nil {
			return nil, err
		}
		cfg.Location = loc
	}
	s := &Server{
		cfg: cfg, e: echo.New(), loc: cfg.Location, now: cfg.Now, log: cfg.Logger, notify: cfg.Notify, cb: cb,
		pushReq:   oauth.Requirement{Scope: "notification.mp", Grants: []string{"client_credentials", "authorization_code"}},
		batchRoom: semaphore.NewWeighted(BatchRoom), batchRoomSize: BatchRoom, batchRoomWait: batchRoomWait,
	}
	publicURL := "" // the issuer is <public_url>/auth/realms/<realm>
	if cfg.OAuth != nil {
		publicURL = strings.TrimSuffix(cfg.OAuth.Issuer, "/auth/realms/"+cfg.Realm)
	}
	if s.docs, err = newAPIDocs(cfg.Realm, publicURL); err != nil {
		return nil, err
	}
	if cfg.Ops != nil {
		s.activity = cfg.Ops.Activity
	}
	s.e.HideBanner, s.e.HidePort = true, true
	s.e.HTTPErrorHandler = s.handleError
	s.e.JSONSerializer = jsonAnswers{}
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
	s.e.Pre(plainPath, noBodyRead)
	s.e.Use(middleware.Recover(), s.answerWithin)
	s.routes()
	return s, nil
}

// plainPath routes a path whose letters, digits, '-', '_' or '~' came percent-encoded
// (/v1/%74oken) as the same path written plainly: RFC 3986 §6.2.2.2 makes them one URI, and echo
// routes on the path as sent once it holds escapes. Other escapes ('.', '/' and the rest of
// the reserved characters) stay as sent.
func plainPath(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if u := c.Request().URL; u.RawPath != "" {
			var b strings.Builder
			for i := 0; i < len(u.RawPath); i++ {
				if ch := u.RawPath[i]; ch == '%' && i+2 < len(u.RawPath) {
					if v, err := strconv.ParseUint(u.RawPath[i+1:i+3], 16, 8); err == nil && unreserved(byte(v)) {
						b.WriteByte(byte(v))
						i += 2
						continue
					}
				}
				b.WriteByte(u.RawPath[i])
			}
			u.RawPath = b.String()
			if u.RawPath == (&url.URL{Path: u.Path}).EscapedPath() {
				u.RawPath = ""
			}
		}
		return next(c)
	}
}

// noBodyRead gives a GET or HEAD request an empty body: no route reads one, and a form value
// asked for on a page (c.FormValue) would otherwise parse a multipart body of any size, in
// memory and in temporary files, where every form the service takes is capped at maxFormBytes.
// The server still discards what was sent, or closes the connection.
func noBodyRead(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if r := c.Request(); r.Method == http.MethodGet || r.Method == http.MethodHead {
			r.Body = http.NoBody
		}
		return next(c)
	}
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~'
}

// answerWithin bounds the work of a request to Config.RequestWait, inside the HTTP server's
// write time-out (30 s): a store that cannot be reached, for which the driver waits up to 30 s,
// fails the request in time for its answer (an OAuth error, a 503 page) to reach the client,
// rather than one written after the connection's deadline, which the client never gets. The
// notification interfaces bound their own waits (the queue's PubAck, a lookup's
// LookupTimeout), and a batch's body may be long in coming (answerInTime): they are left alone.
func (s *Server) answerWithin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if strings.HasPrefix(c.Request().URL.Path, "/v1/infra/notification/") {
			return next(c)
		}
		ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.RequestWait)
		defer cancel()
		c.SetRequest(c.Request().WithContext(ctx))
		return next(c)
	}
}

// ServeHTTP serves a request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.e.ServeHTTP(w, r) }

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
	s.getOnce("/v1/infra/notification/mp/callback", s.callbackVerify)
	e.POST("/v1/infra/notification/mp/callback", s.callbackEvent, identityBody)
	e.GET("/v1/infra/notification/mp/:ucsId", s.lookup, s.notALookup, s.bearer(s.pushReq))

	e.GET("/v1/meta/notification/mp/types", s.metaTypes)
	e.GET("/v1/meta/notification/mp/schema", s.metaSchema)
	e.GET(OpenAPIPath, s.openAPI)
	e.GET(DocsPath, s.apiDocsPage)

	s.signInRoutes()
	s.opsRoutes()
	if s.cfg.Routes != nil {
		s.cfg.Routes(e)
	}
	s.bindRoutes()

	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	e.GET("/readyz", s.ready)
	if s.cfg.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(s.cfg.Metrics.Handler()))
	}
	s.headRoutes()
}

// getOnce adds a GET route whose handler uses up a one-time value (a nonce, a ticket, a code)
// or ends a session: HEAD, which must be safe (RFC 9110 §9.2.1) and which link previews and
// prefetching proxies send first, does not run it, and is answered 405.
func (s *Server) getOnce(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	s.e.GET(path, h, m...)
	if s.onceGets == nil {
		s.onceGets = map[string]bool{}
	}
	s.onceGets[path] = true
}

// headRoutes answers HEAD on every GET route but getOnce's (RFC 9110 §9.1: a general-purpose
// server supports both): the GET's handler, with its route's middleware, answers; net/http
// sends the status and headers and drops the body of a HEAD. Called once every GET route is in.
func (s *Server) headRoutes() {
	head := map[string]bool{}
	maps.Copy(head, s.onceGets)
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
	if s.onceGets[c.Path()] {
		// A concrete path of getOnce that a templated HEAD route matched.
		return s.notAllowed(c, c.Path())
	}
	return c.Handler()(c)
}

// notAllowed answers 405 with Allow: the methods of the routes of path, HEAD aside when HEAD
// does not run it (getOnce).
func (s *Server) notAllowed(c echo.Context, path string) error {
	allow := []string{http.MethodOptions}
	for _, r := range s.e.Routes() {
		if r.Path == path && !(r.Method == http.MethodHead && s.onceGets[r.Path]) && !slices.Contains(allow, r.Method) {
			allow = append(allow, r.Method)
		}
	}
	c.Response().Header().Set(echo.HeaderAllow, strings.Join(allow, ", "))
	return errf(CodeMethod, "method "+c.Request().Method+" is not allowed here")
}

// ready is /readyz: 503 naming what keeps this front end from accepting pushes (stopping,
// nats), else 200. MongoDB down is said in the answer but does not fail it: pushes are still
// accepted (lookups and sign-in wait for the store), and as every replica shares the store,
// failing would take every one out of service at once.
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
		return c.String(http.StatusOK, "ready; mongodb: unavailable (pushes are accepted; lookups and sign-in wait for it)\n")
	}
	return c.String(http.StatusOK, "ready\n")
}

// Stopping makes /readyz fail from now on, so that load balancers stop sending requests
// before the server shuts down; requests that still come are served.
func (s *Server) Stopping() { s.stopping.Store(true) }
