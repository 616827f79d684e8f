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
	"github.com/campus-it/ucs/pkg/platform/safemode"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/store"
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
// *queue.Records (a NATS key-value bucket whose entries live NoncesTTL) implements it. Create
// is atomic across replicas and returns queue.ErrRecordExists for a key taken before.
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
	case errors.Is(err, queue.ErrRecordExists):
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
// message, and follows and unfollows. It answers "success" (in plaintext, which the platform
// accepts in safe mode too) to everything it has recorded or does not handle, so the platform
// does not repeat it.
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
	release, err := s.takeNonce(c, ts, nonce)
	if err != nil {
		return err
	}
	if err := s.applyEvent(c, plain); err != nil {
		release()
		return err
	}
	return c.String(http.StatusOK, "success")
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

func (s *Server) applyEvent(c echo.Context, plain []byte) error {
	ev, perr := s.parseEvent(plain)
	if perr != nil {
		return perr
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 10*time.Second)
	defer cancel()
	if ev.MsgType != "event" {
		return nil
	}
	switch ev.Event {
	case "TEMPLATESENDJOBFINISH":
		return s.receipt(ctx, ev)
	case "subscribe", "unsubscribe":
		if err := s.follow(ctx, ev); err != nil {
			return s.keep(ctx, "follow", ev, err)
		}
	}
	return nil
}

// followWait bounds the store's answer to a follow event: the platform waits 5 s for the
// whole callback, and an event the store does not take in time is kept instead.
const followWait = 2 * time.Second

// follow applies a follow or unfollow; events apply in CreateTime order, whenever they come.
func (s *Server) follow(ctx context.Context, ev platformEvent) error {
	ctx, cancel := context.WithTimeout(ctx, followWait)
	defer cancel()
	if err := s.cfg.Store.SetFollowing(ctx, ev.FromUserName, ev.Event == "subscribe", time.Unix(ev.CreateTime, 0)); err != nil {
		return &Error{Code: CodeUnavailable, Message: "could not record the event", Internal: err}
	}
	return nil
}

// keep keeps an event the store could not take (KeepEvent) and tells the platform it arrived:
// it would push it only three times within seconds and then drop it. Without KeepEvent, or
// when the queue fails too, the store's error is the answer.
func (s *Server) keep(ctx context.Context, key string, ev platformEvent, err error) error {
	return s.keepAs(ctx, key, keptEvent{Event: ev}, err)
}

// keptEvent is a platform event as kept. Unsent marks a receipt whose msgid no message had when
// it came (see receipt).
type keptEvent struct {
	Event  platformEvent `json:"event"`
	Unsent bool          `json:"unsent,omitempty"`
}

func (s *Server) keepAs(ctx context.Context, key string, k keptEvent, err error) error {
	ev := k.Event
	if s.cfg.KeepEvent == nil {
		return err
	}
	b, merr := json.Marshal(k)
	if merr == nil {
		merr = s.cfg.KeepEvent(ctx, key, b)
	}
	if merr != nil {
		s.log.Warn("platform event could not be applied or kept", "event", ev.Event, "err", err, "keep", merr)
		return err
	}
	s.log.Info("platform event kept, to be applied once the store answers", "event", ev.Event, "err", err)
	return nil
}

// receiptPoll is how often a receipt looks again for the sent record of its msgid.
const receiptPoll = 20 * time.Millisecond

// receipt applies the platform's final report on a message it accepted. A receipt that
// cannot be applied because the store failed is kept in the queue (KeepReceipt) and applied
// once the store is back, and the platform is told it arrived: it would push it only three
// times within seconds and then drop it.
func (s *Server) receipt(ctx context.Context, ev platformEvent) error {
	// The platform waits 5 s for an answer: a store that does not answer within a second of
	// the wait for the sent record is taken as down, and the receipt kept.
	actx, cancel := context.WithTimeout(ctx, s.cfg.ReceiptWait+time.Second)
	defer cancel()
	applied, err := s.applyReceipt(actx, ev, s.cfg.ReceiptWait, false)
	var e *Error
	if applied && errors.As(err, &e) && e.Code == CodeNotFound && s.cfg.KeepEvent != nil {
		// No message has this msgid yet. Either it is for no message of ours, or its sent
		// record is late (the 404 has the platform push it again), or the platform took an
		// attempt whose answer the worker never got (a time-out) and will answer the worker's
		// next attempt with this msgid (client_msg_id), after the platform has given up on
		// this receipt. For that last case it is kept too, and applied only to a message sent
		// on a later attempt, so that a receipt planted ahead of a first send changes nothing.
		_ = s.keepAs(ctx, strconv.FormatInt(ev.MsgID, 10), keptEvent{Event: ev, Unsent: true}, nil)
		return err
	}
	if applied {
		return err
	}
	return s.keep(ctx, strconv.FormatInt(ev.MsgID, 10), ev, err)
}

// receiptKeptFor bounds how long a kept receipt waits for the sent record of its msgid; a
// receipt kept with no message of its msgid waits receiptUnsentFor, the time a worker takes to
// try again after a time-out.
const (
	receiptKeptFor   = 10 * time.Minute
	receiptUnsentFor = 2 * time.Minute
)

// ApplyKept applies a platform event kept at kept (see keep); it reports whether the event is
// done with (applied, or not applicable) rather than to be tried again.
func (s *Server) ApplyKept(ctx context.Context, event []byte, kept time.Time) bool {
	var k keptEvent
	if err := json.Unmarshal(event, &k); err != nil {
		s.log.Warn("kept platform event unreadable; dropped", "err", err)
		return true
	}
	ev := k.Event
	switch {
	case ev.Event == "subscribe" || ev.Event == "unsubscribe":
		return s.follow(ctx, ev) == nil
	case ev.Event != "TEMPLATESENDJOBFINISH" || ev.MsgID == 0:
		s.log.Warn("kept platform event of no known kind; dropped", "event", ev.Event)
		return true
	}
	applied, err := s.applyReceipt(ctx, ev, 0, k.Unsent)
	if !applied && err != nil {
		return false // the store still fails
	}
	wait := receiptKeptFor
	if k.Unsent {
		wait = receiptUnsentFor
	}
	if err != nil && s.now().Sub(kept) < wait {
		return false // not sent yet: the worker holding it records it once the store is back
	}
	return true
}

// applyReceipt applies a receipt. Only a msgid this service sent, reported for the follower
// it was sent to, changes a result; with retriedOnly, only one sent on a second attempt or
// later. The sent record is written by a worker once the platform
// answered, and the platform may report before that write lands: a receipt waits up to wait
// for it, then asks the platform to push it again. applied is false, with the error, when the
// store failed.
func (s *Server) applyReceipt(ctx context.Context, ev platformEvent, wait time.Duration, retriedOnly bool) (applied bool, err error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var (
		sent   store.Result
		openID string
	)
	for {
		// A worker announced the message when it recorded it as sent; else (a missed
		// announcement, another front end's restart) the store has it.
		var ok bool
		if sent, openID, ok = s.sent.Get(ev.MsgID); ok {
			err = nil
			break
		}
		// The read itself runs under the request's context: the wait ending in the middle of
		// a read must not turn "not sent (yet)" into a store failure.
		sent, openID, err = s.cfg.Store.SentByMsgID(ctx, ev.MsgID)
		if !errors.Is(err, store.ErrNotFound) {
			break
		}
		select {
		case <-wctx.Done():
		case <-time.After(receiptPoll):
			continue
		}
		break
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.log.Warn("delivery receipt for a msgid this service did not send", "msgid", ev.MsgID, "status", ev.Status)
		// Not "success": if the sent record was only late, the platform's next push applies.
		return true, errf(CodeNotFound, "no message with this MsgID")
	case err != nil:
		// Not "success": the platform repeats the push later.
		return false, &Error{Code: CodeUnavailable, Message: "could not record the event", Internal: err}
	case openID != ev.FromUserName:
		s.log.Warn("delivery receipt for another follower than the message's", "msgid", ev.MsgID, "ucsId", sent.UcsID)
		return true, nil
	case retriedOnly && sent.Attempts <= 1:
		s.log.Warn("delivery receipt that came before its message's only send", "msgid", ev.MsgID, "ucsId", sent.UcsID)
		return true, nil
	}
	final := store.Receipt(sent, ev.Status, s.now())
	if err := s.cfg.Events.Write(ctx, store.FinalRecord(final, final.Finished)); err != nil {
		return false, &Error{Code: CodeUnavailable, Message: "could not record the event", Internal: err}
	}
	s.sent.Remove(ev.MsgID)
	if s.cfg.Announce != nil {
		s.cfg.Announce(final)
	}
	return true, nil
}
