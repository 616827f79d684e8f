// Package simulator imitates the messaging platform's API (a WeChat official
// account) for standalone mode, tests and benchmarks: the same paths, JSON
// bodies, error codes and signed XML event pushes, with faults that can be
// switched on.
//
// What it models, from the platform's documentation:
//   - POST /cgi-bin/stable_token: normal mode returns the current token while
//     it is valid (and a new one during the last five minutes of its life,
//     the old one staying valid until it expires); force_refresh=true makes a
//     new token and invalidates the old ones (40001 when used).
//   - POST /cgi-bin/message/template/send: the token, the recipient, the
//     template and each keyword value are checked with the documented codes;
//     client_msg_id de-duplicates per openid for ten minutes; an accepted
//     send is pushed later as a TEMPLATESENDJOBFINISH event.
//     Message ids exceed 2^53 and never repeat those of an earlier run.
//     Values are checked by the kind of their keyword (package keyword); an
//     old industry template's (keyword1, …) are cut to 20 characters without
//     line breaks, as the platform has done since 2023-05-04, rather than
//     refused; its first and remark are taken (and not shown).
//   - POST /cgi-bin/stable_token's forced refresh: at most once in 30 s
//     (within them the current token is handed out) and 20 times a day
//     (then 45009).
//   - GET /cgi-bin/token: a new token on every call, the previous one valid
//     five more minutes.
//   - GET /cgi-bin/template/get_all_private_template: the added templates.
//   - POST /cgi-bin/menu/create and GET /cgi-bin/menu/get: the custom menu,
//     with the platform's limits on buttons.
//   - GET /connect/oauth2/authorize and GET /sns/oauth2/access_token: the web
//     authorization (snsapi_base) that tells a page which follower opened it;
//     its page lets a person pick the follower they are (webauth.go).
//   - Event pushes to the callback URL carry signature, timestamp, nonce and
//     the follower's openid in the query, and a failed push is retried three times. With an EncodingAESKey they
//     are in safe mode: encrypted, with encrypt_type=aes and msg_signature.
//
// An admin API under /sim/ lets scripts inspect and steer it.
package simulator

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/campus-it/ucs/pkg/platform/keyword"
	"github.com/campus-it/ucs/pkg/platform/safemode"
)

const (
	defaultCallbackDelay   = 20 * time.Millisecond
	defaultTokenTTL        = 7200 * time.Second
	defaultCallbackWorkers = 128
	defaultCallbackTimeout = 5 * time.Second // the platform waits five seconds for a receiver
	// dedupWindow is how long client_msg_id de-duplicates: the platform
	// documents "10 minutes; beyond that, no guarantee".
	dedupWindow = 10 * time.Minute
	// maxRenewBefore is how early normal mode replaces a token: the platform
	// documents that it renews the token five minutes ahead.
	maxRenewBefore = 5 * time.Minute
	// msgIDBase makes message ids as large as the platform's, which exceed
	// 2^53: receivers that parse them as floating point show the bug here.
	// A simulator's first id adds the nanoseconds of its start to it, so that
	// the ids of a restarted simulator never repeat those of an earlier run
	// (a late receipt must not land on an older message): a run would have to
	// send faster than one message a nanosecond to catch up with the next.
	msgIDBase int64 = 3_100_000_000_000_000_000
	// forcedRefreshGap and forcedRefreshesPerDay are the limits of the
	// stable token's forced refresh: "每天限用20次且需间隔30秒"; within the gap
	// the platform hands out the current token without refreshing it.
	forcedRefreshGap      = 30 * time.Second
	forcedRefreshesPerDay = 20
)

// Config configures a Simulator.
type Config struct {
	// AppID and Secret are the credentials the token endpoint accepts
	// (otherwise 40013 and 40125). Both required.
	AppID, Secret string
	// CallbackURL is where event pushes (XML) are POSTed; empty: no pushes.
	CallbackURL string
	// CallbackToken is the token the signature of pushes is made with.
	CallbackToken string
	// EncodingAESKey, when set, makes the pushes safe mode's: encrypted with
	// this key for AppID, with encrypt_type=aes and msg_signature over the
	// encrypted body. Empty: plain mode.
	EncodingAESKey string
	// CallbackDelay is the time between an accepted send and its
	// TEMPLATESENDJOBFINISH push. Default 20 ms.
	CallbackDelay time.Duration
	// CallbackWorkers is the number of goroutines pushing events, as many as the platform has
	// pushes in flight to one account. Default 128.
	CallbackWorkers int
	// TokenTTL is the lifetime of an access token. Default 7200 s, as on the
	// platform.
	TokenTTL time.Duration
	// Now is the clock for token lifetimes, the de-duplication window and
	// the times in pushes. Default time.Now. Delays (CallbackDelay, Latency)
	// always run on real time.
	Now func() time.Time
	// Logger receives pushes that failed and admin changes. Default: discard.
	Logger *slog.Logger
	// HTTPClient makes the pushes. Default: a client with a 5 s timeout, the
	// time the platform gives a receiver.
	HTTPClient *http.Client
	// Seed seeds the random source of faults and final statuses; 0 picks a
	// random seed.
	Seed uint64
	// WebAuthHosts are the hosts (host[:port]) a web authorization may return to, the
	// account's authorization domains (网页授权域名); others are refused with 10003. Empty:
	// any host.
	WebAuthHosts []string
	// MaxSent bounds the accepted sends Sent keeps, the oldest dropped first, so a long run
	// of the standalone service does not grow without end. Default 100,000 (about 30 MB).
	MaxSent int
}

// Faults makes the simulator misbehave as the platform sometimes does. Rates
// are shares between 0 and 1; values outside are clamped.
type Faults struct {
	// BusyRate is the share of sends answered errcode -1 "system error".
	BusyRate float64
	// Latency is added to every send.
	Latency time.Duration
	// BlockRate is the share of accepted sends whose final status is
	// "failed:user block".
	BlockRate float64
	// SystemFailRate is the share of accepted sends whose final status is
	// "failed: system failed".
	SystemFailRate float64
	// ServerErrorRate is the share of sends answered with HTTP 502.
	ServerErrorRate float64
	// QuotaUsedUp answers every send 45009: the account's daily quota is used up.
	QuotaUsedUp bool
	// AddressRefused answers every send 40164: the caller's address is not on the account's
	// IP whitelist.
	AddressRefused bool
}

// SentMessage is a send the simulator accepted (not a de-duplicated repeat).
type SentMessage struct {
	MsgID       int64             `json:"msgid"`
	ToUser      string            `json:"touser"`
	TemplateID  string            `json:"template_id"`
	URL         string            `json:"url,omitempty"`
	ClientMsgID string            `json:"client_msg_id,omitempty"`
	Data        map[string]string `json:"data"`
	At          time.Time         `json:"at"`
}

// Stats counts what the simulator has seen since it started.
type Stats struct {
	// Sends is every call of the template send endpoint.
	Sends int64 `json:"sends"`
	// Accepted is the sends that created a message.
	Accepted int64 `json:"accepted"`
	// Deduplicated is the repeats answered with the first send's msgid.
	Deduplicated int64 `json:"deduplicated"`
	// ServerErrors is the sends answered with HTTP 502.
	ServerErrors int64 `json:"server_errors"`
	// Errors counts errcode answers of every endpoint by code.
	Errors map[string]int64 `json:"errors"`
	// TokenRequests is every call of the stable token endpoint.
	TokenRequests int64 `json:"token_requests"`
	// TokenForceRefreshes is the calls with force_refresh=true.
	TokenForceRefreshes int64 `json:"token_force_refreshes"`
	// CallbacksDelivered and CallbacksFailed count event pushes (after
	// retries); CallbacksPending is those still queued.
	CallbacksDelivered int64 `json:"callbacks_delivered"`
	CallbacksFailed    int64 `json:"callbacks_failed"`
	CallbacksPending   int64 `json:"callbacks_pending"`
}

// tokenState is one access token the simulator handed out.
type tokenState struct {
	exp     time.Time
	revoked bool // replaced by a forced refresh
}

// template is an added template: its keywords and their kinds.
type template struct {
	id       string
	keywords []string          // in the order added, for get_all_private_template
	kinds    map[string]string // keyword -> kind
	// industry marks an old industry template (keyword1, keyword2, …): since
	// 2023-05-04 the platform removes its first and remark lines and cuts
	// each keyword to 20 characters without line breaks, refusing nothing.
	industry bool
}

// follower is a user the account knows.
type follower struct {
	following bool
	refusing  bool // refuses messages from the account: 43101
}

// dedupEntry is a send remembered for de-duplication. It holds no pointer (the time is Unix
// nanoseconds), so the garbage collector never scans the map, however many sends it holds.
type dedupEntry struct {
	msgID int64
	at    int64
}

// dedupKey is a 64-bit hash of an openid and a client_msg_id, 0 for a send without
// client_msg_id: a window of ten minutes at thousands of sends a second holds millions of keys,
// and two strings each would make the simulator the largest part of a standalone process.
type dedupKey uint64

func (s *Simulator) dedupKeyOf(openid, clientMsgID string) dedupKey {
	if clientMsgID == "" {
		return 0
	}
	var h maphash.Hash
	h.SetSeed(s.dedupSeed)
	_, _ = h.WriteString(openid)
	_ = h.WriteByte(0)
	_, _ = h.WriteString(clientMsgID)
	return dedupKey(h.Sum64() | 1) // never 0
}

// Simulator imitates the platform's API. It is safe for concurrent use.
type Simulator struct {
	cfg         Config
	now         func() time.Time
	log         *slog.Logger
	callbackURL *url.URL         // nil: no pushes
	cipher      *safemode.Cipher // nil: plain mode
	pusher      *pusher          // nil: no pushes
	closeOnce   sync.Once

	// mu guards everything below; sends hold it only for map lookups and
	// updates, never while validating values or doing I/O.
	mu      sync.Mutex
	rng     *mrand.Rand
	faults  Faults
	tokens  map[string]*tokenState
	current string // the token normal mode hands out
	// plainCurrent is the token GET /cgi-bin/token handed out last.
	plainCurrent string
	templates    map[string]*template
	followers    map[string]*follower
	dedup        map[dedupKey]dedupEntry
	dedupSeed    maphash.Seed
	dedupFIFO    []dedupKey // insertion order, for expiring dedup entries
	dedupHead    int        // dedupFIFO[:dedupHead] is already expired
	// forced holds the times of the forced stable token refreshes of the
	// last day, oldest first.
	forced []time.Time
	// menu is the custom menu as menu/create set it (its JSON), nil if none.
	menu      []byte
	nextMsgID int64
	sent      []SentMessage
	errors    map[int]int64
	// web holds the codes of the web authorization; it has its own lock.
	web webAuth

	stats struct {
		sends, accepted, deduplicated, serverErrors atomic.Int64
		tokenRequests, tokenForceRefreshes          atomic.Int64
		callbacksDelivered, callbacksFailed         atomic.Int64
	}
}

// New returns a Simulator. It panics if CallbackURL is set but not an
// absolute http(s) URL, or EncodingAESKey is set but not a valid key (or
// AppID empty): programming errors of the caller.
func New(cfg Config) *Simulator {
	if cfg.CallbackDelay <= 0 {
		cfg.CallbackDelay = defaultCallbackDelay
	}
	if cfg.MaxSent <= 0 {
		cfg.MaxSent = 100_000
	}
	if cfg.CallbackWorkers <= 0 {
		cfg.CallbackWorkers = defaultCallbackWorkers
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = defaultTokenTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HTTPClient == nil {
		// Each pushing goroutine keeps its connection to the receiver open between pushes, as
		// the platform's pushers do: the default transport keeps two idle connections a host,
		// and every other push would open (and the receiver accept) a connection of its own.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = cfg.CallbackWorkers
		cfg.HTTPClient = &http.Client{Timeout: defaultCallbackTimeout, Transport: t}
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = mrand.Uint64()
	}
	cbURL, err := parseCallbackURL(cfg.CallbackURL)
	if err != nil {
		panic(err)
	}
	var cipher *safemode.Cipher
	if cfg.EncodingAESKey != "" {
		if cipher, err = safemode.New(cfg.EncodingAESKey, cfg.AppID); err != nil {
			panic(fmt.Errorf("simulator: EncodingAESKey: %w", err))
		}
	}
	s := &Simulator{
		cfg:         cfg,
		now:         cfg.Now,
		log:         cfg.Logger,
		callbackURL: cbURL,
		cipher:      cipher,
		rng:         mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		tokens:      make(map[string]*tokenState),
		templates:   make(map[string]*template),
		followers:   make(map[string]*follower),
		dedup:       make(map[dedupKey]dedupEntry),
		dedupSeed:   maphash.MakeSeed(),
		nextMsgID:   msgIDBase + time.Now().UnixNano(),
		errors:      make(map[int]int64),
	}
	if cbURL != nil {
		s.pusher = newPusher(s, cfg.CallbackWorkers)
	}
	return s
}

// Close stops the push workers after they have delivered the events already
// queued (without waiting out their delay), and waits for them. Sends
// accepted afterwards are not pushed.
func (s *Simulator) Close() {
	s.closeOnce.Do(func() {
		if s.pusher != nil {
			s.pusher.close()
		}
	})
}

// AddTemplate adds (or replaces) a template with the given keywords, such as
// "thing1", "character_string2", "time3". A keyword's kind is its name
// without trailing digits and decides the rule its values must obey.
//
// A template with keyword1, keyword2, …, first or remark is an old industry
// template: its values are cut as the platform has done since 2023-05-04
// (keyword.Strip), and first and remark are taken whatever they hold.
func (s *Simulator) AddTemplate(id string, keywords []string) {
	t := &template{id: id, keywords: append([]string(nil), keywords...), kinds: make(map[string]string, len(keywords))}
	for _, k := range keywords {
		t.kinds[k] = keyword.KindOf(k)
		if k := keyword.Of(k); k != nil && k.Stripped {
			t.industry = true
		}
	}
	s.mu.Lock()
	s.templates[id] = t
	s.mu.Unlock()
}

// AddFollower makes openid a user who follows the account.
func (s *Simulator) AddFollower(openid string) {
	s.mu.Lock()
	s.followerLocked(openid).following = true
	s.mu.Unlock()
}

// RemoveFollower makes openid a user who no longer follows the account:
// sends to it are answered 43004. (An openid never added is answered 40003.)
func (s *Simulator) RemoveFollower(openid string) {
	s.mu.Lock()
	s.followerLocked(openid).following = false
	s.mu.Unlock()
}

// SetRefusing makes openid refuse (or accept again) messages from the
// account: sends to it are answered 43101.
func (s *Simulator) SetRefusing(openid string, refusing bool) {
	s.mu.Lock()
	s.followerLocked(openid).refusing = refusing
	s.mu.Unlock()
}

func (s *Simulator) followerLocked(openid string) *follower {
	f := s.followers[openid]
	if f == nil {
		f = &follower{}
		s.followers[openid] = f
	}
	return f
}

// SetFaults replaces the faults in force.
func (s *Simulator) SetFaults(f Faults) {
	f.BusyRate = clampRate(f.BusyRate)
	f.BlockRate = clampRate(f.BlockRate)
	f.SystemFailRate = clampRate(f.SystemFailRate)
	f.ServerErrorRate = clampRate(f.ServerErrorRate)
	f.Latency = max(f.Latency, 0)
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
	s.log.Info("simulator faults set", "busy_rate", f.BusyRate, "latency", f.Latency, "block_rate", f.BlockRate,
		"system_fail_rate", f.SystemFailRate, "server_error_rate", f.ServerErrorRate)
}

// Faults returns the faults in force.
func (s *Simulator) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

func clampRate(r float64) float64 {
	if r > 1 {
		return 1
	}
	if r > 0 {
		return r
	}
	return 0 // also NaN
}

// Sent returns a copy of the accepted sends, in the order accepted: all of them, or the last
// Config.MaxSent.
func (s *Simulator) Sent() []SentMessage {
	s.mu.Lock()
	out := make([]SentMessage, len(s.sent))
	copy(out, s.sent)
	s.mu.Unlock()
	for i := range out {
		out[i].Data = copyData(out[i].Data)
	}
	return out
}

func copyData(d map[string]string) map[string]string {
	c := make(map[string]string, len(d))
	for k, v := range d {
		c[k] = v
	}
	return c
}

// Stats returns the counters.
func (s *Simulator) Stats() Stats {
	st := Stats{
		Sends:               s.stats.sends.Load(),
		Accepted:            s.stats.accepted.Load(),
		Deduplicated:        s.stats.deduplicated.Load(),
		ServerErrors:        s.stats.serverErrors.Load(),
		TokenRequests:       s.stats.tokenRequests.Load(),
		TokenForceRefreshes: s.stats.tokenForceRefreshes.Load(),
		CallbacksDelivered:  s.stats.callbacksDelivered.Load(),
		CallbacksFailed:     s.stats.callbacksFailed.Load(),
		Errors:              make(map[string]int64),
	}
	if s.pusher != nil {
		st.CallbacksPending = int64(s.pusher.pending())
	}
	s.mu.Lock()
	for code, n := range s.errors {
		st.Errors[fmt.Sprint(code)] = n
	}
	s.mu.Unlock()
	return st
}

func (s *Simulator) randUint64() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.Uint64()
}

// newToken makes a token shaped like the platform's: opaque, URL-safe, long.
func newToken() string {
	var b [48]byte
	_, _ = rand.Read(b[:])
	return "sim_" + base64.RawURLEncoding.EncodeToString(b[:])
}

// requestID makes the " rid: …" the platform appends to error messages.
func (s *Simulator) requestID() string {
	var b [12]byte
	s.mu.Lock()
	for i := 0; i < len(b); i += 8 {
		v := s.rng.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	s.mu.Unlock()
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:16] + "-" + h[16:]
}
