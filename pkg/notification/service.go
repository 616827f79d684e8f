package notification

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/sending"
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
}

// Store reads what workers recorded; *store.Store implements it. Both return
// store.ErrNotFound for a push without such a record.
type Store interface {
	Outcome(ctx context.Context, ucsID string) (push.Result, error)
	InProgress(ctx context.Context, ucsID string) (push.Result, error)
}

// Records keeps the records of Idempotency-Keys for every front end; *natskv.Records
// implements it. Create fails with natskv.ErrRecordExists when the key has a record, Get with
// natskv.ErrNoRecord when it has none.
type Records interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Create(ctx context.Context, key string, value []byte) error
	Put(ctx context.Context, key string, value []byte) error
}

// Finals are the final results kept in memory, by ucsId. Add keeps the first final result of
// a push and ignores later ones.
type Finals interface {
	Get(ucsID string) (push.Result, bool)
	Add(ucsID string, r push.Result)
}

// Config wires a Service. Publisher, Waiting, Store and Finals are required.
type Config struct {
	Publisher Publisher
	Waiting   Waiting
	Store     Store
	// Records keeps Idempotency-Key records; nil refuses keys (ErrKeysUnsupported).
	Records Records
	// Finals are the final results in memory, which the front end also fills from the
	// announcements of other front ends and workers.
	Finals Finals
	// Paused, when set, reports a pause of sending, which results of queued pushes name.
	Paused func() (sending.PauseState, bool)
	// StoreWait bounds how long a lookup of a push still in the queue waits for the store's
	// progress record before it answers from the queue alone. Default 300ms.
	StoreWait time.Duration
	// Accepted, when set, is told of every n pushes the queue took for a request (metrics).
	Accepted func(n int)
	// Replayed, when set, is told of every request answered from its key's record (metrics).
	Replayed func()
	// Rejected, when set, is told of each item of a new batch refused for its content
	// (metrics); not again when a retry is answered from the batch's key record. A single
	// push refused for its content never reaches the service.
	Rejected func(error)
	// Now is the clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Service accepts pushes and answers their results.
type Service struct {
	cfg Config
}

// New returns the service of cfg, with its defaults filled in.
func New(cfg Config) (*Service, error) {
	if cfg.Publisher == nil || cfg.Waiting == nil || cfg.Store == nil || cfg.Finals == nil {
		return nil, errors.New("notification: publisher, waiting, store and finals are required")
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
		cfg.Rejected = func(error) {}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg}, nil
}

// The errors of the service; compare with errors.Is. Each wraps its cause, when it has one.
var (
	// ErrQueueFull: the queue refused a push because the stream is at its limits.
	ErrQueueFull = errors.New("the push queue is full")
	// ErrQueueUnavailable: the queue (or the bucket of Idempotency-Key records) did not answer.
	ErrQueueUnavailable = errors.New("the push queue is unavailable")
	// ErrKeyReused: the Idempotency-Key was used before with another body.
	ErrKeyReused = errors.New("Idempotency-Key already used with a different body")
	// ErrKeyInUse: the first request with the Idempotency-Key is still under way.
	ErrKeyInUse = errors.New("a request with this Idempotency-Key is still under way")
	// ErrKeysUnsupported: the service has no Records, so it takes no Idempotency-Key.
	ErrKeysUnsupported = errors.New("Idempotency-Keys are not supported")
	// ErrNotFound: no push of the caller has this ucsId.
	ErrNotFound = errors.New("no such push")
	// ErrResultsUnavailable: the queue or the store could not say what became of a push.
	ErrResultsUnavailable = errors.New("results are unavailable")
)

// publishError is the error of a push the queue did not take.
func publishError(err error) error {
	if errors.Is(err, queue.ErrFull) {
		return fmt.Errorf("%w: %w", ErrQueueFull, err)
	}
	return fmt.Errorf("%w: %w", ErrQueueUnavailable, err)
}
