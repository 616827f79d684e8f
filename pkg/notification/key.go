package notification

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/campus-it/ucs/pkg/natskv"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
)

// KeyTTL is how long an Idempotency-Key is remembered: the stream's dedupe window, so that a
// push published again under its key within it is stored once.
const KeyTTL = queue.DedupeWindow

// KeyStale is how long a request may hold a key unfinished before a retry with the key takes
// over: the request's front end died or gave up between taking the key and recording the
// queue's answers. It is well inside the stream's dedupe window, so a take-over publishes
// nothing twice.
const KeyStale = 30 * time.Second

// Key is a request's Idempotency-Key, as the caller gave it (its syntax checked), with the
// body it came with. The zero Key is a request without one.
type Key struct {
	Name string
	Body []byte
}

// keyRecord is what a key remembers: the body it came with, the ucsId given to each item (""
// for an item refused for its content), and which items the queue did not take.
type keyRecord struct {
	Hash    string   `json:"h"`
	IDs     []string `json:"ids"`
	Pending int64    `json:"pending,omitempty"` // unix ms the request took the key; 0 once finished
	Failed  []int    `json:"failed,omitempty"`  // items without a PubAck, to publish on a retry
	Batch   bool     `json:"batch,omitempty"`   // taken by a batch, not a single push
}

// keyed is a request carrying an Idempotency-Key.
type keyed struct {
	s      *Service
	client string
	key    string // the record's key: the client and its key, hashed
	hash   string
	replay *keyRecord // the key's record, when it has one to answer from
	batch  bool       // the request is a batch
	owner  bool       // this request took the key: it publishes, later ones answer from it
	rev    uint64     // the revision of the record this request wrote when it took the key
	took   time.Time  // when it took the key
	// tookOver: this request took over a key whose request left its record pending; it
	// finishes the record whatever becomes of its publish.
	tookOver bool
	// shared is the room of the client's share its claim took (Config.KeyShares), given back
	// when no record of it is kept.
	shared int
}

// giveShare gives back the room the claim took from the client's share.
func (r *keyed) giveShare(ctx context.Context) {
	if r.shared == 0 {
		return
	}
	if err := r.s.cfg.KeyShares.Give(context.WithoutCancel(ctx), r.client, r.shared); err != nil {
		r.s.cfg.Logger.Warn("giving back a share of the Idempotency-Key records failed", "err", err)
	}
	r.shared = 0
}

var errKeyRace = errors.New("another request took the key first")

// errRefusedHere is why republish published nothing: this front end's rules refuse an item the
// first request's were to publish.
var errRefusedHere = errors.New("an item to publish again is refused by the rules here")

// keyOf reads client's key k: nil without one; with a record to answer from in replay.
func (s *Service) keyOf(ctx context.Context, client string, k Key) (*keyed, error) {
	if k.Name == "" {
		return nil, nil
	}
	if s.cfg.Records == nil {
		return nil, ErrKeysUnsupported
	}
	r := s.newKeyed(client, k)
	if err := r.load(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (s *Service) newKeyed(client string, k Key) *keyed {
	sum := sha256.Sum256([]byte(client + "\x00" + k.Name))
	bh := sha256.Sum256(k.Body)
	return &keyed{s: s, client: client, key: hex.EncodeToString(sum[:]), hash: hex.EncodeToString(bh[:])}
}

// StoredPush returns the ucsId under which an earlier single push with client's key k and the
// same body stored its push (a batch's key answers nothing here), for a retry that this front end's rules refuse (another
// version's, during a rolling update): the key answers what the first request stored. ok is
// false when the key has no record of a push the queue took, or it cannot be read; the
// record is only read.
func (s *Service) StoredPush(ctx context.Context, client string, k Key) (ucsID string, ok bool) {
	if k.Name == "" || s.cfg.Records == nil {
		return "", false
	}
	r := s.newKeyed(client, k)
	raw, _, err := s.cfg.Records.Get(ctx, r.key)
	if err != nil {
		return "", false
	}
	var rec keyRecord
	if json.Unmarshal(raw, &rec) != nil || rec.Hash != r.hash || rec.Pending != 0 || rec.Batch ||
		len(rec.IDs) != 1 || rec.IDs[0] == "" || slices.Contains(rec.Failed, 0) {
		return "", false
	}
	s.cfg.Replayed()
	return rec.IDs[0], true
}

// load reads the key's record: replay is set when there is one to answer from.
func (r *keyed) load(ctx context.Context) error {
	s := r.s
	raw, rev, err := s.cfg.Records.Get(ctx, r.key)
	if errors.Is(err, natskv.ErrNoRecord) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: Idempotency-Key records: %w", ErrQueueUnavailable, err)
	}
	var rec keyRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return fmt.Errorf("an Idempotency-Key record: %w", err)
	}
	if rec.Hash != r.hash {
		return ErrKeyReused
	}
	if rec.Pending != 0 && s.cfg.Now().Sub(time.UnixMilli(rec.Pending)) < KeyStale {
		return ErrKeyInUse
	}
	if rec.Pending != 0 {
		// Its request never recorded the queue's answers: this one takes the key over, and
		// publishes every item again; the stream keeps the ones it has (their ucsIds are
		// their message ids).
		rec.Failed = published(rec.IDs)
		if err := r.takeOver(ctx, rec, rev); err != nil {
			return err
		}
	}
	r.replay = &rec
	s.cfg.Replayed()
	return nil
}

// takeOver takes over the key of a request that left its record pending, before publishing
// anything: the record is written again, pending from now, over the revision read, so that
// the request that wrote it, should it still be running, forgets nothing (its Forget is bounded
// by its own revision), and two retries cannot both take it over (ErrKeyInUse for the second).
func (r *keyed) takeOver(ctx context.Context, rec keyRecord, rev uint64) error {
	now := r.s.cfg.Now()
	rec.Pending = now.UnixMilli()
	b, _ := json.Marshal(rec)
	_, err := r.s.cfg.Records.Update(ctx, r.key, b, rev)
	switch {
	case errors.Is(err, natskv.ErrRecordExists):
		return ErrKeyInUse
	case err != nil:
		return fmt.Errorf("%w: Idempotency-Key records: %w", ErrQueueUnavailable, err)
	}
	r.tookOver = true
	return nil
}

// claim records that this request takes the key with the ucsIds it gave each item;
// errKeyRace if another request took it first. The record is written at the largest size it
// can take, every item listed as failed (a pending record is read so anyway), so that the
// answer written over it (finish) never needs more room than the claim took: a bucket with
// room for the claim has room for the answer.
func (r *keyed) claim(ctx context.Context, ids []string) error {
	now := r.s.cfg.Now()
	b, _ := json.Marshal(keyRecord{Hash: r.hash, IDs: ids, Pending: now.UnixMilli(), Failed: published(ids), Batch: r.batch})
	if shares := r.s.cfg.KeyShares; shares != nil {
		// The record's room in the bucket: its key and value, and the stored message's subject
		// and framing.
		size := len(b) + len(r.key) + recordFraming
		switch ok, wait, err := shares.Take(ctx, r.client, size); {
		case err != nil:
			return fmt.Errorf("%w: Idempotency-Key shares: %w", ErrQueueUnavailable, err)
		case !ok:
			return &KeyShareUsedError{Wait: wait}
		}
		r.shared = size
	}
	rev, err := r.s.cfg.Records.Create(ctx, r.key, b)
	if err != nil {
		r.giveShare(ctx) // no record of this request's
	}
	switch {
	case errors.Is(err, natskv.ErrRecordExists):
		return errKeyRace
	case errors.Is(err, natskv.ErrFull):
		return fmt.Errorf("%w: %w", ErrKeysFull, err)
	case err != nil:
		return fmt.Errorf("%w: Idempotency-Key records: %w", ErrQueueUnavailable, err)
	}
	r.replay = &keyRecord{Hash: r.hash, IDs: ids, Batch: r.batch}
	r.owner, r.rev, r.took = true, rev, now // took: as the record says, for every front end
	return nil
}

// recordFraming is what a record takes in the bucket beside its key and value: the subject's
// prefix ($KV.<bucket>.) and the stored message's header and checksum, rounded up.
const recordFraming = 64

// KeyShareUsedError is the error of a request whose client has used up its share of the
// Idempotency-Key records (Config.KeyShare): its new key takes no record, and nothing is
// accepted. The share comes back at a steady rate: by Wait, there is room for this request.
type KeyShareUsedError struct{ Wait time.Duration }

func (e *KeyShareUsedError) Error() string {
	return "this client's share of the Idempotency-Key records is used up for " + e.Wait.Round(time.Second).String()
}

// published lists the items a request publishes: those given a ucsId.
func published(ids []string) []int {
	var out []int
	for i, id := range ids {
		if id != "" {
			out = append(out, i)
		}
	}
	return out
}

// claimOrLoad claims the key, or, when another request took it first, reads its record to
// answer as that request does.
func (r *keyed) claimOrLoad(ctx context.Context, ids []string) error {
	err := r.claim(ctx, ids)
	if !errors.Is(err, errKeyRace) {
		return err
	}
	if err := r.load(ctx); err != nil {
		return err
	}
	if r.replay == nil {
		// The record expired between the two reads: nothing to answer from; a retry
		// takes the key afresh.
		return fmt.Errorf("%w: an Idempotency-Key record vanished", ErrQueueUnavailable)
	}
	return nil
}

// finish records the queue's answers: failed are the items that got no PubAck. A record that
// cannot be written stays pending, and a retry after KeyStale publishes every item again,
// which the stream's dedupe makes harmless.
func (r *keyed) finish(ctx context.Context, failed []int) {
	rec := *r.replay
	rec.Pending, rec.Failed = 0, failed
	b, _ := json.Marshal(rec)
	if err := r.s.cfg.Records.Put(context.WithoutCancel(ctx), r.key, b); err != nil {
		r.s.cfg.Logger.Warn("recording an Idempotency-Key's answer failed", "err", err)
	}
}

// refused records that the queue did not take the request's failed items (err): a record to
// publish them again from, or, when the queue was full, none (forget). A request whose key a
// retry may have taken over by now (its claim gone stale, by another front end's clock too)
// keeps the record.
func (r *keyed) refused(ctx context.Context, err error, failed []int) {
	if errors.Is(err, queue.ErrFull) && r.s.cfg.Now().Sub(r.took) < KeyStale/2 {
		r.forget(ctx, failed)
		return
	}
	r.finish(ctx, failed)
}

// forget removes the key's record after the queue refused the request's pushes because it is
// full: that refusal is certain, so nothing was stored and no ucsId was answered, and the key
// is free again. Requests a full queue refused then take no room among the records, where one
// client's could otherwise keep every client from new keys for a day. Only the record this
// request wrote goes: a retry that took the key over meanwhile (its claim gone stale) keeps the
// record it wrote. A record that cannot be removed is finished instead, every item to publish
// again.
func (r *keyed) forget(ctx context.Context, failed []int) {
	if err := r.s.cfg.Records.Forget(context.WithoutCancel(ctx), r.key, r.rev); err != nil {
		r.s.cfg.Logger.Warn("deleting the record of an Idempotency-Key the full queue refused failed", "err", err)
		r.finish(ctx, failed)
		return
	}
	r.giveShare(ctx)
}

// finishTakeOver records, for a request that took the key over, that the items failed are
// still to publish: its record is no longer pending, and the next retry publishes them.
func (r *keyed) finishTakeOver(ctx context.Context, failed []int) {
	if r.tookOver {
		r.finish(ctx, failed)
	}
}

// publishOptions are the queue's options for this request's pushes: the record's key as the
// message id, so that the queue stores them once however often the request is retried within
// the key's lifetime (KeyTTL is queue.DedupeWindow).
func (r *keyed) publishOptions() queue.PublishOptions {
	return queue.PublishOptions{MsgID: r.key}
}

// republish publishes again, under their recorded ucsIds, the messages of the items the record
// says the queue did not take, and returns the indexes still not taken. msgs holds the message
// of every item the body's rules accept, by index. Items the service knows (Result finds the
// first) were taken after all, their answer lost; the others go as one atomic batch, as the
// first time, under the same message id: if the first request's batch was stored meanwhile,
// the queue says so and stores nothing again. They go all or none: when this front end's rules
// refuse one of them (another version's, during a rolling update), none is published and the
// record is left as it is, since a part published under the message id would make the queue
// take the rest for a duplicate later. err says why the others were not taken.
func (r *keyed) republish(ctx context.Context, client string, msgs map[int]push.Message) (still []int, err error) {
	rec := r.replay
	var failed []int
	for _, i := range rec.Failed {
		if i < len(rec.IDs) && rec.IDs[i] != "" {
			failed = append(failed, i)
		}
	}
	if len(failed) == 0 {
		return nil, nil
	}
	var again []push.Message
	for _, i := range failed {
		if m, ok := msgs[i]; ok {
			m.UcsID = rec.IDs[i]
			again = append(again, m)
		}
	}
	at := failed
	// The stream's dedupe forgets a message id whose message is gone once its server restarts
	// (it rebuilds its memory from the messages it holds): a push stored and delivered since
	// would be stored again. The queue took the items together or not at all, so if the first
	// one is known, waiting or recorded, all were taken.
	switch _, err := r.s.Result(ctx, client, rec.IDs[at[0]]); {
	case err == nil:
		r.finish(ctx, nil)
		return nil, nil
	case !errors.Is(err, ErrNotFound):
		r.s.cfg.Logger.Warn("looking up a retried request's pushes failed", "err", err)
		r.finishTakeOver(ctx, at)
		return at, fmt.Errorf("%w: %w", ErrKeyUnchecked, err)
	}
	if len(again) < len(at) {
		r.finishTakeOver(ctx, at)
		return at, errRefusedHere
	}
	if err := r.s.cfg.Publisher.PublishBatch(ctx, again, r.publishOptions()); err != nil {
		r.s.cfg.Logger.Warn("publishing a retried request's pushes failed", "pushes", len(again), "err", err)
		// Written again whoever holds the key: the publish may have been stored, its answer
		// lost, and the stream then remembers the message id for KeyTTL from now. The record
		// must live as long, or a request under the key after it ended would be answered a
		// ucsId the stream drops as a duplicate.
		r.finish(ctx, at)
		return at, err
	}
	r.s.cfg.Accepted(len(again))
	r.finish(ctx, nil)
	return nil, nil
}
