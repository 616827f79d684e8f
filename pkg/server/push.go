package server

import (
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/push"
)

var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// push is POST /v1/infra/notification/mp: validate, publish, and answer the ucsId once the
// queue has stored the message. A bad body changes nothing.
func (s *Server) push(c echo.Context) error {
	r := c.Request()
	// A declared length past the limit is refused before the body is read (and before a
	// client that expects 100-continue sends it).
	if err := checkJSON(r, push.MaxBodyBytes); err != nil {
		if err.Code == CodeTooLarge {
			s.cfg.Metrics.Rejected(string(push.RuleKindBody))
		}
		return err
	}
	bp := bodyPool.Get().(*[]byte)
	defer bodyPool.Put(bp)
	began := time.Now()
	body, err := readBody(r.Body, (*bp)[:0], push.MaxBodyBytes)
	*bp = body[:0]
	if time.Since(began) > time.Second {
		answerInTime(c) // a body that came slowly
	}
	if err != nil {
		if errors.Is(err, errTooLarge) {
			s.cfg.Metrics.Rejected(string(push.RuleKindBody)) // as a batch item of that size is
			return errf(CodeTooLarge, "body: larger than 65536 bytes")
		}
		return errf(CodeBadRequest, "body: could not be read")
	}
	req, err := s.cfg.Push.Parse(body)
	if err != nil {
		// A retry under a key whose first request another front end's rules took (during a
		// rolling update) answers what was stored.
		if key, kerr := idempotencyKey(c, body); kerr == nil {
			if id, ok := s.notify.StoredPush(r.Context(), claimsOf(c).Azp, key); ok {
				return s.ok(c, pushAnswer{UcsID: id})
			}
		}
		var ve *push.ValidationError
		if errors.As(err, &ve) {
			s.cfg.Metrics.Rejected(string(ve.Kind()))
			return errf(CodeBadRequest, ve.Error())
		}
		return &Error{Code: CodeBadRequest, Message: "body: invalid", Internal: err}
	}
	key, kerr := idempotencyKey(c, body)
	if kerr != nil {
		return kerr
	}
	id, err := s.notify.Push(r.Context(), claimsOf(c).Azp, req, key)
	if errors.Is(err, notification.ErrUnconfirmed) {
		// Whether the queue stored it is unknown: the answer names the ucsId to look up
		// before the push is sent again.
		s.log.Warn("push unconfirmed", "ucsId", id, "err", err)
		c.Response().Header().Set("Retry-After", "5")
		return c.JSON(http.StatusServiceUnavailable, Envelope{Data: pushAnswer{UcsID: id}, Code: CodeUnavailable, Time: s.stamp(),
			Msg: "the push queue did not confirm storing the push, which may be stored under this ucsId: look it up before sending the push again (with the same Idempotency-Key, if it had one, sending it again is safe)"})
	}
	if err != nil {
		return notificationError(err)
	}
	// The message is safe in the queue from here on, and the queue answers lookups of it until
	// a worker has recorded its outcome: the store is not needed to accept a push.
	return s.ok(c, pushAnswer{UcsID: id})
}

// notificationError is the answer to an error of the notification service: the one place
// that maps its errors to the envelope's codes and the HTTP statuses. An error it does not
// name is an internal error.
func notificationError(err error) error {
	var share *notification.KeyShareUsedError
	switch {
	case errors.As(err, &share):
		return &Error{Code: CodeUnavailable, Message: "Idempotency-Key: this client's share of the records of keys is used up; try again later, or without a key",
			Header: http.Header{"Retry-After": {strconv.Itoa(max(1, int(math.Ceil(share.Wait.Seconds()))))}}}
	case errors.Is(err, notification.ErrQueueFull):
		return &Error{Code: CodeUnavailable, Message: "the push queue is full; try again later", Internal: err,
			Header: http.Header{"Retry-After": {"30"}}}
	case errors.Is(err, notification.ErrQueueUnavailable):
		return &Error{Code: CodeUnavailable, Message: "the push queue is unavailable; try again later", Internal: err,
			Header: http.Header{"Retry-After": {"5"}}}
	case errors.Is(err, notification.ErrKeyUnchecked):
		return &Error{Code: CodeUnavailable, Internal: err, Header: http.Header{"Retry-After": {"5"}},
			Message: "Idempotency-Key: whether the earlier request under this key went through cannot be checked now (the store is unavailable); nothing was accepted, try again later with the same key"}
	case errors.Is(err, notification.ErrKeyReused):
		// As the IETF draft of the header answers it: 422, not 409, which says to try again.
		return errf(CodeKeyReused, "Idempotency-Key: already used with a different body; a new request needs a new key")
	case errors.Is(err, notification.ErrKeyInUse):
		return &Error{Code: CodeConflict, Message: "Idempotency-Key: a request with this key is still under way; try again shortly",
			Header: http.Header{"Retry-After": {"2"}}}
	case errors.Is(err, notification.ErrKeysFull):
		return &Error{Code: CodeUnavailable, Message: "Idempotency-Key: the records of keys are full; try again later", Internal: err,
			Header: http.Header{"Retry-After": {"30"}}}
	case errors.Is(err, notification.ErrKeysUnsupported):
		return errf(CodeBadRequest, "Idempotency-Key: not supported by this server")
	case errors.Is(err, notification.ErrResultsUnavailable):
		return &Error{Code: CodeUnavailable, Message: "results are unavailable; try again later", Internal: err,
			Header: http.Header{"Retry-After": {"5"}}}
	}
	return &Error{Code: CodeInternal, Message: "internal error", Internal: err}
}

type pushAnswer struct {
	UcsID string `json:"ucsId"`
}

var errTooLarge = errors.New("body too large")

// readBody reads at most limit bytes into buf, failing with errTooLarge beyond.
func readBody(r io.Reader, buf []byte, limit int) ([]byte, error) {
	lr := io.LimitReader(r, int64(limit)+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return buf, errTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// notALookup answers a GET or HEAD of the POST-only concrete paths …/mp/batch and …/mp/results,
// which the lookup's template matches: 405 with Allow, before the bearer token is asked for (a
// resource's methods do not depend on who asks).
func (s *Server) notALookup(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if id := c.Param("ucsId"); id == "batch" || id == "results" {
			return s.notAllowed(c, "/v1/infra/notification/mp/"+id)
		}
		return next(c)
	}
}

// lookup is GET /v1/infra/notification/mp/{ucsId}. A ucsId of another client does not exist
// for the caller: it gets the same 404 as an unknown one.
func (s *Server) lookup(c echo.Context) error {
	id := c.Param("ucsId")
	r, err := s.notify.Result(c.Request().Context(), claimsOf(c).Azp, id)
	switch {
	case errors.Is(err, notification.ErrNotFound):
		return errf(CodeNotFound, "no push with ucsId "+id)
	case err != nil:
		return notificationError(err)
	}
	return s.ok(c, resultView(r, s.loc))
}

type resultJSON struct {
	UcsID         string `json:"ucsId"`
	State         string `json:"state"`
	Type          string `json:"type,omitempty"`
	UserID        string `json:"userId,omitempty"`
	Attempts      int    `json:"attempts"`
	LastError     string `json:"lastError,omitempty"`
	Reason        string `json:"reason,omitempty"`
	MsgID         int64  `json:"msgId,omitempty,string"`
	AcceptedAt    string `json:"acceptedAt,omitempty"`
	UpdatedAt     string `json:"updatedAt,omitempty"`
	SentAt        string `json:"sentAt,omitempty"`
	FinishedAt    string `json:"finishedAt,omitempty"`
	NextAttemptAt string `json:"nextAttemptAt,omitempty"`
}

// resultView is r as a lookup answers it. Its times are the front end's (acceptance) and the
// workers' (the rest), whose clocks may disagree by up to 15 s: none is shown before the
// acceptance. (The records keep the workers' own times, by which a worker measures the
// platform's duplicate window of a call in doubt.)
func resultView(r push.Result, loc *time.Location) resultJSON {
	f := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		if t.Before(r.Accepted) {
			t = r.Accepted
		}
		return t.In(loc).Format(timeLayout)
	}
	return resultJSON{
		UcsID: r.UcsID, State: string(r.State), Type: r.Type, UserID: r.UserID, Attempts: r.Attempts,
		LastError: r.LastError, Reason: r.Reason, MsgID: r.MsgID,
		AcceptedAt: f(r.Accepted), UpdatedAt: f(r.Updated), SentAt: f(r.Sent), FinishedAt: f(r.Finished),
		NextAttemptAt: f(r.RetryAt),
	}
}
