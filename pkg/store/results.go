package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"

	"github.com/campus-it/ucs/pkg/push"
)

// A push's records, in the collection push_results, are keyed by what their readers hold:
//
//	<ucsId>     what came of the push once a worker was done with it: its sent record (the
//	            platform accepted the message and gave its msgid), or the final result a
//	            worker wrote (it failed without being sent)
//	<ucsId>/f   the final result of a sent push: its delivery receipt (delivered or failed).
//	            It may come before the sent record, while the push still waits in the
//	            queue: the worker that sent it stopped before writing that record, and the
//	            front ends applied the receipt from its announcement. Current reads it then,
//	            and the worker that gets the push next writes the sent record. A worker's
//	            failure of a push that called the platform is inserted here first, then
//	            copied to <ucsId>: an earlier call's answer may have been lost while the
//	            platform took the message, and its receipt and the failure are then two final
//	            results of one push, of which the store keeps the first it took (see
//	            FirstFailureAfterCalls)
//	<ucsId>/p   progress: an attempt under way, or a retry waiting. A push's first attempt is
//	            inserted here whole; every later write of its progress is one more entry of the
//	            record's log (see ProgressRecord), and the entry with the greatest key is the
//	            push's progress
//
// and the platform's msgid, which its delivery receipt carries, maps to the sent record in
// push_msgids (keyed by the msgid as a decimal string). A queued push that no worker has
// reached yet has no record: the queue itself answers for it.
//
// A store written by an earlier version holds sent records at <ucsId>/s and every final
// result at <ucsId>; see legacy.
const (
	suffixReceipt    = "/f"
	suffixProgress   = "/p"
	suffixLegacySent = "/s"
)

// finalKey is where the final result r is kept: a sent push's (it has a msgid) comes from its
// receipt, at <ucsId>/f; any other at <ucsId>, where a sent record would otherwise be.
func finalKey(r push.Result) string {
	if r.MsgID != 0 {
		return r.UcsID + suffixReceipt
	}
	return r.UcsID
}

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

// progressDoc is a progress record as stored: the first attempt's result, inserted whole, and
// the log of every later write of the push's progress, by its key (see ProgressRecord).
type progressDoc struct {
	ID          string `bson:"_id"`
	push.Result `bson:",inline"`
	Log         map[string]push.Result `bson:"log,omitempty"`
}

// Write is one record for a Writer to store.
type Write struct {
	col     string
	id      string
	doc     any
	replace bool // upsert over an earlier record with the same id; otherwise the first one wins
	// update, when set, is an upsert by this update instead (an entry of a progress log).
	update bson.D
	// exists, when set, is the answer for a record that was there before (the first one
	// wins), rather than nil as for one written.
	exists error
	// receiptOf is the ucsId of a receipt's final result (see legacyFinal), else "".
	receiptOf string
}

// ErrFinalExists is the answer to a FirstFinalRecord when the push had a final result
// already (or, for a worker's failure, a sent record); that earlier one stays, and is the
// push's result.
var ErrFinalExists = errors.New("the push has a final result already")

// FinalRecord is the final result of a push: a delivery receipt's for a sent push (r has its
// msgid), else a worker's. A second final record of the same push (a receipt the platform
// repeats) changes nothing.
func FinalRecord(r push.Result, at time.Time) Write {
	id := finalKey(r)
	w := Write{col: colResults, id: id, doc: resultDoc{ID: id, Result: r, At: at}}
	if r.MsgID != 0 {
		w.receiptOf = r.UcsID
	}
	return w
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

// FirstFailureAfterCalls is a worker's failure r of a push that called the platform without
// learning a msgid, inserted where a delivery receipt's result goes (<ucsId>/f): an earlier
// call's answer may have been lost while the platform took the message, and that call's receipt
// and this failure then compete for the one record, which keeps the first. It answers
// ErrFinalExists when a receipt (or this failure, written by an earlier copy of the message) is
// there already; ReceiptResult reads which. The one kept is then copied to <ucsId>, where
// lookups read it: FirstFinalRecord for a failure, ReceiptCopy for a receipt.
func FirstFailureAfterCalls(r push.Result, at time.Time) Write {
	id := r.UcsID + suffixReceipt
	return Write{col: colResults, id: id, doc: resultDoc{ID: id, Result: r, At: at}, exists: ErrFinalExists}
}

// SentRecords are the records of a push the platform accepted: its sent result, and its msgid
// with the follower it was sent to, for the delivery receipt.
func SentRecords(r push.Result, openID string, at time.Time) []Write {
	msg := strconv.FormatInt(r.MsgID, 10)
	return []Write{
		{col: colResults, id: r.UcsID, doc: resultDoc{ID: r.UcsID, Result: r, At: at}},
		{col: colMsgIDs, id: msg, doc: msgDoc{ID: msg, Result: r, OpenID: openID, At: at}},
	}
}

// ReceiptCopy is the copy at <ucsId> of the final result f a delivery receipt gave a push
// before its sent record was written (see Current): lookups read <ucsId> first and find the
// result there, whatever became of <ucsId>/f, which the sweep may take first (it was written
// earlier). Inserted: a record at <ucsId> (the sent record, or an earlier layout's final
// result) stays.
func ReceiptCopy(f push.Result, at time.Time) Write {
	return Write{col: colResults, id: f.UcsID, doc: resultDoc{ID: f.UcsID, Result: f, At: at}}
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

// ProgressRecord records a push's progress: a later attempt under way, or a retry waiting. It
// is the entry r.Rev of the progress record's log (see DeliveryRev and NextRev), and the push's
// progress while no entry with a greater key is there: an entry that reaches the store late,
// after its worker gave up waiting for it and wrote another, or after the next worker wrote its
// own, changes nothing. The entry written before it by the same delivery is dropped, as no
// reader needs it any more. Without r.Rev (a tool's or a test's record) it replaces the whole
// record.
func ProgressRecord(r push.Result, at time.Time) Write {
	w := FirstAttemptRecord(r, at)
	w.exists = nil
	if r.Rev == "" {
		w.replace = true
		return w
	}
	w.update = bson.D{{Key: "$set", Value: bson.D{{Key: "log." + r.Rev, Value: r}, {Key: "at", Value: at}}}}
	if prev := prevRev(r.Rev); prev != "" {
		w.update = append(w.update, bson.E{Key: "$unset", Value: bson.D{{Key: "log." + prev, Value: ""}}})
	}
	return w
}

// A progress entry's key names the delivery of the message that wrote it and the write's
// number within that delivery, zero-padded so that the keys sort as their numbers do. A
// delivery is its number, the queue's count of the message's deliveries, which grows with each
// delivery of the message, under an epoch, which grows when the count starts again at one (a
// consumer made anew): no two deliveries share a key, each writes above the keys of the
// deliveries before it, and each of its writes is above the one before. The greatest key is
// therefore the latest word of the latest delivery, and a write that a stopped delivery left on
// its way to the store is below it.
const revFormat = "e%04dd%010ds%06dx%08x"

// rev is a progress entry's key as numbers. Its tag, drawn at random when a delivery begins,
// tells the delivery's own entries from those of another delivery with the same epoch and
// number (one of an earlier consumer's, whose count started from one too).
type rev struct {
	epoch, delivery uint64
	n               int
	tag             uint32
}

func (r rev) String() string { return fmt.Sprintf(revFormat, r.epoch, r.delivery, r.n, r.tag) }

func parseRev(s string) (r rev, ok bool) {
	_, err := fmt.Sscanf(s, revFormat, &r.epoch, &r.delivery, &r.n, &r.tag)
	return r, err == nil
}

// DeliveryRev is the key before the first entry that the message's delivery number delivery
// writes (push.Result.Rev of a message's record when its delivery begins).
func DeliveryRev(delivery uint64) string { return rev{delivery: delivery, tag: rand.Uint32()}.String() }

// NextRev is the key of the entry that follows rev in the same delivery.
func NextRev(s string) string {
	r, _ := parseRev(s)
	r.n++
	return r.String()
}

// Rebase is own, the key a delivery is at, once it has read a progress record whose latest
// entry is read ("": the record's first attempt, inserted whole by a first delivery). An entry
// of this delivery (its tag) changes nothing; another of the same or a greater delivery number,
// which only a count started again can give (or a first delivery reading a first record it did
// not write), moves this delivery to the next epoch; otherwise it takes the epoch of what it
// read, if greater.
func Rebase(own, read string) string {
	o, _ := parseRev(own)
	r, entry := parseRev(read)
	if !entry {
		r = rev{delivery: 1} // a first delivery's, of the epoch before any count started again
	}
	epoch := max(o.epoch, r.epoch)
	if entry && r.epoch == o.epoch && r.delivery == o.delivery && r.tag == o.tag {
		return own
	}
	if r.delivery >= o.delivery {
		epoch = max(o.epoch, r.epoch+1)
	}
	if epoch == o.epoch {
		return own
	}
	return rev{epoch: epoch, delivery: o.delivery, tag: o.tag}.String()
}

// prevRev is the key of the entry before rev written by the same delivery, or "".
func prevRev(s string) string {
	r, ok := parseRev(s)
	if !ok || r.n <= 1 {
		return ""
	}
	r.n--
	return r.String()
}

// Final returns the final result of ucsID, or ErrNotFound while it has none.
func (s *Store) Final(ctx context.Context, ucsID string) (push.Result, error) {
	r, err := s.Outcome(ctx, ucsID)
	if err == nil && !r.State.Final() {
		return push.Result{}, ErrNotFound
	}
	return r, err
}

// Outcome returns what became of a push that left the queue: its final result, else its sent
// result, or ErrNotFound (a push this service never accepted). A worker records one of them
// before the queue lets go of a push. It reads as ReceiptFirst.
func (s *Store) Outcome(ctx context.Context, ucsID string) (push.Result, error) {
	return s.OutcomeOf(ctx, "", ucsID, ReceiptFirst)
}

// Order is the order in which OutcomeOf reads a push's two records of what became of it,
// <ucsId>/f and <ucsId>. Either answers the same.
type Order int

const (
	// ReceiptFirst reads <ucsId>/f first: a delivered push costs one read, a ucsId the store
	// has no record of (and a failed push, or one waiting for its receipt) two. For the
	// lookup of one push, most often of a delivered one.
	ReceiptFirst Order = iota
	// OutcomeFirst reads <ucsId> first: a ucsId the store has no record of (and a failed
	// push) costs one read, a sent or delivered push two. For a batch lookup, whose worst
	// case, a thousand ucsIds never given out, it halves.
	OutcomeFirst
)

// OutcomeOf is Outcome of client's push ucsID: another client's is ErrNotFound after the reads
// a ucsId the store has no record of costs, so that a caller cannot tell the two apart by the
// time they take. client "" stands for any client.
//
// <ucsId>/f, when there, is the push's final result: both of its writers (a receipt, a
// worker's failure after calls) insert it, and the store keeps the first; what <ucsId> holds
// then is the push's sent record, or a copy of that same result.
func (s *Store) OutcomeOf(ctx context.Context, client, ucsID string, order Order) (push.Result, error) {
	if order == OutcomeFirst {
		return s.outcomeFirst(ctx, client, ucsID)
	}
	f, err := s.getResult(ctx, ucsID+suffixReceipt)
	switch {
	case err == nil && (client == "" || f.ClientID == client):
		return f, nil
	case err != nil && !errors.Is(err, ErrNotFound):
		return push.Result{}, err
	}
	foreign := err == nil
	r, err := s.getResult(ctx, ucsID)
	if errors.Is(err, ErrNotFound) && s.legacy(ucsID) {
		r, err = s.getResult(ctx, ucsID+suffixLegacySent)
	}
	switch {
	case foreign && (err == nil || errors.Is(err, ErrNotFound)):
		return push.Result{}, ErrNotFound
	case err != nil:
		return push.Result{}, err
	case client != "" && r.ClientID != client:
		return push.Result{}, ErrNotFound
	}
	return r, nil
}

// outcomeFirst is OutcomeOf by OutcomeFirst: another client's push is ErrNotFound after the one
// read that tells, as an unknown ucsId is.
func (s *Store) outcomeFirst(ctx context.Context, client, ucsID string) (push.Result, error) {
	r, err := s.getResult(ctx, ucsID)
	switch {
	case errors.Is(err, ErrNotFound) && s.legacy(ucsID):
		if r, err = s.getResult(ctx, ucsID+suffixLegacySent); err != nil {
			return push.Result{}, err
		}
	case err != nil:
		return push.Result{}, err
	}
	if client != "" && r.ClientID != client {
		return push.Result{}, ErrNotFound
	}
	if r.State != push.StateSent {
		return r, nil
	}
	f, err := s.getResult(ctx, ucsID+suffixReceipt)
	if errors.Is(err, ErrNotFound) {
		return r, nil
	}
	return f, err
}

// Current returns the most advanced record of a push: final, else sent, else progress, or
// ErrNotFound when no worker has reached it. A receipt's final result counts even before the
// sent record (see above). At most three reads.
func (s *Store) Current(ctx context.Context, ucsID string) (push.Result, error) {
	r, err := s.Outcome(ctx, ucsID)
	switch {
	case errors.Is(err, ErrNotFound):
		return s.InProgress(ctx, ucsID)
	case err != nil || r.State != push.StateSent:
		return r, err
	}
	if p, err := s.InProgress(ctx, ucsID); err == nil && p.Attempts > r.Attempts {
		// A redelivery after the sent record was written but before its ack counted.
		r.Attempts = p.Attempts
	}
	return r, nil
}

func (s *Store) getResult(ctx context.Context, id string) (push.Result, error) {
	var d resultDoc
	if err := s.getByID(ctx, colResults, id, &d); err != nil {
		return push.Result{}, err
	}
	return d.Result, nil
}

// ReceiptResult returns the final result a delivery receipt gave the push (<ucsId>/f), or
// ErrNotFound. It costs one read.
func (s *Store) ReceiptResult(ctx context.Context, ucsID string) (push.Result, error) {
	return s.getResult(ctx, ucsID+suffixReceipt)
}

// InProgress returns the progress of a push (an attempt under way, or a retry waiting): the
// entry of its progress record with the greatest key, with that key in Rev, or, before any,
// the first attempt's record; or ErrNotFound. It costs one read.
func (s *Store) InProgress(ctx context.Context, ucsID string) (push.Result, error) {
	var d progressDoc
	if err := s.getByID(ctx, colResults, ucsID+suffixProgress, &d); err != nil {
		return push.Result{}, err
	}
	if len(d.Log) == 0 {
		return d.Result, nil
	}
	latest := slices.Max(slices.Collect(maps.Keys(d.Log)))
	r := d.Log[latest]
	r.Rev = latest
	return r, nil
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
// "failed: system failed") failed with the status as reason. It finished at at, by the clock of
// the front end that took the report, but not before it was sent, by the worker's clock, which
// may run up to 15 s ahead.
func Receipt(sent push.Result, status string, at time.Time) push.Result {
	r := sent
	if at.Before(sent.Sent) {
		at = sent.Sent
	}
	r.Finished, r.Updated = at, at
	if status == "success" {
		r.State = push.StateDelivered
		return r
	}
	r.State, r.Reason = push.StateFailed, status
	return r
}

// write stores a batch of records: inserts in one unordered InsertMany per collection,
// push_msgids first, then replacements and progress entries in one ordered BulkWrite. A record
// inserted again (the same push's record written after a redelivery) is kept as first written;
// existed[i] reports that of ws[i]. A push's sent record is written only once its msgid's is:
// a worker that finds the sent record (a redelivered copy) leaves nothing of the push unwritten
// behind it.
func (s *Store) write(ctx context.Context, ws []Write) (existed []bool, err error) {
	inserts := map[string][]any{}
	// at maps each collection's inserts back to their place in ws.
	at := map[string][]int{}
	replaces := map[string][]mongo.WriteModel{}
	existed = make([]bool, len(ws))
	for i, w := range ws {
		switch final, err := s.legacyFinal(ctx, w); {
		case err != nil:
			return nil, err
		case final:
			existed[i] = true
			continue
		}
		switch {
		case w.update != nil:
			replaces[w.col] = append(replaces[w.col],
				mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: w.id}}).SetUpdate(w.update).SetUpsert(true))
		case w.replace:
			replaces[w.col] = append(replaces[w.col],
				mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: w.id}}).SetReplacement(w.doc).SetUpsert(true))
		default:
			inserts[w.col] = append(inserts[w.col], w.doc)
			at[w.col] = append(at[w.col], i)
		}
	}
	cols := slices.Sorted(maps.Keys(inserts))
	if i := slices.Index(cols, colMsgIDs); i > 0 {
		cols = slices.Insert(slices.Delete(cols, i, i+1), 0, colMsgIDs)
	}
	for _, col := range cols {
		docs := inserts[col]
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
		// An upsert racing an insert of the same record (another copy's first attempt's
		// record) can fail on the duplicate key; the record exists then, and the
		// replacement is made again, as MongoDB advises for upserts.
		var err error
		for range 3 {
			if err = bulkWrite(ctx, s.col(col), models, ordered); err == nil || !onlyDuplicates(err) {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("replace in %s: %w", col, err)
		}
	}
	return existed, nil
}

// legacyFinal reports whether w is a receipt's final result (at <ucsId>/f) of a push that has
// one at <ucsId> in the earlier layout (see legacy), which kept every final result there: w is
// then a second final result (a receipt the platform repeated), which the store does not take,
// as it would not take one beside a final result of this layout. Outside the upgrade's window
// it reads nothing.
func (s *Store) legacyFinal(ctx context.Context, w Write) (bool, error) {
	if w.receiptOf == "" || !s.legacy(w.receiptOf) {
		return false, nil
	}
	r, err := s.getResult(ctx, w.receiptOf)
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read an earlier layout's result: %w", err)
	}
	return r.State.Final(), nil
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

// colMeta holds facts about the store itself: the layout of push_results.
const colMeta = "store_meta"

// layoutID is the _id in colMeta of the record of when push_results took its present layout.
const layoutID = "push_results.layout"

// layoutDoc records when push_results took its present layout. Pushes accepted before
// LegacyBefore may have their sent record at <ucsId>/s, where an earlier version wrote it,
// and their receipt's final result at <ucsId>; LegacyBefore is zero for a store that held no
// results and no bindings when the layout came (a new one: no worker can have sent from it).
type layoutDoc struct {
	ID           string    `bson:"_id"`
	LegacyBefore time.Time `bson:"legacyBefore"`
}

// readLayout reads when push_results took its present layout, recording it first if no one
// has: at the first start of a version with this layout, results written before it follow the
// earlier one. Every process of the service records or reads the same time. A tool records
// nothing, and takes every result written so far for one of the earlier layout.
func (s *Store) readLayout(ctx context.Context, tool bool) (time.Time, error) {
	var d layoutDoc
	err := s.getByID(ctx, colMeta, layoutID, &d)
	if !errors.Is(err, ErrNotFound) {
		return d.LegacyBefore, err
	}
	d = layoutDoc{ID: layoutID}
	// A store that holds results, or bindings (workers of an earlier version may be sending to
	// them during the upgrade, even with no result kept), is an earlier version's. An
	// unfiltered FindOne reads one row on the embedded server, however large the table.
	for _, c := range []string{colResults, colBindings} {
		err := s.col(c).FindOne(ctx, bson.D{}).Err()
		if err == nil {
			d.LegacyBefore = s.now()
			break
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return time.Time{}, fmt.Errorf("read %s: %w", c, err)
		}
	}
	if tool {
		return d.LegacyBefore, nil
	}
	if _, err := s.col(colMeta).InsertOne(ctx, d); err != nil {
		if !mongo.IsDuplicateKeyError(err) {
			return time.Time{}, fmt.Errorf("record the layout of %s: %w", colResults, err)
		}
		// Another process recorded it first: its time holds.
		return s.readLayout(ctx, tool)
	}
	return d.LegacyBefore, nil
}

// upgradeWindow is how long after the first start of this layout workers of an earlier
// version may still be sending, and writing sent records where they did (deployments/README.md:
// the front ends are upgraded first, then the workers, within a day).
const upgradeWindow = 24 * time.Hour

// legacy reports whether ucsID may have a sent record where an earlier version wrote it: it
// was accepted before push_results took its present layout or during the upgrade that
// followed, and recently enough that the record may not have expired yet (an earlier version's
// worker wrote a sent record at most the queue's age limit after the push was accepted, and it
// is kept for the retention period, which is at least that limit; twice the retention bounds
// both). A ucsId that is not a ULID is not
// legacy.
func (s *Store) legacy(ucsID string) bool {
	if s.legacyBefore.IsZero() {
		return false
	}
	until := s.legacyBefore.Add(upgradeWindow)
	if !s.now().Before(until.Add(2 * s.retention)) {
		return false
	}
	id, err := ulid.ParseStrict(ucsID)
	return err == nil && ulid.Time(id.Time()).Before(until)
}
