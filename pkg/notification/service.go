package notification

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/sending"
	"github.com/campus-it/ucs/pkg/store"
)

// Publisher puts accepted pushes on the queue; *queue.Publisher implements it.
type Publisher interface {
	// Publish stores m and returns once the queue acknowledged it.
	Publish(ctx context.Context, m push.Message, o queue.PublishOptions) error
	// PublishBatch stores ms atomically: all of them, or (with an error) none.
	PublishBatch(ctx context.Context, ms []push.Message, o queue.PublishOptions) error
}

// Waiting reads pushes still in the queue, by the client that sent them; *queue.Waiting
// implements it. Get returns queue.ErrNotWaiting for a push that is not there.
type Waiting interface {
	Get(ctx context.Context, client, ucsID string) (queue.Waited, error)
	// GetMany returns those of ids that wait, by ucsId, in one read of the queue.
	GetMany(ctx context.Context, client string, ids []string) (map[string]queue.Waited, error)
	// FromLeader is Get as the queue's leader answers it, for a push found nowhere: a replica
	// answering Get may lag behind a push acknowledged a moment ago.
	FromLeader(ctx context.Context, client, ucsID string) (queue.Waited, error)
}

// Store reads what workers recorded and records follows; *store.Store implements it. The reads
// return store.ErrNotFound for a push (or msgid) without such a record.
type Store interface {
	OutcomeOf(ctx context.Context, client, ucsID string, order store.Order) (push.Result, error)
	Current(ctx context.Context, ucsID string) (push.Result, error)
	SentByMsgID(ctx context.Context, msgID int64) (push.Result, string, error)
	SetFollowing(ctx context.Context, openID string, following bool, at time.Time) error
}

// Events records delivery results; *store.Writer implements it.
type Events interface {
	Write(ctx context.Context, ws ...store.Write) error
}

// Records keeps the records of Idempotency-Keys for every front end; *natskv.Records
// implements it. Create fails with natskv.ErrRecordExists when the key has a record, Get with
// natskv.ErrNoRecord when it has none.
type Records interface {
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	Create(ctx context.Context, key string, value []byte) (uint64, error)
	Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error)
	Put(ctx context.Context, key string, value []byte) error
	Forget(ctx context.Context, key string, rev uint64) error
}

// KeyShares are the clients' shares of the Idempotency-Key records, in bytes.
type KeyShares interface {
	// Take takes the room a new key's record needs from client's share; without room it says
	// how long until there is (a *KeyShareUsedError for the request).
	Take(ctx context.Context, client string, bytes int) (ok bool, wait time.Duration, err error)
	// Give puts back room taken for a record that was not kept.
	Give(ctx context.Context, client string, bytes int) error
}

// DefaultReceiptWait is Config.ReceiptWait's default: the platform's duplicate window and a
// minute, so that a receipt waits for every attempt that may still learn its msgid.
const DefaultReceiptWait = platform.DuplicateWindow + time.Minute

// Config wires a Service. Publisher, Waiting and Store are required; Events and KeepEvent for
// the platform's events.
type Config struct {
	Publisher Publisher
	Waiting   Waiting
	Store     Store
	// Events writes the final results of delivery receipts (ApplyEvents).
	Events Events
	// KeepEvent stores a platform event in the stream of platform events under key, once for
	// each id but "" (the event's identity), for ApplyEvents to apply (KeepEvent).
	KeepEvent func(ctx context.Context, key, id string, event []byte) error
	// Records keeps Idempotency-Key records; nil refuses keys (ErrKeysUnsupported).
	Records Records
	// KeyShares, when set, bounds each client's share of the Idempotency-Key records, so that
	// no client can fill them for the others.
	KeyShares KeyShares
	// ResultCache bounds the final results kept in memory. Default 100,000 (about 25 MB).
	ResultCache int
	// SentCache bounds the sent messages kept in memory by msgid (RememberSent) for their
	// delivery receipts, which the platform sends within seconds. Default 100,000: receipts
	// come in the order of their sends, so a backlog of receipts larger than the cache would
	// miss it on every receipt. About 370 bytes an entry, held only until its receipt comes.
	SentCache int
	// ReceiptWait bounds how long a delivery receipt whose msgid no message has waits for it
	// (held in the stream of platform events, answered already): its sent record may be
	// written late, or the platform took an attempt whose answer the worker never got and
	// gives the worker's next attempt the same msgid, which it does only within its duplicate
	// window of the first call (platform.DuplicateWindow): past that a retry is a new message
	// with a msgid of its own. Then it is dropped as a receipt for a message this service did
	// not send. Default DefaultReceiptWait, 11 minutes.
	ReceiptWait time.Duration
	// Announce, when set, tells every front end of a final result this one recorded (a
	// delivery receipt), so that each serves the first lookup of it from memory (Remember).
	Announce func(push.Result)
	// Paused, when set, reports a pause of sending, which results of queued pushes name.
	Paused func() (sending.PauseState, bool)
	// Location is the service's time zone (config time_zone), in which a push held by a pause
	// names the pause's end; nil: the process's.
	Location *time.Location
	// StoreWait bounds how long a lookup of a push still in the queue waits for the store's
	// progress record before it answers from the queue alone. Default 300ms.
	StoreWait time.Duration
	// Accepted, when set, is told of every n pushes the queue took for a request (metrics).
	Accepted func(n int)
	// Replayed, when set, is told of every request answered from its key's record (metrics).
	Replayed func()
	// Final and Sent, when set, are told once of each final result and each sent message kept
	// in memory (the operations page).
	Final, Sent func(push.Result)
	// ReceiptUnknown, when set, is told of each receipt dropped for a msgid no message has.
	ReceiptUnknown func()
	// Rejected, when set, is told of each item of a new batch refused for its content, by the
	// kind of the first rule it broke (push.ValidationError.Kind), for the metrics; not again
	// when a retry is answered from the batch's key record. A single push refused for its
	// content never reaches the service.
	Rejected func(kind string)
	// Now is the clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Service accepts pushes, answers their results and applies the platform's events.
type Service struct {
	cfg Config
	// results are final results by ucsId; sent, messages the platform accepted, by msgid,
	// until their receipt.
	results *resultCache
	sent    *sentCache
	// receiptsWaiting is how many delivery receipts wait for their msgid (ApplyEvents).
	receiptsWaiting atomic.Int64
}

// New returns the service of cfg, with its defaults filled in.
func New(cfg Config) (*Service, error) {
	if cfg.Publisher == nil || cfg.Waiting == nil || cfg.Store == nil {
		return nil, errors.New("notification: publisher, waiting and store are required")
	}
	if cfg.StoreWait <= 0 {
		cfg.StoreWait = 300 * time.Millisecond
	}
	if cfg.Accepted == nil {
		cfg.Accepted = func(int) {}
	}
	if cfg.Replayed == nil {
		cfg.Replayed = func() {}
	}
	if cfg.Rejected == nil {
		cfg.Rejected = func(string) {}
	}
	for _, f := range []*func(push.Result){&cfg.Announce, &cfg.Final, &cfg.Sent} {
		if *f == nil {
			*f = func(push.Result) {}
		}
	}
	if cfg.ReceiptUnknown == nil {
		cfg.ReceiptUnknown = func() {}
	}
	if cfg.KeepEvent == nil {
		cfg.KeepEvent = func(context.Context, string, string, []byte) error {
			return errors.New("notification: no stream keeps platform events")
		}
	}
	if cfg.ResultCache <= 0 {
		cfg.ResultCache = 100_000
	}
	if cfg.SentCache <= 0 {
		cfg.SentCache = 100_000
	}
	if cfg.ReceiptWait <= 0 {
		cfg.ReceiptWait = DefaultReceiptWait
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	results, err := newResultCache(cfg.ResultCache)
	if err != nil {
		return nil, err
	}
	sent, err := newSentCache(cfg.SentCache)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, results: results, sent: sent}, nil
}

// Remember keeps a final result in memory, for lookups, as it came about: this front end
// applied it, or another front end or a worker recorded and announced it. Anything but a
// final result is ignored, and so is a later result of a push whose final result is kept: the
// first one wins.
func (s *Service) Remember(r push.Result) { s.remember(r, true) }

// remember is Remember, announced false for a result a lookup read from the store: kept for
// later lookups, but not told to Final (the operations page counts what happened since this
// front end started, and a result read may be older).
func (s *Service) remember(r push.Result, announced bool) {
	if !r.State.Final() {
		return
	}
	// The memory tells a repeated announcement (a receipt the platform pushed again) from a
	// new result in the same step that keeps it, so that Final hears of each push once.
	if kept, count := s.results.Add(r.UcsID, r, announced); count {
		s.cfg.Final(kept)
	}
}

// Remembered returns the final result of ucsID kept in memory, whoever sent the push.
func (s *Service) Remembered(ucsID string) (push.Result, bool) { return s.results.Get(ucsID) }

// RememberSent keeps a message the platform accepted (a worker recorded it as sent) until its
// delivery receipt comes, so that the receipt costs no store read.
func (s *Service) RememberSent(r push.Result, openID string) {
	if r.State == push.StateSent && r.MsgID != 0 && openID != "" {
		if !s.sent.Seen(r.MsgID) {
			s.cfg.Sent(r)
		}
		s.sent.Add(r, openID)
	}
}

// The errors of the service; compare with errors.Is. Each wraps its cause, when it has one.
var (
	// ErrQueueFull: the queue refused a push because the stream is at its limits.
	ErrQueueFull = errors.New("the push queue is full")
	// ErrQueueUnavailable: the queue (or the bucket of Idempotency-Key records) did not answer.
	ErrQueueUnavailable = errors.New("the push queue is unavailable")
	// ErrUnconfirmed (with ErrQueueUnavailable): the queue did not confirm storing a push, nor
	// could it be asked whether it did: the push may be stored, and then will be delivered.
	ErrUnconfirmed = errors.New("the push queue did not confirm storing the push")
	// ErrKeyReused: the Idempotency-Key was used before with another body.
	ErrKeyReused = errors.New("Idempotency-Key already used with a different body")
	// ErrKeyInUse: the first request with the Idempotency-Key is still under way.
	ErrKeyInUse = errors.New("a request with this Idempotency-Key is still under way")
	// ErrKeysFull: the bucket of Idempotency-Key records is at its bound, and takes no new key
	// until the oldest records expire.
	ErrKeysFull = errors.New("the Idempotency-Key records are full")
	// ErrKeysUnsupported: the service has no Records, so it takes no Idempotency-Key.
	ErrKeysUnsupported = errors.New("Idempotency-Keys are not supported")
	// ErrNotFound: no push of the caller has this ucsId.
	ErrNotFound = errors.New("no such push")
	// ErrResultsUnavailable: the queue or the store could not say what became of a push.
	ErrResultsUnavailable = errors.New("results are unavailable")
	// ErrKeyUnchecked: a retry under an Idempotency-Key of a request the queue did not take
	// cannot tell now whether that request's pushes went through after all (the queue holds
	// none of them, and the store cannot answer): nothing is published, lest a push delivered
	// since be sent again. The retry may be sent again later, under the same key.
	ErrKeyUnchecked = errors.New("whether the earlier request under this Idempotency-Key went through cannot be checked now: the store is unavailable")
)

// publishError is the error of a push the queue did not take.
func publishError(err error) error {
	if errors.Is(err, ErrKeyUnchecked) {
		return err
	}
	if errors.Is(err, queue.ErrFull) {
		return fmt.Errorf("%w: %w", ErrQueueFull, err)
	}
	if errors.Is(err, queue.ErrUnconfirmed) {
		return fmt.Errorf("%w: %w: %w", ErrQueueUnavailable, ErrUnconfirmed, err)
	}
	return fmt.Errorf("%w: %w", ErrQueueUnavailable, err)
}
