package natskv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Mirror is a NATS key-value bucket kept in memory: every front end watches the bucket, so a
// value any replica writes is read by all of them without a round trip. It holds state that
// must be shared by the replicas and read on hot paths, and that callers cannot grow: the pause
// of sending.
//
// Reads are from memory and see another replica's write as soon as the watch delivers it
// (milliseconds); a replica's own writes are seen by it at once.
type Mirror struct {
	b   *bucket
	ttl time.Duration
	now func() time.Time

	mu sync.RWMutex
	m  map[string]mirrored

	stop context.CancelFunc
	done chan struct{}
}

type mirrored struct {
	value    []byte
	revision uint64
	at       time.Time
}

// OpenMirror creates or opens the bucket (its entries expire after ttl; replicas as the
// stream's) and returns once every entry it holds is in memory. A Mirror holds every key of
// the bucket: use it only for buckets whose keys no caller can multiply (a Cache for others).
// Should NATS lose the bucket, the mirror makes it again and holds what the new one holds.
func OpenMirror(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration, replicas int, now func() time.Time) (*Mirror, error) {
	b, err := openBucket(ctx, js, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl, Replicas: replicas})
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	wctx, stop := context.WithCancel(context.Background())
	w, created, err := b.watch(wctx)
	if err != nil {
		stop()
		return nil, err
	}
	m := &Mirror{b: b, ttl: ttl, now: now, m: map[string]mirrored{}, stop: stop, done: make(chan struct{})}
	ready := make(chan struct{})
	go m.follow(wctx, w, created, ready)
	select {
	case <-ready:
		return m, nil
	case <-ctx.Done():
		m.Close()
		return nil, fmt.Errorf("load %s: %w", bucket, ctx.Err())
	}
}

// Counters is a NATS key-value bucket of values changed atomically and read only by their
// writers (rate-limit buckets): unlike Mirror, nothing is kept in memory, so a flood of keys
// costs the front ends no memory. Its Update is Mirror's.
type Counters struct{ b *bucket }

// OpenCounters creates or opens the bucket; its entries expire after ttl.
func OpenCounters(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration, replicas int) (*Counters, error) {
	b, err := openBucket(ctx, js, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl, Replicas: replicas})
	if err != nil {
		return nil, err
	}
	return &Counters{b: b}, nil
}

// Update changes key atomically, as Mirror.Update does.
func (c *Counters) Update(ctx context.Context, key string, change func(old []byte) ([]byte, error)) ([]byte, error) {
	_, v, err := update(ctx, c.b, key, change)
	return v, err
}

// follow applies the watch's updates until the mirror is closed; ready is closed once the
// entries present when the watch started are applied. A watch of a bucket made again fills a
// new map, which replaces the mirror's once loaded.
func (m *Mirror) follow(ctx context.Context, w jetstream.KeyWatcher, created time.Time, ready chan struct{}) {
	defer close(m.done)
	var fresh map[string]mirrored // loading a bucket made again: what it holds so far
	apply := func(e jetstream.KeyValueEntry) {
		switch {
		case e == nil:
			if fresh != nil {
				m.mu.Lock()
				m.m, fresh = fresh, nil
				m.mu.Unlock()
			}
			if ready != nil {
				close(ready)
				ready = nil
			}
		case fresh != nil:
			if e.Operation() == jetstream.KeyValuePut {
				fresh[e.Key()] = mirrored{value: e.Value(), revision: e.Revision(), at: e.Created()}
			} else {
				delete(fresh, e.Key())
			}
		default:
			m.apply(e.Key(), e.Value(), e.Revision(), e.Operation() != jetstream.KeyValuePut, e.Created())
		}
	}
	again := func() { fresh = map[string]mirrored{} }
	m.b.follow(ctx, w, created, nil, apply, again, m.prune)
}

func (m *Mirror) apply(key string, value []byte, rev uint64, deleted bool, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.m[key]; ok && old.revision >= rev {
		return
	}
	if deleted {
		delete(m.m, key)
		return
	}
	m.m[key] = mirrored{value: value, revision: rev, at: at}
}

// prune forgets entries the bucket has expired (expiry sends no update to the watch).
func (m *Mirror) prune() {
	cut := m.now().Add(-m.ttl)
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, e := range m.m {
		if e.at.Before(cut) {
			delete(m.m, k)
		}
	}
}

// Get returns the value of key as last seen.
func (m *Mirror) Get(key string) ([]byte, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.m[key]
	if !ok || m.now().Sub(e.at) >= m.ttl {
		return nil, false
	}
	return e.value, true
}

// Put writes key for every replica.
func (m *Mirror) Put(ctx context.Context, key string, value []byte) error {
	rev, err := do(ctx, m.b, func() (uint64, error) { return m.b.kv.Put(ctx, key, value) })
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	m.apply(key, value, rev, false, m.now())
	return nil
}

// Update changes key atomically: change gets the stored value (nil when there is none) and
// returns the new one. Concurrent updates from any replica are retried, never lost.
func (m *Mirror) Update(ctx context.Context, key string, change func(old []byte) ([]byte, error)) ([]byte, error) {
	rev, value, err := update(ctx, m.b, key, change)
	if err != nil {
		return nil, err
	}
	m.apply(key, value, rev, false, m.now())
	return value, nil
}

func update(ctx context.Context, b *bucket, key string, change func(old []byte) ([]byte, error)) (uint64, []byte, error) {
	kv := b.kv
	for {
		var old []byte
		var rev uint64
		e, err := do(ctx, b, func() (jetstream.KeyValueEntry, error) { return kv.Get(ctx, key) })
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return 0, nil, fmt.Errorf("get %s: %w", key, err)
		default:
			old, rev = e.Value(), e.Revision()
		}
		value, err := change(old)
		if err != nil {
			return 0, nil, err
		}
		if rev == 0 {
			rev, err = kv.Create(ctx, key, value)
		} else {
			rev, err = kv.Update(ctx, key, value, rev)
		}
		switch {
		case err == nil:
			return rev, value, nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			if ctx.Err() != nil {
				return 0, nil, ctx.Err()
			}
			// another replica wrote first: read again
		default:
			return 0, nil, fmt.Errorf("update %s: %w", key, err)
		}
	}
}

// Close stops following the bucket.
func (m *Mirror) Close() {
	m.stop()
	<-m.done
}
