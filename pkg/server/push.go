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
	// The message is safe in the queue from here on: whatever happens below, the caller gets its
	// ucsId. The queued record makes the ucsId visible to lookups before a worker reaches it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.cfg.QueuedWriteTimeout)
	err = s.cfg.Events.Write(ctx, store.Event{
		UcsID: id, ClientID: claims.Azp, Kind: store.KindQueued, At: now, UserID: req.UserID, Type: string(req.Type),
	})
	cancel()
	if err != nil {
		s.log.Warn("recording queued state failed; the worker will record the delivery", "ucsId", id, "err", err)
	}
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
	r, ok := s.results.get(id)
	if !ok {
		var err error
		r, err = s.cfg.Store.Result(c.Request().Context(), id)
		if errors.Is(err, store.ErrNotFound) {
			return notFound
		}
		if err != nil {
			return &Error{Code: CodeUnavailable, Message: "results are unavailable; try again later", Internal: err}
		}
		if r.State.Final() {
			s.results.put(r)
		}
	}
	if r.ClientID != claims.Azp {
		return notFound
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

// resultCache keeps final results, which never change, so that callers polling for a result
// they already have are served without the store.
type resultCache struct {
	mu  sync.Mutex
	m   map[string]store.Result
	max int
}

func newResultCache(max int) *resultCache {
	return &resultCache{m: map[string]store.Result{}, max: max}
}

func (rc *resultCache) get(id string) (store.Result, bool) {
	rc.mu.Lock()
	r, ok := rc.m[id]
	rc.mu.Unlock()
	return r, ok
}

func (rc *resultCache) put(r store.Result) {
	rc.mu.Lock()
	if len(rc.m) >= rc.max {
		for k := range rc.m {
			delete(rc.m, k)
			if len(rc.m) < rc.max*9/10 {
				break
			}
		}
	}
	rc.m[r.UcsID] = r
	rc.mu.Unlock()
}
