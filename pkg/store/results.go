package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
)

// State is the delivery state of a push, as the lookup reports it.
type State string

// The delivery states. queued → sending → sent → delivered or failed; a failed attempt that
// will be retried goes back to queued with the attempt counted and its error kept.
const (
	StateQueued    State = "queued"
	StateSending   State = "sending"
	StateSent      State = "sent"
	StateDelivered State = "delivered"
	StateFailed    State = "failed"
)

// Final reports whether no further change can happen.
func (s State) Final() bool { return s == StateDelivered || s == StateFailed }

// Kind is what an event records.
type Kind string

// The event kinds.
const (
	// KindQueued: the front end accepted the push (after the queue acknowledged it).
	KindQueued Kind = "queued"
	// KindAttempt: a worker starts an attempt.
	KindAttempt Kind = "attempt"
	// KindRetry: an attempt failed and the message will be tried again.
	KindRetry Kind = "retry"
	// KindSent: the platform accepted the message and gave its msgid.
	KindSent Kind = "sent"
	// KindFailed: the message will never be delivered; Error says why.
	KindFailed Kind = "failed"
)

// Event is one entry of a push's delivery record. Its document id is derived from the ucsId,
// the kind and the attempt (see Key), so a result is read by primary key alone, which both
// MongoDB and FerretDB answer without scanning, and a repeated event is stored once.
type Event struct {
	UcsID    string    `bson:"ucs"`
	ClientID string    `bson:"client"`
	Kind     Kind      `bson:"kind"`
	At       time.Time `bson:"at"`
	UserID   string    `bson:"user,omitempty"`
	Type     string    `bson:"type,omitempty"`
	Attempt  int       `bson:"attempt,omitempty"`
	Error    string    `bson:"error,omitempty"`
	MsgID    int64     `bson:"msgid,omitempty"`
	// RetryAt is when a retried message will be tried again.
	RetryAt time.Time `bson:"retry_at,omitempty"`
}

// Receipt is the platform's final report on a sent message (TEMPLATESENDJOBFINISH).
type Receipt struct {
	MsgID  int64     `bson:"_id"`
	Status string    `bson:"status"`
	At     time.Time `bson:"at"`
}

// Delivered reports whether the platform reports the message as shown to the user.
func (r Receipt) Delivered() bool { return r.Status == "success" }

// Result is the current state of a push, derived from its events and receipt.
type Result struct {
	UcsID     string    `json:"ucsId"`
	ClientID  string    `json:"-"`
	State     State     `json:"state"`
	Type      string    `json:"type,omitempty"`
	UserID    string    `json:"userId,omitempty"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"lastError,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	MsgID     int64     `json:"msgId,omitempty"`
	Accepted  time.Time `json:"acceptedAt,omitzero"`
	Updated   time.Time `json:"updatedAt,omitzero"`
	Sent      time.Time `json:"sentAt,omitzero"`
	Finished  time.Time `json:"finishedAt,omitzero"`
	RetryAt   time.Time `json:"nextAttemptAt,omitzero"`
}

// Key is the document id of an event: "<ucsId>/q" for queued, "/a<n>" and "/r<n>" for attempt
// n and its retry, "/s" for sent and "/f" for failed.
func (e Event) Key() string {
	switch e.Kind {
	case KindQueued:
		return e.UcsID + "/q"
	case KindAttempt:
		return e.UcsID + "/a" + strconv.Itoa(e.Attempt)
	case KindRetry:
		return e.UcsID + "/r" + strconv.Itoa(e.Attempt)
	case KindSent:
		return e.UcsID + "/s"
	case KindFailed:
		return e.UcsID + "/f"
	}
	return e.UcsID + "/" + string(e.Kind)
}

type eventDoc struct {
	ID    string `bson:"_id"`
	Event `bson:",inline"`
}

// AppendEvents inserts events in one unordered batch. An event already stored (the same ucsId,
// kind and attempt, written again after a redelivery) is kept as first written.
func (s *Store) AppendEvents(ctx context.Context, evs []Event) error {
	if len(evs) == 0 {
		return nil
	}
	docs := make([]any, len(evs))
	for i := range evs {
		docs[i] = eventDoc{ID: evs[i].Key(), Event: evs[i]}
	}
	_, err := s.events.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if err != nil && !onlyDuplicates(err) {
		return fmt.Errorf("insert events: %w", err)
	}
	return nil
}

// onlyDuplicates reports whether every failure of a bulk insert is a duplicate key.
func onlyDuplicates(err error) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return false
	}
	for _, we := range bwe.WriteErrors {
		if we.Code != 11000 {
			return false
		}
	}
	return true
}

// maxProbe bounds the attempts a lookup reads one by one.
const maxProbe = 1000

// Result derives the current result of ucsID. It returns ErrNotFound when nothing is recorded.
// It reads by primary key only: the queued, sent and failed records at once, then, while the
// message is still under way, its attempts one after another (usually one or two).
func (s *Store) Result(ctx context.Context, ucsID string) (Result, error) {
	var evs []Event
	fixed, err := s.getEvents(ctx, ucsID+"/q", ucsID+"/s", ucsID+"/f")
	if err != nil {
		return Result{}, err
	}
	evs = append(evs, fixed...)
	done := 0
	for _, e := range fixed {
		if e.Kind == KindSent || e.Kind == KindFailed {
			done = max(done, e.Attempt)
		}
	}
	if done > 0 {
		// Finished: only the last retry's error is still of interest.
		if done > 1 {
			r, err := s.getEvents(ctx, ucsID+"/r"+strconv.Itoa(done-1))
			if err != nil {
				return Result{}, err
			}
			evs = append(evs, r...)
		}
	} else {
		for n := 1; n <= maxProbe; n++ {
			got, err := s.getEvents(ctx, ucsID+"/a"+strconv.Itoa(n), ucsID+"/r"+strconv.Itoa(n))
			if err != nil {
				return Result{}, err
			}
			evs = append(evs, got...)
			if len(got) < 2 {
				break
			}
		}
	}
	if len(evs) == 0 {
		return Result{}, ErrNotFound
	}
	r := Fold(ucsID, evs)
	if r.State == StateSent && r.MsgID != 0 {
		rc, err := s.Receipt(ctx, r.MsgID)
		switch {
		case err == nil:
			r.ApplyReceipt(rc)
		case !errors.Is(err, ErrNotFound):
			return Result{}, err
		}
	}
	return r, nil
}

// getEvents reads the events with the given ids, concurrently; missing ones are skipped.
func (s *Store) getEvents(ctx context.Context, ids ...string) ([]Event, error) {
	type got struct {
		ev  Event
		ok  bool
		err error
	}
	res := make([]got, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d eventDoc
			err := s.events.FindOne(ctx, bson.M{"_id": id}).Decode(&d)
			switch {
			case err == nil:
				res[i] = got{ev: d.Event, ok: true}
			case !errors.Is(err, mongo.ErrNoDocuments):
				res[i] = got{err: fmt.Errorf("find event %s: %w", id, err)}
			}
		}()
	}
	wg.Wait()
	out := make([]Event, 0, len(ids))
	for _, g := range res {
		if g.err != nil {
			return nil, g.err
		}
		if g.ok {
			out = append(out, g.ev)
		}
	}
	return out, nil
}

// Fold derives a result from events in any order. Events from different processes may carry
// slightly skewed clocks, so the fold never lets a later-looking event undo a final or sent
// state, and a queued event only matters when nothing else is known.
func Fold(ucsID string, evs []Event) Result {
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At.Before(evs[j].At) })
	r := Result{UcsID: ucsID}
	for _, e := range evs {
		if r.ClientID == "" {
			r.ClientID = e.ClientID
		}
		if r.Type == "" {
			r.Type = e.Type
		}
		if r.UserID == "" {
			r.UserID = e.UserID
		}
		if e.Attempt > r.Attempts {
			r.Attempts = e.Attempt
		}
		if e.At.After(r.Updated) {
			r.Updated = e.At
		}
		switch e.Kind {
		case KindQueued:
			r.Accepted = e.At
			if r.State == "" {
				r.State = StateQueued
			}
		case KindAttempt:
			if r.State == "" || r.State == StateQueued {
				r.State = StateSending
				r.RetryAt = time.Time{}
			}
		case KindRetry:
			r.LastError = e.Error
			if r.State == "" || r.State == StateQueued || r.State == StateSending {
				r.State = StateQueued
				r.RetryAt = e.RetryAt
			}
		case KindSent:
			if !r.State.Final() {
				r.State = StateSent
				r.MsgID = e.MsgID
				r.Sent = e.At
				r.RetryAt = time.Time{}
			}
		case KindFailed:
			if !r.State.Final() {
				r.State = StateFailed
				r.Reason = e.Error
				r.Finished = e.At
				r.RetryAt = time.Time{}
			}
		}
	}
	if r.Accepted.IsZero() && len(evs) > 0 {
		r.Accepted = evs[0].At
	}
	return r
}

// ApplyReceipt turns a sent result into delivered or failed.
func (r *Result) ApplyReceipt(rc Receipt) {
	if r.State != StateSent {
		return
	}
	r.Finished = rc.At
	if rc.At.After(r.Updated) {
		r.Updated = rc.At
	}
	if rc.Delivered() {
		r.State = StateDelivered
		return
	}
	r.State = StateFailed
	r.Reason = rc.Status
}

// PutReceipt records the platform's final report on msgID. The platform repeats event pushes
// it thinks were not received, so a second report of the same message changes nothing.
func (s *Store) PutReceipt(ctx context.Context, rc Receipt) error {
	_, err := s.receipts.InsertOne(ctx, rc)
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("insert receipt: %w", err)
	}
	return nil
}

// Receipt returns the platform's report on msgID, or ErrNotFound.
func (s *Store) Receipt(ctx context.Context, msgID int64) (Receipt, error) {
	var rc Receipt
	err := s.receipts.FindOne(ctx, bson.M{"_id": msgID}).Decode(&rc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return rc, ErrNotFound
	}
	if err != nil {
		return rc, fmt.Errorf("find receipt: %w", err)
	}
	return rc, nil
}
