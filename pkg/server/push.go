package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/store"
)

var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// push is POST /v1/infra/notification/mp: validate, publish, and answer the ucsId once the
// queue has stored the message. A bad body changes nothing.
func (s *Server) push(c echo.Context) error {
	r := c.Request()
	if err := checkJSONRequest(r); err != nil {
		return err
	}
	bp := bodyPool.Get().(*[]byte)
	defer bodyPool.Put(bp)
	body, err := readBody(r.Body, (*bp)[:0], push.MaxBodyBytes)
	*bp = body[:0]
	if err != nil {
		if errors.Is(err, errTooLarge) {
			return errf(CodeTooLarge, "body: larger than 65536 bytes")
		}
		return errf(CodeBadRequest, "body: could not be read")
	}
	req, err := s.cfg.Push.Parse(body)
	if err != nil {
		var ve *push.ValidationError
		if errors.As(err, &ve) {
			s.countRejected(ve)
			return errf(CodeBadRequest, ve.Error())
		}
		return &Error{Code: CodeBadRequest, Message: "body: invalid", Internal: err}
	}
	idem, ierr := s.idempotency(c, body)
	if ierr != nil {
		return ierr
	}
	claims := claimsOf(c)
	now := s.now()
	msg := req.Message(push.NewID(now), claims.Azp, now)
	if idem != nil {
		return s.pushOnce(c, idem, msg)
	}
	if err := s.cfg.Publisher.Publish(r.Context(), msg, queue.PublishOptions{}); err != nil {
		return queueError(err)
	}
	// The message is safe in the queue from here on, and the queue answers lookups of it until
	// a worker has recorded its outcome: the store is not needed to accept a push.
	s.accepted(1)
	return s.ok(c, pushAnswer{UcsID: msg.UcsID})
}

// countRejected counts a refused push once, by the kind of the first rule it broke (its
// problems come in a fixed order), so that the series add up to the pushes refused.
func (s *Server) countRejected(ve *push.ValidationError) {
	if len(ve.Problems) > 0 {
		s.cfg.Metrics.Rejected(string(ve.Problems[0].Kind()))
	}
}

// queueError is the answer to a push the queue did not take.
func queueError(err error) error {
	if errors.Is(err, queue.ErrFull) {
		return &Error{Code: CodeUnavailable, Message: "the push queue is full; try again later", Internal: err,
			Header: http.Header{"Retry-After": {"30"}}}
	}
	return &Error{Code: CodeUnavailable, Message: "the push queue is unavailable; try again later", Internal: err,
		Header: http.Header{"Retry-After": {"5"}}}
}

// pushOnce publishes a push that carries an Idempotency-Key: the key's first request takes it
// with the message's ucsId and publishes; a later one answers that ucsId, publishing it again
// only if the queue never took it.
func (s *Server) pushOnce(c echo.Context, idem *idemRequest, msg push.Message) error {
	ctx := c.Request().Context()
	if idem.replay == nil {
		err := idem.claim(ctx, []string{msg.UcsID})
		if errors.Is(err, errIdempotencyRace) {
			// another request took the key first: answer as it does
			err = idem.load(ctx)
		}
		if err != nil {
			return err
		}
	}
	if idem.owner {
		if err := s.cfg.Publisher.Publish(ctx, msg, idem.publishOptions()); err != nil {
			idem.finish(ctx, []int{0})
			return queueError(err)
		}
		idem.finish(ctx, nil)
		s.accepted(1)
		return s.ok(c, pushAnswer{UcsID: msg.UcsID})
	}
	rec := idem.replay
	if len(rec.IDs) != 1 || rec.IDs[0] == "" {
		return &Error{Code: CodeInternal, Message: "internal error", Internal: errors.New("idempotency record of a push has no ucsId")}
	}
	if still := idem.republish(ctx, map[int]push.Message{0: msg}); len(still) > 0 {
		return queueError(errors.New("publishing a retried push failed"))
	}
	return s.ok(c, pushAnswer{UcsID: rec.IDs[0]})
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

// lookup is GET /v1/infra/notification/mp/{ucsId}. A ucsId of another client does not exist
// for the caller: it gets the same 404 as an unknown one.
func (s *Server) lookup(c echo.Context) error {
	id := c.Param("ucsId")
	azp := claimsOf(c).Azp
	notFound := errf(CodeNotFound, "no push with ucsId "+id)
	if !push.ValidID(id) {
		return notFound
	}
	r, err := s.result(c.Request().Context(), azp, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound
	case err != nil:
		return &Error{Code: CodeUnavailable, Message: "results are unavailable; try again later", Internal: err,
			Header: http.Header{"Retry-After": {"5"}}}
	}
	return s.ok(c, resultView(r, s.loc))
}

// result finds the current result of client's push id in at most three steps, each a read by
// key: the final results in memory; the queue, which holds a push until a worker has recorded
// its outcome (one direct get of the push's own subject, which holds only the client's own
// pushes), with the store's progress record of its attempts once a worker has received it;
// for a push no longer in the queue, the store's final or sent record. A push of another
// client is store.ErrNotFound, as an unknown one.
func (s *Server) result(ctx context.Context, client, id string) (store.Result, error) {
	if r, ok := s.results.Get(id); ok {
		return own(r, client)
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	m, err := s.cfg.Waiting.Get(ctx, client, id)
	switch {
	case err == nil:
		return s.waitingResult(ctx, m), nil
	case !errors.Is(err, queue.ErrNotWaiting):
		return store.Result{}, err // the queue could not say whether it holds the push: not a 404
	}
	return s.outcome(ctx, client, id)
}

// waitingResult is the result of the push m, waiting in the queue: queued if no worker has
// received it yet (no store read), else the progress of its attempts if the store has any.
// When the store is slow or down, the queue answers alone.
func (s *Server) waitingResult(ctx context.Context, w queue.Waited) store.Result {
	m := w.Message
	if !w.Reached {
		return s.queuedResult(m)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StoreWait)
	defer cancel()
	p, err := s.cfg.Store.InProgress(ctx, m.UcsID)
	if err == nil && p.ClientID == m.ClientID {
		if p.State == store.StateQueued {
			s.explainPause(&p)
		}
		return p
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("progress unavailable; answering from the queue", "ucsId", m.UcsID, "err", err)
	}
	return s.queuedResult(m)
}

// outcome reads what became of client's push id once it left the queue, and keeps a final
// result in memory.
func (s *Server) outcome(ctx context.Context, client, id string) (store.Result, error) {
	r, err := s.cfg.Store.Outcome(ctx, id)
	if err != nil {
		return store.Result{}, err
	}
	if r.State.Final() {
		s.results.Add(id, r)
	}
	return own(r, client)
}

// own is r as client may see it: its own, or store.ErrNotFound.
func own(r store.Result, client string) (store.Result, error) {
	if r.ClientID != client {
		return store.Result{}, store.ErrNotFound
	}
	return r, nil
}

// lookupTimeout bounds a lookup's wait for the store: past it the answer is 503, to be retried.
const lookupTimeout = 5 * time.Second

// queuedResult is the result of a push waiting in the queue that no worker has reached; while
// sending is paused, it says why and until when.
func (s *Server) queuedResult(m push.Message) store.Result {
	at := time.UnixMilli(m.Accepted)
	r := store.Result{
		UcsID: m.UcsID, ClientID: m.ClientID, State: store.StateQueued, Type: string(m.Type), UserID: m.UserID,
		Accepted: at, Updated: at,
	}
	s.explainPause(&r)
	return r
}

// explainPause names a pause of sending in a queued push's result: why, and until when.
func (s *Server) explainPause(r *store.Result) {
	if s.cfg.Paused == nil {
		return
	}
	if st, ok := s.cfg.Paused(); ok {
		r.LastError = st.Explain()
		r.RetryAt = st.Until
	}
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

func resultView(r store.Result, loc *time.Location) resultJSON {
	f := func(t time.Time) string {
		if t.IsZero() {
			return ""
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
