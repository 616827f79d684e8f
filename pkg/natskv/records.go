package natskv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Records is a NATS key-value bucket of small records that every front end reads and writes
// directly (no copy in memory): Idempotency-Key records, and the nonces of the platform's
// callbacks. Create is atomic across replicas.
type Records struct {
	b      *bucket
	stream jetstream.Stream // the bucket's stream, for Forget
}

// ErrNoRecord is returned by Records.Get for a key without a record, ErrRecordExists by
// Records.Create for a key that has one (and by Update for a record changed since), ErrFull by
// Create and Put when the bucket has no room for the record: nothing is written until records
// expire. A record written over one of the
// same key takes the room of the one it replaces.
var (
	ErrNoRecord     = errors.New("no record")
	ErrRecordExists = errors.New("record exists")
	ErrFull         = errors.New("the bucket is full")
)

// OpenRecords creates or opens the bucket; records expire ttl after their last write. With
// maxBytes above 0, the bucket holds at most that many bytes, and refuses new records beyond
// (ErrFull) rather than forget old ones. Should NATS lose the bucket, the next call makes it
// again, empty.
func OpenRecords(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration, replicas int, maxBytes int64) (*Records, error) {
	b, err := openBucket(ctx, js, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl, Replicas: replicas, MaxBytes: maxBytes})
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: %w", bucket, err)
	}
	return &Records{b: b, stream: st}, nil
}

// Get returns key's record and its revision.
func (r *Records) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := do(ctx, r.b, func() (jetstream.KeyValueEntry, error) { return r.b.kv.Get(ctx, key) })
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, ErrNoRecord
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", key, err)
	}
	return e.Value(), e.Revision(), nil
}

// Update writes key's record over the one of revision rev, and returns the new revision;
// ErrRecordExists when the record is no longer that one (written over or removed since).
func (r *Records) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	rev, err := do(ctx, r.b, func() (uint64, error) { return r.b.kv.Update(ctx, key, value, rev) })
	if errors.Is(err, jetstream.ErrKeyExists) { // a wrong revision, on one replica or several
		return 0, ErrRecordExists
	}
	if err != nil {
		return 0, fmt.Errorf("update %s: %w", key, refusedFull(err))
	}
	return rev, nil
}

// Create writes key's record unless one exists (ErrRecordExists), and returns its revision.
func (r *Records) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := do(ctx, r.b, func() (uint64, error) { return r.b.kv.Create(ctx, key, value) })
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, ErrRecordExists
	}
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", key, refusedFull(err))
	}
	return rev, nil
}

// Put writes key's record.
func (r *Records) Put(ctx context.Context, key string, value []byte) error {
	if _, err := do(ctx, r.b, func() (uint64, error) { return r.b.kv.Put(ctx, key, value) }); err != nil {
		return fmt.Errorf("put %s: %w", key, refusedFull(err))
	}
	return nil
}

// JetStream's codes of a write refused for room: the bucket's bound ("store failed"), or the
// server's storage.
const (
	codeStoreFailed     jetstream.ErrorCode = 10077
	codeStorageExceeded jetstream.ErrorCode = 10047
)

// refusedFull names err ErrFull when the bucket or the server had no room for the write.
func refusedFull(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == codeStoreFailed || apiErr.ErrorCode == codeStorageExceeded) {
		return fmt.Errorf("%w: %w", ErrFull, err)
	}
	return err
}

// Forget removes key's record if it is still the one of revision rev, so that Create may write
// it again; a record written over it since is kept. It leaves no delete marker: the record's
// room in the bucket is free at once.
func (r *Records) Forget(ctx context.Context, key string, rev uint64) error {
	subject := "$KV." + r.b.cfg.Bucket + "." + key
	if err := r.stream.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(rev+1)); err != nil {
		return fmt.Errorf("forget %s: %w", key, err)
	}
	return nil
}
