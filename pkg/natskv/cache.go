package natskv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"
)

// Cache is a NATS key-value bucket read through a bounded cache in memory that a watch of the
// bucket keeps current: a key read once is answered from memory afterwards, and a write by
// any replica reaches every replica's cache as soon as the watch delivers it (milliseconds).
// It holds state that callers can grow, one key per revoked token family or per user with
// failed sign-ins, where a Mirror would hold every key in every front end.
//
// Memory is bounded by design: at most size entries (least recently used first out), each a
// key and a value; the callers' keys are at most 140 bytes and their values at most 200
// (package oauth builds them so), so with the cache's own bookkeeping a Cache takes at most
// size × 600 bytes (30 MB at 50,000 entries; measured 521 bytes an entry) whatever the
// callers do. Entries that
// dropped out are read again from the bucket, which holds them until their TTL: nothing
// written is ever missed, only a round trip is spent.
//
// Consistency: that a key is absent is remembered for at most absentFor, and forgotten at
// once when the watch says the key was written; a read that raced with any write is not
// remembered at all. A write of this replica is seen by it at once.
type Cache struct {
	b   *bucket
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries *lru.Cache[string, cacheEntry]
	// writes counts the writes the watch delivered: a read from the bucket is remembered only
	// when none arrived while it ran, so that it cannot put back what a write just replaced.
	writes uint64

	stop context.CancelFunc
	done chan struct{}
}

// cacheEntry is what is known of a key: its value as of at, or that it is absent (value nil).
type cacheEntry struct {
	value    []byte
	revision uint64
	at       time.Time
}

// absentFor bounds how long a key found absent is believed absent without the watch saying
// otherwise: should the watch ever miss a write, the key is read again within this.
const absentFor = time.Minute

// OpenCache creates or opens the bucket (entries expire after ttl; replicas as the stream's)
// and follows its writes. size bounds the entries in memory. Should NATS lose the bucket, the
// cache makes it again and forgets what it held.
func OpenCache(ctx context.Context, js jetstream.JetStream, bucket string, ttl time.Duration, replicas, size int, now func() time.Time) (*Cache, error) {
	b, err := openBucket(ctx, js, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl, Replicas: replicas})
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	entries, err := lru.New[string, cacheEntry](size)
	if err != nil {
		return nil, fmt.Errorf("cache of %s: %w", bucket, err)
	}
	wctx, stop := context.WithCancel(context.Background())
	// Only new writes: what the bucket holds already is read on demand.
	w, created, err := b.watch(wctx, jetstream.UpdatesOnly())
	if err != nil {
		stop()
		return nil, err
	}
	c := &Cache{b: b, ttl: ttl, now: now, entries: entries, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		b.follow(wctx, w, created, []jetstream.WatchOpt{jetstream.UpdatesOnly()}, c.apply, c.forget, nil)
	}()
	return c, nil
}

// apply brings a key in memory up to date with a write the watch delivered.
func (c *Cache) apply(e jetstream.KeyValueEntry) {
	if e == nil {
		return
	}
	var value []byte
	if e.Operation() == jetstream.KeyValuePut {
		value = e.Value()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	// A key not in memory is read from the bucket when asked for: only keys in memory need the
	// news.
	if old, ok := c.entries.Peek(e.Key()); ok && old.revision < e.Revision() {
		c.entries.Add(e.Key(), cacheEntry{value: value, revision: e.Revision(), at: e.Created()})
	}
}

// forget empties the memory when the bucket was made again: its revisions start over, and
// what it held is gone.
func (c *Cache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	c.entries.Purge()
}

// Get returns key's value, from memory when known, else from the bucket.
func (c *Cache) Get(ctx context.Context, key string) ([]byte, bool, error) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries.Get(key)
	writes := c.writes
	c.mu.Unlock()
	if ok {
		switch {
		case e.value == nil && now.Sub(e.at) < absentFor:
			return nil, false, nil
		case e.value != nil && now.Sub(e.at) < c.ttl:
			return e.value, true, nil
		}
	}
	got, err := do(ctx, c.b, func() (jetstream.KeyValueEntry, error) { return c.b.kv.Get(ctx, key) })
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		e = cacheEntry{at: now}
	case err != nil:
		return nil, false, fmt.Errorf("get %s: %w", key, err)
	default:
		e = cacheEntry{value: got.Value(), revision: got.Revision(), at: got.Created()}
	}
	c.mu.Lock()
	// Nor may it replace a newer value this replica wrote meanwhile.
	if old, ok := c.entries.Peek(key); c.writes == writes && (!ok || old.revision <= e.revision) {
		c.entries.Add(key, e)
	}
	c.mu.Unlock()
	return e.value, e.value != nil, nil
}

// Put writes key for every replica.
func (c *Cache) Put(ctx context.Context, key string, value []byte) error {
	rev, err := do(ctx, c.b, func() (uint64, error) { return c.b.kv.Put(ctx, key, value) })
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	c.remember(key, value, rev)
	return nil
}

// Update changes key atomically, as Mirror.Update does.
func (c *Cache) Update(ctx context.Context, key string, change func(old []byte) ([]byte, error)) ([]byte, error) {
	rev, value, err := update(ctx, c.b, key, change)
	if err != nil {
		return nil, err
	}
	c.remember(key, value, rev)
	return value, nil
}

func (c *Cache) remember(key string, value []byte, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries.Peek(key); !ok || old.revision < rev {
		c.entries.Add(key, cacheEntry{value: value, revision: rev, at: c.now()})
	}
}

// Len is the number of entries in memory; never more than the size OpenCache was given.
func (c *Cache) Len() int { return c.entries.Len() }

// Close stops following the bucket.
func (c *Cache) Close() {
	c.stop()
	<-c.done
}
