package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/natskv"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
)

// Records keeps the records of Idempotency-Keys for every front end; *natskv.Records
// implements it. Create fails with natskv.ErrRecordExists when the key has a record, Get with
// natskv.ErrNoRecord when it has none.
type Records interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Create(ctx context.Context, key string, value []byte) error
	Put(ctx context.Context, key string, value []byte) error
}

// IdempotencyTTL is how long an Idempotency-Key is remembered.
const IdempotencyTTL = queue.DedupeWindow

// idempotencyStale is how long a request may hold a key unfinished before a retry with the key
// takes over: the request's front end died or gave up between taking the key and recording the
// queue's answers. It is well inside the stream's dedupe window, so a take-over publishes
// nothing twice.
const idempotencyStale = 30 * time.Second

// idemRecord is what a key remembers: the body it came with, the ucsId given to each item (""
// for an item refused for its content), and which items the queue did not take.
type idemRecord struct {
	Hash    string   `json:"h"`
	IDs     []string `json:"ids"`
	Pending int64    `json:"pending,omitempty"` // unix ms the request took the key; 0 once finished
	Failed  []int    `json:"failed,omitempty"`  // items without a PubAck, to publish on a retry
}

// idemRequest is a request carrying an Idempotency-Key.
type idemRequest struct {
	s      *Server
	key    string // the record's key: the client and its key, hashed
	hash   string
	replay *idemRecord // the key's record, when it has one to answer from
	owner  bool        // this request took the key: it publishes, later ones answer from it
}

var errIdempotencyRace = errors.New("another request took the key first")

// idempotency reads the request's Idempotency-Key: nil without one; with a record to answer
// from in replay; a 409 for the key used with another body or still in use by a request under
// way. A push without the header has nothing to do with any of this.
func (s *Server) idempotency(c echo.Context, body []byte) (*idemRequest, error) {
	key := c.Request().Header.Get("Idempotency-Key")
	if key == "" && len(c.Request().Header.Values("Idempotency-Key")) == 0 {
		return nil, nil
	}
	if !validIdempotencyKey(key) || len(c.Request().Header.Values("Idempotency-Key")) > 1 {
		return nil, errf(CodeBadRequest, "Idempotency-Key: must be 1 to 128 printable ASCII characters other than space, given once")
	}
	if s.cfg.Records == nil {
		return nil, errf(CodeBadRequest, "Idempotency-Key: not supported by this server")
	}
	sum := sha256.Sum256([]byte(claimsOf(c).Azp + "\x00" + key))
	bh := sha256.Sum256(body)
	r := &idemRequest{s: s, key: hex.EncodeToString(sum[:]), hash: hex.EncodeToString(bh[:])}
	if err := r.load(c.Request().Context()); err != nil {
		return nil, err
	}
	return r, nil
}

// load reads the key's record: replay is set when there is one to answer from.
func (r *idemRequest) load(ctx context.Context) error {
	s := r.s
	raw, err := s.cfg.Records.Get(ctx, r.key)
	if errors.Is(err, natskv.ErrNoRecord) {
		return nil
	}
	if err != nil {
		return &Error{Code: CodeUnavailable, Message: "the push queue is unavailable; try again later", Internal: err,
			Header: http.Header{"Retry-After": {"5"}}}
	}
	var rec idemRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return &Error{Code: CodeInternal, Message: "internal error", Internal: err}
	}
	if rec.Hash != r.hash {
		return errf(CodeConflict, "Idempotency-Key: already used with a different body")
	}
	if rec.Pending != 0 && s.now().Sub(time.UnixMilli(rec.Pending)) < idempotencyStale {
		return &Error{Code: CodeConflict, Message: "Idempotency-Key: a request with this key is still under way; try again shortly",
			Header: http.Header{"Retry-After": {"2"}}}
	}
	if rec.Pending != 0 {
		// Its request never recorded the queue's answers: publish every item again; the
		// stream keeps the ones it has (their ucsIds are their message ids).
		rec.Failed = rec.Failed[:0]
		for i, id := range rec.IDs {
			if id != "" {
				rec.Failed = append(rec.Failed, i)
			}
		}
	}
	r.replay = &rec
	s.cfg.Metrics.Replayed()
	return nil
}

// validIdempotencyKey: 1 to 128 characters from '!' to '~', the description's pattern
// ^[!-~]{1,128}$. Space is left out because HTTP trims it at either end of a header value.
func validIdempotencyKey(k string) bool {
	if len(k) < 1 || len(k) > 128 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < '!' || k[i] > '~' {
			return false
		}
	}
	return true
}

// claim records that this request takes the key with the ucsIds it gave each item;
// errIdempotencyRace if another request took it first.
func (r *idemRequest) claim(ctx context.Context, ids []string) error {
	b, _ := json.Marshal(idemRecord{Hash: r.hash, IDs: ids, Pending: r.s.now().UnixMilli()})
	err := r.s.cfg.Records.Create(ctx, r.key, b)
	switch {
	case errors.Is(err, natskv.ErrRecordExists):
		return errIdempotencyRace
	case err != nil:
		return &Error{Code: CodeUnavailable, Message: "the push queue is unavailable; try again later", Internal: err,
			Header: http.Header{"Retry-After": {"5"}}}
	}
	r.replay = &idemRecord{Hash: r.hash, IDs: ids}
	r.owner = true
	return nil
}

// finish records the queue's answers: failed are the items that got no PubAck. A record that
// cannot be written stays pending, and a retry after idempotencyStale publishes every item
// again, which the stream's dedupe makes harmless.
func (r *idemRequest) finish(ctx context.Context, failed []int) {
	rec := *r.replay
	rec.Pending, rec.Failed = 0, failed
	b, _ := json.Marshal(rec)
	if err := r.s.cfg.Records.Put(context.WithoutCancel(ctx), r.key, b); err != nil {
		r.s.log.Warn("recording an Idempotency-Key's answer failed", "err", err)
	}
}

// publishOptions are the queue's options for this request's pushes: the record's key as the
// message id, so that the queue stores them once however often the request is retried within
// the key's lifetime (queue.DedupeWindow is IdempotencyTTL).
func (r *idemRequest) publishOptions() queue.PublishOptions {
	return queue.PublishOptions{MsgID: r.key}
}

// republish publishes again, under their recorded ucsIds, the messages of the items the record
// says the queue did not take, and returns the indexes still not taken. msgs holds the message
// of every item the body's rules accept, by index. The items go as one atomic batch, as the
// first time, under the same message id: if the first request's batch was stored after all
// (its answer lost), the queue says so and stores nothing again.
func (r *idemRequest) republish(ctx context.Context, msgs map[int]push.Message) []int {
	rec := r.replay
	if len(rec.Failed) == 0 {
		return nil
	}
	var again []push.Message
	var at []int
	for _, i := range rec.Failed {
		if m, ok := msgs[i]; ok && i < len(rec.IDs) {
			m.UcsID = rec.IDs[i]
			again = append(again, m)
			at = append(at, i)
		}
	}
	if err := r.s.cfg.Publisher.PublishBatch(ctx, again, r.publishOptions()); err != nil {
		r.s.log.Warn("publishing a retried request's pushes failed", "pushes", len(again), "err", err)
		return at
	}
	r.s.accepted(len(again))
	r.finish(ctx, nil)
	return nil
}
