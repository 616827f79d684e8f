package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"

	"github.com/campus-it/ucs/pkg/push"
)

// A push's records, in the collection push_results, are keyed by what their readers hold:
//
//	<ucsId>     the final result (delivered or failed): the lookup reads it first, so a
//	            finished push costs one read
//	<ucsId>/s   sent: the platform accepted the message and gave its msgid
//	<ucsId>/p   progress: an attempt under way, or a retry waiting (replaced as attempts go)
//
// and the platform's msgid, which its delivery receipt carries, maps to the sent record in
// push_msgids (keyed by the msgid as a decimal string). A queued push that no worker has
// reached yet has no record: the queue itself answers for it.
const (
	suffixSent     = "/s"
	suffixProgress = "/p"
)

// resultDoc is a push.Result as stored. At is when it was written; retention counts from it.
type resultDoc struct {
	ID          string `bson:"_id"`
	push.Result `bson:",inline"`
	At          time.Time `bson:"at"`
}

// msgDoc maps a platform msgid to the push it delivered and the follower it went to.
type msgDoc struct {
	ID          string `bson:"_id"`
	push.Result `bson:",inline"`
	OpenID      string    `bson:"openid"`
	At          time.Time `bson:"at"`
}

// Write is one record for a Writer to store.
type Write struct {
	col     string
	id      string
	doc     any
	replace bool // upsert over an earlier record with the same id; otherwise the first one wins
	// exists, when set, is the answer for a record that was there before (the first one
	// wins), rather than nil as for one written.
	exists error
}

// ErrFinalExists is the answer to a FirstFinalRecord when the push had a final result
// already; that earlier one stays, and is the push's result.
var ErrFinalExists = errors.New("the push has a final result already")

// FinalRecord is the final result of a push. A second final record of the same push (a receipt
// the platform repeats) changes nothing.
func FinalRecord(r push.Result, at time.Time) Write {
	return Write{col: colResults, id: r.UcsID, doc: resultDoc{ID: r.UcsID, Result: r, At: at}}
}

// FirstFinalRecord is FinalRecord for a writer that must know whether its result is the one
// kept: a push that has a final result already answers ErrFinalExists (the store keeps the
// first final result of a push, whichever wrote it), so that the writer tells every front end
// the result the store has (Store.Final) rather than its own.
func FirstFinalRecord(r push.Result, at time.Time) Write {
	w := FinalRecord(r, at)
	w.exists = ErrFinalExists
	return w
}

// SentRecords are the records of a push the platform accepted: its sent result, and its msgid
// with the follower it was sent to, for the delivery receipt.
func SentRecords(r push.Result, openID string, at time.Time) []Write {
	msg := strconv.FormatInt(r.MsgID, 10)
	return []Write{
		{col: colResults, id: r.UcsID + suffixSent, doc: resultDoc{ID: r.UcsID + suffixSent, Result: r, At: at}},
		{col: colMsgIDs, id: msg, doc: msgDoc{ID: msg, Result: r, OpenID: openID, At: at}},
	}
}

// ErrHistory is the answer to a FirstAttemptRecord when the push has a progress record
// already: its delivery was begun before (a copy of the message the queue gave out again), and
// the writer must read what came of it rather than start afresh.
var ErrHistory = errors.New("the push has a delivery history already")

// FirstAttemptRecord marks the start of a push's first attempt. It is inserted, not replaced,
// and answers ErrHistory when the push has a progress record already.
func FirstAttemptRecord(r push.Result, at time.Time) Write {
	return Write{col: colResults, id: r.UcsID + suffixProgress, doc: resultDoc{ID: r.UcsID + suffixProgress, Result: r, At: at},
		exists: ErrHistory}
}

// ProgressRecord replaces a push's progress: a later attempt under way, or a retry waiting.
func ProgressRecord(r push.Result, at time.Time) Write {
	w := FirstAttemptRecord(r, at)
	w.replace, w.exists = true, nil
	return w
}

// Final returns the final result of ucsID, or ErrNotFound. It costs one read.
func (s *Store) Final(ctx context.Context, ucsID string) (push.Result, error) {
	return s.getResult(ctx, ucsID)
}

// Progress returns what is known of a push that is not final: its sent record if there is
// one, otherwise its progress record, or ErrNotFound. It costs two reads, made at once.
func (s *Store) Progress(ctx context.Context, ucsID string) (push.Result, error) {
	type got struct {
		r   push.Result
		err error
	}
	ch := make(chan got, 1)
	go func() {
		r, err := s.getResult(ctx, ucsID+suffixProgress)
		ch <- got{r, err}
	}()
	sent, serr := s.getResult(ctx, ucsID+suffixSent)
	p := <-ch
	switch {
	case serr == nil:
		if p.err == nil && p.r.Attempts > sent.Attempts {
			// A redelivery after the sent record was written but before its ack counted.
			sent.Attempts = p.r.Attempts
		}
		return sent, nil
	case !errors.Is(serr, ErrNotFound):
		return push.Result{}, serr
	}
	return p.r, p.err
}

// Outcome returns what became of a push that left the queue: its final result, else its sent
// result, or ErrNotFound (a push this service never accepted). A worker records one of them
// before the queue lets go of a push. At most two reads.
func (s *Store) Outcome(ctx context.Context, ucsID string) (push.Result, error) {
	r, err := s.Final(ctx, ucsID)
	if !errors.Is(err, ErrNotFound) {
		return r, err
	}
	return s.getResult(ctx, ucsID+suffixSent)
}

// Current returns the most advanced record of a push: final, else sent, else progress, or
// ErrNotFound when no worker has reached it. At most three reads.
func (s *Store) Current(ctx context.Context, ucsID string) (push.Result, error) {
	r, err := s.Final(ctx, ucsID)
	if !errors.Is(err, ErrNotFound) {
		return r, err
	}
	return s.Progress(ctx, ucsID)
}

func (s *Store) getResult(ctx context.Context, id string) (push.Result, error) {
	var d resultDoc
	if err := s.getByID(ctx, colResults, id, &d); err != nil {
		return push.Result{}, err
	}
	return d.Result, nil
}

// InProgress returns the progress record of a push (an attempt under way, or a retry
// waiting), or ErrNotFound. It costs one read.
func (s *Store) InProgress(ctx context.Context, ucsID string) (push.Result, error) {
	return s.getResult(ctx, ucsID+suffixProgress)
}

// SentByMsgID returns the sent record of the push the platform gave msgID, and the follower
// it was sent to, or ErrNotFound when this service sent no such message.
func (s *Store) SentByMsgID(ctx context.Context, msgID int64) (push.Result, string, error) {
	var d msgDoc
	if err := s.getByID(ctx, colMsgIDs, strconv.FormatInt(msgID, 10), &d); err != nil {
		return push.Result{}, "", err
	}
	return d.Result, d.OpenID, nil
}

// Receipt turns a sent result into its final result by the platform's report
// (TEMPLATESENDJOBFINISH): "success" is delivered, anything else ("failed:user block",
// "failed: system failed") failed with the status as reason.
func Receipt(sent push.Result, status string, at time.Time) push.Result {
	r := sent
	r.Finished, r.Updated = at, at
	if status == "success" {
		r.State = push.StateDelivered
		return r
	}
	r.State, r.Reason = push.StateFailed, status
	return r
}

// write stores a batch of records: inserts in one unordered InsertMany per collection,
// replacements in one ordered BulkWrite. A record inserted again (the same push's record written
// after a redelivery) is kept as first written; existed[i] reports that of ws[i].
func (s *Store) write(ctx context.Context, ws []Write) (existed []bool, err error) {
	inserts := map[string][]any{}
	// at maps each collection's inserts back to their place in ws.
	at := map[string][]int{}
	replaces := map[string][]mongo.WriteModel{}
	for i, w := range ws {
		if w.replace {
			replaces[w.col] = append(replaces[w.col],
				mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: w.id}}).SetReplacement(w.doc).SetUpsert(true))
		} else {
			inserts[w.col] = append(inserts[w.col], w.doc)
			at[w.col] = append(at[w.col], i)
		}
	}
	existed = make([]bool, len(ws))
	for col, docs := range inserts {
		_, err := s.col(col).InsertMany(ctx, docs, unordered)
		if err != nil && !onlyDuplicates(err) {
			return nil, fmt.Errorf("insert into %s: %w", col, err)
		}
		var bwe mongo.BulkWriteException
		if errors.As(err, &bwe) {
			for _, we := range bwe.WriteErrors {
				if we.Index >= 0 && we.Index < len(at[col]) {
					existed[at[col][we.Index]] = true
				}
			}
		}
	}
	for col, models := range replaces {
		// An upsert racing an insert of the same record (a first attempt's record, posted
		// without waiting) can fail on the duplicate key; the record exists then, and the
		// replacement is made again, as MongoDB advises for upserts.
		var err error
		for range 3 {
			if _, err = s.col(col).BulkWrite(ctx, models, ordered); err == nil || !onlyDuplicates(err) {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("replace in %s: %w", col, err)
		}
	}
	return existed, nil
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
