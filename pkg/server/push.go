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
	req, err := push.Parse(body)
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
	if idem != nil {
		return s.pushOnce(c, idem, req.Message(push.NewID(now), claims.Azp, now))
	}
	id, err := s.cfg.Publisher.Gather(r.Context(), req.Message("", claims.Azp, now))
	if err != nil {
		return queueError(err)
	}
	// The message is safe in the queue from here on, and the queue answers lookups of it until
	// a worker has recorded its outcome: the store is not needed to accept a push.
	s.accepted(1)
	return s.ok(c, pushAnswer{UcsID: id})
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
		if errs := s.cfg.Publisher.PublishBatch(ctx, []push.Message{msg}, queue.PublishOptions{Dedupe: true}); errs[0] != nil {
			idem.finish(ctx, []int{0})
			return queueError(errs[0])
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
	claims := claimsOf(c)
	notFound := errf(CodeNotFound, "no push with ucsId "+id)
	if !push.ValidID(id) {
		return notFound
	}
	r, ok := s.results.Get(id)
	if !ok {
		var err error
		r, err = s.result(c.Request().Context(), id)
		if errors.Is(err, store.ErrNotFound) {
			return notFound
		}
		if err != nil {
			return &Error{Code: CodeUnavailable, Message: "results are unavailable; try again later", Internal: err,
				Header: http.Header{"Retry-After": {"5"}}}
		}
		if r.State.Final() {
			s.results.Add(id, r)
		}
	}
	if r.ClientID != claims.Azp {
		return notFound
	}
	return s.ok(c, resultView(r, s.loc))
}

// result finds the current result of a push. The queue holds a push until a worker has
// recorded its outcome, so it is asked first (a direct get by subject). A push it holds that no
// worker has received yet is queued, no store read needed; one a worker received costs one
// store read, for the progress of its attempts, and when the store is slow or down the queue
// answers alone. A push no longer in the queue is finished or sent: its final record answers in
// one read, otherwise its sent and progress records in two more.
func (s *Server) result(ctx context.Context, id string) (store.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	m, reached, qerr := s.cfg.Waiting.Get(ctx, id)
	if qerr == nil {
		if !reached {
			return s.queuedResult(m), nil
		}
		pctx, pcancel := context.WithTimeout(ctx, s.cfg.StoreWait)
		defer pcancel()
		p, err := s.cfg.Store.InProgress(pctx, id)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("progress unavailable; answering from the queue", "ucsId", id, "err", err)
		}
		return s.queuedResult(m), nil
	}
	r, err := s.cfg.Store.Current(ctx, id)
	if !errors.Is(err, store.ErrNotFound) {
		return r, err
	}
	if !errors.Is(qerr, queue.ErrNotWaiting) {
		return r, qerr // the queue could not say whether it holds the push: not a 404
	}
	// Nowhere: before saying so, ask the stream's leader, as the replica that answered the
	// direct get may not hold a push acknowledged a moment ago.
	m, lerr := s.cfg.Waiting.FromLeader(ctx, id)
	switch {
	case lerr == nil:
		return s.queuedResult(m), nil
	case !errors.Is(lerr, queue.ErrNotWaiting):
		return r, lerr
	}
	// A push stored in a chunk may have left it and been delivered in the meantime (a worker
	// records the outcome before the queue lets go of it): the store has it now, if anyone.
	return s.cfg.Store.Current(ctx, id)
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
	if s.cfg.Paused != nil {
		if st, ok := s.cfg.Paused(); ok {
			r.LastError = st.Explain()
			r.RetryAt = st.Until
		}
	}
	return r
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
