package server

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/natskv"
	"github.com/campus-it/ucs/pkg/platform/safemode"
)

// maxCallbackBytes bounds an event push; the platform's are a few hundred bytes (encrypted,
// about a third more).
const maxCallbackBytes = 64 << 10

// CallbackWindow is how far a callback's timestamp may be from now. The platform stamps each
// push when it sends it; an old push is refused, and within the window each (timestamp, nonce)
// pair is accepted once.
const CallbackWindow = 5 * time.Minute

// NoncesTTL is how long a (timestamp, nonce) pair taken by a callback must be remembered: a
// timestamp is accepted from CallbackWindow before our clock to CallbackWindow after it, so a
// pair can come back during twice the window.
const NoncesTTL = 2 * CallbackWindow

// Nonces remembers the (timestamp, nonce) pairs callbacks have taken, for every front end;
// *natskv.Records (a NATS key-value bucket whose entries live NoncesTTL) implements it. Create
// is atomic across replicas and returns natskv.ErrRecordExists for a key taken before.
type Nonces interface {
	Create(ctx context.Context, key string, value []byte) error
	Delete(ctx context.Context, key string) error
}

// callbackAuth authenticates the platform's callbacks. Plain mode (no cipher): the signature
// covers the token, timestamp and nonce, never the body. Safe mode: the body is encrypted with
// the account's EncodingAESKey and msg_signature covers it; a plaintext body is refused.
type callbackAuth struct {
	token  string
	cipher *safemode.Cipher // nil: plain mode
	now    func() time.Time
}

// authError is a callback that did not authenticate; reason is for the log only.
type authError struct{ reason string }

func (e *authError) Error() string { return "callback not authenticated: " + e.reason }

func refused(reason string) error { return &authError{reason: reason} }

// reason is why err refused a callback.
func reason(err error) string {
	var ae *authError
	if errors.As(err, &ae) {
		return ae.reason
	}
	return err.Error()
}

// one is the query parameter k when it is given exactly once.
func one(q url.Values, k string) string {
	if v := q[k]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// signedQuery checks plain mode's signature of q and the freshness of its timestamp, and
// returns the timestamp and nonce.
func (a *callbackAuth) signedQuery(q url.Values) (ts, nonce string, err error) {
	ts, nonce = one(q, "timestamp"), one(q, "nonce")
	if err := a.fresh(ts, nonce); err != nil {
		return "", "", err
	}
	sig := one(q, "signature")
	if sig == "" {
		return "", "", refused("no signature")
	}
	if !safemode.SameSignature(sig, safemode.Signature(a.token, ts, nonce)) {
		return "", "", refused("wrong signature")
	}
	return ts, nonce, nil
}

func (a *callbackAuth) fresh(ts, nonce string) error {
	if a.token == "" {
		return refused("no callback token configured")
	}
	if ts == "" || nonce == "" {
		return refused("no timestamp or nonce")
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return refused("timestamp not a number")
	}
	if d := a.now().Sub(time.Unix(secs, 0)); d > CallbackWindow || d < -CallbackWindow {
		return refused("timestamp outside the window")
	}
	return nil
}

// verifyURL checks the platform's GET of the callback address. In both modes the official
// account platform signs it as plain mode does and expects echostr back as it came (only
// WeCom encrypts echostr).
func (a *callbackAuth) verifyURL(q url.Values) (ts, nonce string, err error) {
	return a.signedQuery(q)
}

// open authenticates an event push and returns its timestamp, nonce and plaintext event.
func (a *callbackAuth) open(q url.Values, body []byte) (ts, nonce string, event []byte, err error) {
	if a.cipher == nil {
		ts, nonce, err = a.signedQuery(q)
		return ts, nonce, body, err
	}
	ts, nonce = one(q, "timestamp"), one(q, "nonce")
	if err := a.fresh(ts, nonce); err != nil {
		return "", "", nil, err
	}
	if one(q, "encrypt_type") != "aes" {
		// A plaintext push where the account is in safe mode: its body is signed by nobody.
		return "", "", nil, refused("not encrypted (encrypt_type is not aes)")
	}
	msgSig := one(q, "msg_signature")
	if msgSig == "" {
		return "", "", nil, refused("no msg_signature")
	}
	var env safemode.Envelope
	if err := xml.Unmarshal(body, &env); err != nil || env.Encrypt == "" {
		return "", "", nil, refused("body has no Encrypt")
	}
	if !safemode.SameSignature(msgSig, safemode.MsgSignature(a.token, ts, nonce, env.Encrypt)) {
		return "", "", nil, refused("wrong msg_signature")
	}
	event, err = a.cipher.Decrypt(env.Encrypt)
	switch {
	case errors.Is(err, safemode.ErrAppID):
		return "", "", nil, refused("encrypted for another appid")
	case err != nil:
		return "", "", nil, refused("body does not decrypt")
	}
	return ts, nonce, event, nil
}

func badSignature() *Error { return errf(CodeUnauthorized, "callback signature invalid") }

// nonceKey is the key of a (timestamp, nonce) pair in Nonces: a hash, so that any nonce makes
// a valid key of bounded length. 128 bits of it, in 22 characters: every callback of the last
// ten minutes has its key in the bucket's index, and a 64-character key costs about 390
// bytes of the queue's memory where this one costs 300.
func nonceKey(ts, nonce string) string {
	sum := sha256.Sum256([]byte(ts + "|" + nonce))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// takeNonce records that the pair (ts, nonce) was used, once for every front end; a pair used
// before is a replay, refused. release forgets the pair again, for a request that changed
// nothing and asks the platform to push again (which may repeat the very query).
func (s *Server) takeNonce(c echo.Context, ts, nonce string) (release func(), err error) {
	key := nonceKey(ts, nonce)
	ctx, cancel := context.WithTimeout(c.Request().Context(), 5*time.Second)
	defer cancel()
	switch err := s.cfg.Nonces.Create(ctx, key, []byte(ts)); {
	case errors.Is(err, natskv.ErrRecordExists):
		s.securityEvent(c, metrics.EventCallbackReplayed, "callback refused: timestamp and nonce already used", "timestamp", ts)
		return nil, errf(CodeConflict, "callback already received: timestamp and nonce are used")
	case err != nil:
		// Without the record a replay cannot be told apart: refuse, the platform pushes again.
		return nil, &Error{Code: CodeUnavailable, Message: "could not record the callback", Internal: err}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), 5*time.Second)
		defer cancel()
		if err := s.cfg.Nonces.Delete(ctx, key); err != nil {
			s.log.Warn("forgetting a refused callback's nonce failed; the platform's repeat of it will be refused", "err", err)
		}
	}, nil
}

// callbackVerify is the platform's check of the callback address: echo echostr when signed.
// Its pair is taken too: in plain mode a captured address check would otherwise sign an event.
func (s *Server) callbackVerify(c echo.Context) error {
	q := c.QueryParams()
	ts, nonce, err := s.cb.verifyURL(q)
	if err != nil {
		s.securityEvent(c, metrics.EventCallbackSignatureInvalid, "callback address check refused", "reason", reason(err))
		return badSignature()
	}
	if _, err := s.takeNonce(c, ts, nonce); err != nil {
		return err
	}
	return c.String(http.StatusOK, q.Get("echostr"))
}

// platformEvent is an event push of the platform, as plain mode sends it and safe mode
// encrypts it.
type platformEvent struct {
	XMLName      xml.Name `xml:"xml"`
	ToUserName   string   `xml:"ToUserName"`
	FromUserName string   `xml:"FromUserName"`
	CreateTime   int64    `xml:"CreateTime"`
	MsgType      string   `xml:"MsgType"`
	Event        string   `xml:"Event"`
	MsgID        int64    `xml:"MsgID"`
	Status       string   `xml:"Status"`
}

// callbackEvent takes the platform's event pushes: the final status of a sent template
// message, and follows and unfollows. An authenticated event of these kinds is stored in the
// stream of platform events (KeepEvent) and answered "success" (in plaintext, which the platform
// accepts in safe mode too) once the stream has it, whatever the store is doing; the front end
// that applies events (ApplyEvents) applies it from there. Events of other kinds are answered
// "success" and not kept. When the stream cannot take the event, the answer is 503 and the
// platform, which repeats an event it got no success for, pushes it again.
func (s *Server) callbackEvent(c echo.Context) error {
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, maxCallbackBytes+1))
	if err != nil || len(body) > maxCallbackBytes {
		return errf(CodeBadRequest, "callback body unreadable or too large")
	}
	ts, nonce, plain, err := s.cb.open(c.QueryParams(), body)
	if err != nil {
		s.securityEvent(c, metrics.EventCallbackSignatureInvalid, "callback refused", "reason", reason(err))
		return badSignature()
	}
	ev, perr := s.parseEvent(plain)
	if perr != nil {
		return perr
	}
	release, err := s.takeNonce(c, ts, nonce)
	if err != nil {
		return err
	}
	if key, ok := eventKey(ev); ok {
		if err := s.keepEvent(c.Request().Context(), key, keptEvent{Event: ev, At: s.now()}); err != nil {
			release()
			return err
		}
	}
	return c.String(http.StatusOK, "success")
}

// keepWait bounds storing an event in the stream: the platform waits 5 s for the answer, and
// the nonce's record is taken within the same request.
const keepWait = 3 * time.Second

// eventKey is the subject key an event is kept under, and whether it is of a kind the service
// applies.
func eventKey(ev platformEvent) (string, bool) {
	if ev.MsgType != "event" {
		return "", false
	}
	switch ev.Event {
	case "TEMPLATESENDJOBFINISH":
		return strconv.FormatInt(ev.MsgID, 10), true
	case "subscribe", "unsubscribe":
		return "follow", true
	}
	return "", false
}

// keepEvent stores k in the stream of platform events.
func (s *Server) keepEvent(ctx context.Context, key string, k keptEvent) error {
	b, err := json.Marshal(k)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, keepWait)
		defer cancel()
		err = s.cfg.KeepEvent(ctx, key, b)
	}
	if err != nil {
		// Not "success": the platform pushes the event again.
		return &Error{Code: CodeUnavailable, Message: "could not record the event", Internal: err}
	}
	return nil
}

// keptEvent is a platform event as the stream keeps it.
type keptEvent struct {
	Event platformEvent `json:"event"`
	// At is when the callback came, by the front end's clock; zero in events kept by earlier
	// versions (the stream's time stands in).
	At time.Time `json:"at,omitzero"`
	// Unsent was set by earlier versions on a receipt whose msgid no message had when it came;
	// every receipt is treated alike now.
	Unsent bool `json:"unsent,omitempty"`
}

// parseEvent reads an authenticated event and checks what applying it needs.
func (s *Server) parseEvent(plain []byte) (platformEvent, *Error) {
	var ev platformEvent
	if err := xml.Unmarshal(plain, &ev); err != nil {
		return ev, errf(CodeBadRequest, "callback body is not an event")
	}
	if ev.MsgType != "event" {
		return ev, nil
	}
	switch ev.Event {
	case "TEMPLATESENDJOBFINISH":
		if ev.MsgID == 0 || ev.Status == "" {
			return ev, errf(CodeBadRequest, "TEMPLATESENDJOBFINISH without MsgID or Status")
		}
	case "subscribe", "unsubscribe":
		if ev.FromUserName == "" {
			return ev, errf(CodeBadRequest, ev.Event+" without FromUserName")
		}
		// Follows apply in CreateTime order; a time beyond the window would outrank every real
		// event to come.
		if ev.CreateTime <= 0 || time.Unix(ev.CreateTime, 0).After(s.now().Add(CallbackWindow)) {
			return ev, errf(CodeBadRequest, ev.Event+" without a CreateTime up to now")
		}
	}
	return ev, nil
}

// followWait bounds the store's answer to one follow event, or to one receipt's read of its
// msgid, when events are applied.
const followWait = 5 * time.Second

// follow applies a follow or unfollow; events apply in CreateTime order, whenever they come.
func (s *Server) follow(ctx context.Context, ev platformEvent) error {
	ctx, cancel := context.WithTimeout(ctx, followWait)
	defer cancel()
	return s.cfg.Store.SetFollowing(ctx, ev.FromUserName, ev.Event == "subscribe", time.Unix(ev.CreateTime, 0))
}
