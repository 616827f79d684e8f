package server

import (
	"context"
	"errors"
	"io"
	"mime"
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
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return errf(CodeMediaType, "Content-Type must be application/json")
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
			return errf(CodeBadRequest, ve.Error())
		}
		return &Error{Code: CodeBadRequest, Message: "body: invalid", Internal: err}
	}
	claims := claimsOf(c)
	now := s.now()
	id := push.NewID(now)
	msg := req.Message(id, claims.Azp, now)
	if err := s.cfg.Publisher.Publish(r.Context(), msg); err != nil {
		if errors.Is(err, queue.ErrFull) {
			return &Error{Code: CodeUnavailable, Message: "the push queue is full; try again later", Internal: err,
				Header: http.Header{"Retry-After": {"30"}}}
		}
		return &Error{Code: CodeUnavailable, Message: "the push queue is unavailable; try again later", Internal: err,
			Header: http.Header{"Retry-After": {"5"}}}
	}
	// The message is safe in the queue from here on, and the queue answers lookups of it until
	// a worker has recorded its outcome: the store is not needed to accept a push.
	return s.ok(c, pushAnswer{UcsID: id})
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

// result finds the current result of a push. The final record comes first: one read answers
// a finished push. A push not final is in the queue until a worker has recorded its outcome,
// and the sent and progress records (two reads, at once) say how far its delivery got. When
// the store is slow, the queue answers alone for a push it holds, so an accepted push is
// visible at once whatever the store does.
func (s *Server) result(ctx context.Context, id string) (store.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	type got struct {
		r   store.Result
		err error
	}
	finalc := make(chan got, 1)
	go func() {
		r, err := s.cfg.Store.Final(ctx, id)
		finalc <- got{r, err}
	}()
	var final got
	wait := time.NewTimer(s.cfg.StoreWait)
	select {
	case final = <-finalc:
		wait.Stop()
	case <-wait.C:
		if m, err := s.cfg.Waiting.Get(ctx, id); err == nil {
			return queuedResult(m), nil
		}
		final = <-finalc
	}
	if !errors.Is(final.err, store.ErrNotFound) {
		return final.r, final.err
	}

	progc := make(chan got, 1)
	go func() {
		r, err := s.cfg.Store.Progress(ctx, id)
		progc <- got{r, err}
	}()
	m, qerr := s.cfg.Waiting.Get(ctx, id)
	if qerr == nil {
		wait.Reset(s.cfg.StoreWait)
		defer wait.Stop()
		select {
		case p := <-progc:
			if p.err == nil {
				return p.r, nil
			}
		case <-wait.C:
		}
		return queuedResult(m), nil
	}
	p := <-progc
	if !errors.Is(p.err, store.ErrNotFound) {
		return p.r, p.err
	}
	if !errors.Is(qerr, queue.ErrNotWaiting) {
		return store.Result{}, qerr // the queue cannot say: not a 404
	}
	// Neither in the queue nor under way: unknown, or finished between the first read and the
	// queue's answer (an outcome is recorded before the queue lets the message go).
	return s.cfg.Store.Final(ctx, id)
}

// lookupTimeout bounds a lookup's wait for the store: past it the answer is 503, to be retried.
const lookupTimeout = 5 * time.Second

// queuedResult is the result of a push waiting in the queue that no worker has reached.
func queuedResult(m push.Message) store.Result {
	at := time.UnixMilli(m.Accepted)
	return store.Result{
		UcsID: m.UcsID, ClientID: m.ClientID, State: store.StateQueued, Type: string(m.Type), UserID: m.UserID,
		Accepted: at, Updated: at,
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
