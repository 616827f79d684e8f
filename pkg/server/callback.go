package server

import (
	"context"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/store"
)

// maxCallbackBytes bounds an event push; the platform's are a few hundred bytes.
const maxCallbackBytes = 64 << 10

// callbackSkew is how far a callback's timestamp may be from now. The platform stamps each push
// when it sends it; a replayed old push is refused.
const callbackSkew = 5 * time.Minute

// signatureOK checks the platform's signature: the hex SHA-1 of token, timestamp and nonce,
// sorted and joined.
func (s *Server) signatureOK(q map[string][]string) bool {
	get := func(k string) string {
		if v := q[k]; len(v) == 1 {
			return v[0]
		}
		return ""
	}
	sig, ts, nonce := get("signature"), get("timestamp"), get("nonce")
	if sig == "" || ts == "" || nonce == "" || s.cfg.CallbackToken == "" {
		return false
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	if d := s.now().Sub(time.Unix(secs, 0)); d > callbackSkew || d < -callbackSkew {
		return false
	}
	parts := []string{s.cfg.CallbackToken, ts, nonce}
	sort.Strings(parts)
	sum := sha1.Sum([]byte(strings.Join(parts, "")))
	want := hex.EncodeToString(sum[:])
	return subtle.ConstantTimeCompare([]byte(want), []byte(strings.ToLower(sig))) == 1
}

func badSignature() *Error { return errf(CodeUnauthorized, "callback signature invalid") }

// callbackVerify is the platform's check of the callback address: echo echostr when signed.
func (s *Server) callbackVerify(c echo.Context) error {
	q := c.QueryParams()
	if !s.signatureOK(q) {
		return badSignature()
	}
	return c.String(http.StatusOK, q.Get("echostr"))
}

// platformEvent is an event push of the platform (plaintext mode).
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
// message, and follows and unfollows. It answers "success" to everything it has recorded or
// does not handle, so the platform does not repeat it.
func (s *Server) callbackEvent(c echo.Context) error {
	if !s.signatureOK(c.QueryParams()) {
		return badSignature()
	}
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, maxCallbackBytes+1))
	if err != nil || len(body) > maxCallbackBytes {
		return errf(CodeBadRequest, "callback body unreadable or too large")
	}
	var ev platformEvent
	if err := xml.Unmarshal(body, &ev); err != nil {
		return errf(CodeBadRequest, "callback body is not an event")
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 10*time.Second)
	defer cancel()
	switch {
	case ev.MsgType == "event" && ev.Event == "TEMPLATESENDJOBFINISH":
		if ev.MsgID == 0 || ev.Status == "" {
			return errf(CodeBadRequest, "TEMPLATESENDJOBFINISH without MsgID or Status")
		}
		if err := s.receipt(ctx, ev); err != nil {
			return err
		}
	case ev.MsgType == "event" && (ev.Event == "subscribe" || ev.Event == "unsubscribe"):
		if ev.FromUserName == "" {
			return errf(CodeBadRequest, ev.Event+" without FromUserName")
		}
		if err := s.cfg.Store.SetFollowing(ctx, ev.FromUserName, ev.Event == "subscribe"); err != nil {
			return &Error{Code: CodeUnavailable, Message: "could not record the event", Internal: err}
		}
	}
	return c.String(http.StatusOK, "success")
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
	applied, err := s.applyReceipt(actx, ev, s.cfg.ReceiptWait)
	if applied || s.cfg.KeepReceipt == nil {
		return err
	}
	b, merr := json.Marshal(ev)
	if merr == nil {
		merr = s.cfg.KeepReceipt(ctx, ev.MsgID, b)
	}
	if merr != nil {
		s.log.Warn("delivery receipt could not be applied or kept", "msgid", ev.MsgID, "err", err, "keep", merr)
		return err
	}
	s.log.Info("delivery receipt kept, to be applied once the store answers", "msgid", ev.MsgID, "err", err)
	return nil
}

// receiptKeptFor bounds how long a kept receipt waits for the sent record of its msgid.
const receiptKeptFor = 10 * time.Minute

// ApplyKept applies a receipt kept by receipt, at kept; it reports whether the receipt is
// done with (applied, or not applicable) rather than to be tried again.
func (s *Server) ApplyKept(ctx context.Context, event []byte, kept time.Time) bool {
	var ev platformEvent
	if err := json.Unmarshal(event, &ev); err != nil || ev.MsgID == 0 {
		s.log.Warn("kept delivery receipt unreadable; dropped", "err", err)
		return true
	}
	applied, err := s.applyReceipt(ctx, ev, 0)
	if !applied && err != nil {
		return false // the store still fails
	}
	if err != nil && s.now().Sub(kept) < receiptKeptFor {
		return false // not sent yet: the worker holding it records it once the store is back
	}
	return true
}

// applyReceipt applies a receipt. Only a msgid this service sent, reported for the follower
// it was sent to, changes a result. The sent record is written by a worker once the platform
// answered, and the platform may report before that write lands: a receipt waits up to wait
// for it, then asks the platform to push it again. applied is false, with the error, when the
// store failed.
func (s *Server) applyReceipt(ctx context.Context, ev platformEvent, wait time.Duration) (applied bool, err error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var (
		sent   store.Result
		openID string
	)
	for {
		// A worker announced the message when it recorded it as sent; else (a missed
		// announcement, another front end's restart) the store has it.
		if m, ok := s.sent.Get(ev.MsgID); ok {
			sent, openID, err = m.result, m.openID, nil
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
