package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/natskv"
	"github.com/campus-it/ucs/pkg/platform"
)

// maxCallbackBytes bounds an event push; the platform's are a few hundred bytes (encrypted,
// about a third more).
const maxCallbackBytes = 64 << 10

// Nonces remembers the (timestamp, nonce) pairs callbacks have taken, for every front end;
// *natskv.Records (a NATS key-value bucket whose entries live platform.NoncesTTL) implements it.
// Create is atomic across replicas and returns natskv.ErrRecordExists for a key taken before;
// Get returns natskv.ErrNoRecord for a key no one took.
type Nonces interface {
	Create(ctx context.Context, key string, value []byte) (uint64, error)
	Get(ctx context.Context, key string) ([]byte, uint64, error)
}

func badSignature() *Error {
	// A 401 names a scheme (RFC 9110 §15.5.2): here the platform's signature of the query.
	return &Error{Code: CodeUnauthorized, Message: "callback signature invalid",
		Header: http.Header{"Www-Authenticate": {`Signature realm="callback"`}}}
}

// answerWithin bounds the work of answering a callback: the platform waits platformWait for the
// answer.
const answerWithin = 4 * time.Second

// platformWait is how long the platform waits for a callback's answer. It pushes a callback it
// got no answer for again (three times at most), and takes any answer, success or not, as
// final, counting a failure against the account's alarms.
const platformWait = 5 * time.Second

// takeNonce records that the pair (ts, nonce) was used, once for every front end, with mark
// (platform.NonceMark of an event push's signed content, platform.AddressCheckMark for an
// address check), under platform.CallbackAuth.PairKey. A pair taken before by an event push
// with the same mark is the platform repeating the same push (it got no timely answer), or
// this push trying again, and is taken again; any other pair taken before is a replay,
// refused. A record whose write failed may have been written all the same: the platform's
// repeat then finds its own mark.
//
// In safe mode an event push's pair is kept under its mark, so a push's query (which carries
// the plain signature too) can pass once for an address check: that changes nothing, and the
// check echoes only an echostr of the platform's characters (callbackVerify). Taking the bare
// pair too would cost every receipt a second write.
func (s *Server) takeNonce(ctx context.Context, c echo.Context, ts, nonce string, mark []byte) error {
	key := s.cb.PairKey(ts, nonce, mark)
	_, err := s.cfg.Nonces.Create(ctx, key, mark)
	if errors.Is(err, natskv.ErrRecordExists) {
		var held []byte
		repeatable := !bytes.Equal(mark, platform.AddressCheckMark)
		if held, _, err = s.cfg.Nonces.Get(ctx, key); err == nil && (!repeatable || !bytes.Equal(held, mark)) {
			if repeatable && !s.cb.SignsBody() && platform.IsEventMark(held) {
				s.securityEvent(c, metrics.EventCallbackReplayed, "callback left unanswered: timestamp and nonce already used by another event push (a replay, or the platform's nonces meeting)", "timestamp", ts)
				return errPairMet
			}
			s.securityEvent(c, metrics.EventCallbackReplayed, "callback refused: timestamp and nonce already used", "timestamp", ts)
			return errf(CodeConflict, "callback already received: timestamp and nonce are used")
		}
		if errors.Is(err, natskv.ErrNoRecord) {
			// Expired between the two reads: the pair is older than any timestamp the
			// callback's window accepts.
			return errf(CodeConflict, "callback already received: timestamp and nonce are used")
		}
	}
	if err != nil {
		// Without the record a replay cannot be told apart: refuse, the platform pushes again.
		return &Error{Code: CodeUnavailable, Message: "could not record the callback", Internal: err,
			Header: http.Header{"Retry-After": {"5"}}}
	}
	return nil
}

// errPairMet is takeNonce's answer, in plain mode, to an event push under a pair that another
// event push took: a replay of a captured query, or another push of the platform's whose pair
// met the first's (its nonces are short, and two of one second do meet). The signature does not
// cover the body, so the two cannot be told apart; a 409 would lose the platform's push (it
// takes any answer as final), so the push is left unanswered, as when it cannot be stored: the
// platform pushes it again, under a pair of its own, and a replay gains nothing.
var errPairMet = errors.New("timestamp and nonce already used by another event push")

// platformString is what an address check echoes: the platform's random string (digits; the
// characters of base64 and of URL-safe base64 allowed too), never markup.
var platformString = regexp.MustCompile(`^[0-9A-Za-z+/=_.-]{1,512}$`)

// callbackVerify is the platform's check of the callback address: echo echostr when signed.
// Its pair is taken too: in plain mode a captured address check would otherwise sign an event.
func (s *Server) callbackVerify(c echo.Context) error {
	q := c.QueryParams()
	ts, nonce, err := s.cb.VerifyURL(q)
	if err != nil {
		s.securityEvent(c, metrics.EventCallbackSignatureInvalid, "callback address check refused", "reason", reason(err))
		return badSignature()
	}
	echostr := q.Get("echostr")
	if !platformString.MatchString(echostr) {
		// The platform's is a random string of digits: anything else is echoed by no one.
		return errf(CodeBadRequest, "echostr must be 1 to 512 letters, digits or + / = - _ .")
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), answerWithin)
	defer cancel()
	if err := s.takeNonce(ctx, c, ts, nonce, platform.AddressCheckMark); err != nil {
		return err
	}
	c.Response().Header().Set("X-Content-Type-Options", "nosniff") // the platform's string, never a page
	return c.String(http.StatusOK, echostr)
}

// callbackEvent takes the platform's event pushes: the final status of a sent template
// message, and follows and unfollows. An authenticated event of these kinds is stored in the
// stream of platform events (notification.Service.KeepEvent) and answered "success" (in
// plaintext, which the platform accepts in safe mode too) once the stream has it, whatever the
// store is doing; the front end that applies events (notification.Service.ApplyEvents) applies
// it from there. Events of other kinds are answered "success" and not kept. While the stream
// (or the record of the pair) cannot take the event, storing it is tried again until
// answerWithin; past that the push is left unanswered beyond the platform's wait, and the
// connection closed: the platform repeats only a push it got no answer for, and would take a
// 503 as final, the event lost.
func (s *Server) callbackEvent(c echo.Context) error {
	start := time.Now()
	// One bound for recording the pair and keeping the event, so that the answer comes before
	// the platform stops waiting for it.
	ctx, cancel := context.WithTimeout(c.Request().Context(), answerWithin)
	defer cancel()
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, maxCallbackBytes+1))
	if err != nil || len(body) > maxCallbackBytes {
		return errf(CodeBadRequest, "callback body unreadable or too large")
	}
	ts, nonce, plain, err := s.cb.Open(c.QueryParams(), body)
	if err != nil {
		s.securityEvent(c, metrics.EventCallbackSignatureInvalid, "callback refused", "reason", reason(err))
		return badSignature()
	}
	ev, err := platform.ParseEvent(plain, s.now())
	if err != nil {
		return errf(CodeBadRequest, err.Error())
	}
	// The mark is of what the signature covers: in safe mode the encrypted event, not the XML
	// around it, which a replay may reshape.
	err = s.keepEvent(ctx, c, ts, nonce, platform.NonceMark(plain), ev)
	if err == nil {
		return c.String(http.StatusOK, "success")
	}
	if e, ok := errors.AsType[*Error](err); ok && e.Code != CodeUnavailable {
		return err // a replay, refused
	}
	if !errors.Is(err, errPairMet) {
		s.log.Warn("a platform event could not be stored in time; it is left unanswered, for the platform to push it again", "err", err)
	}
	t := time.NewTimer(time.Until(start.Add(platformWait + 500*time.Millisecond)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.Request().Context().Done(): // the platform stopped waiting
	}
	panic(http.ErrAbortHandler) // net/http closes the connection without an answer
}

// keepEvent records the callback's pair (takeNonce) and keeps its event, trying again while
// either is unavailable, until ctx ends; a refusal of the pair (a replay) ends it at once. The
// pair, once recorded, is taken again by the next try, as by the platform's repeat.
func (s *Server) keepEvent(ctx context.Context, c echo.Context, ts, nonce string, mark []byte, ev platform.Event) error {
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		err := s.takeNonce(ctx, c, ts, nonce, mark)
		if err == nil {
			err = s.notify.KeepEvent(ctx, ev)
		}
		if e, ok := errors.AsType[*Error](err); err == nil || ok && e.Code != CodeUnavailable || errors.Is(err, errPairMet) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// reason is why err refused a callback, for the log.
func reason(err error) string {
	if cr, ok := errors.AsType[*platform.CallbackRefused](err); ok {
		return cr.Reason
	}
	return err.Error()
}
