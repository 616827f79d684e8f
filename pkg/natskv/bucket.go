package natskv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// bucket is a key-value bucket and the configuration it was made with. NATS may lose a bucket
// (a server restarted without its files, a stream deleted by hand); whoever uses it next makes
// it again, empty, rather than fail until every program restarts.
type bucket struct {
	js  jetstream.JetStream
	cfg jetstream.KeyValueConfig
	// kv addresses the bucket by name, so it serves the bucket made again too.
	kv jetstream.KeyValue
}

// openBucket creates the bucket, or brings its configuration up to date.
func openBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (*bucket, error) {
	if cfg.Replicas < 1 {
		cfg.Replicas = 1
	}
	cfg.History, cfg.Storage = 1, jetstream.FileStorage
	kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: %w", cfg.Bucket, err)
	}
	return &bucket{js: js, cfg: cfg, kv: kv}, nil
}

// made returns when the bucket's stream was created, and makes the bucket again first when it is
// gone.
func (b *bucket) made(ctx context.Context) (time.Time, error) {
	st, err := b.js.Stream(ctx, "KV_"+b.cfg.Bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := b.js.CreateKeyValue(ctx, b.cfg); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return time.Time{}, fmt.Errorf("make key-value bucket %s again: %w", b.cfg.Bucket, err)
		}
		st, err = b.js.Stream(ctx, "KV_"+b.cfg.Bucket)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("key-value bucket %s: %w", b.cfg.Bucket, err)
	}
	return st.CachedInfo().Created, nil
}

// gone reports whether err says that no stream answered: the bucket may be gone.
func gone(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrStreamNotFound)
}

// do runs op, and once more, after making the bucket again, when no stream answered it.
func do[T any](ctx context.Context, b *bucket, op func() (T, error)) (T, error) {
	v, err := op()
	if err == nil || !gone(err) {
		return v, err
	}
	if _, merr := b.made(ctx); merr != nil {
		return v, err
	}
	return op()
}

// bucketCheck is how often a watch looks whether its bucket is still the one it watches.
var bucketCheck = 15 * time.Second

// watch starts a watch of the whole bucket, with opts, and returns it with when the bucket was
// made.
func (b *bucket) watch(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, time.Time, error) {
	created, err := b.made(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	w, err := b.kv.WatchAll(ctx, opts...)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("watch %s: %w", b.cfg.Bucket, err)
	}
	return w, created, nil
}

// follow hands w's updates to apply until ctx ends. Every bucketCheck, and at once when the
// watch ends, it looks whether the bucket is still the one the watch began on: when NATS lost it
// (the watch then ends, or goes on from a sequence the new bucket has not reached), it makes
// the bucket again and watches it from its start, after calling again. tick, unless nil, is
// called at every look.
func (b *bucket) follow(ctx context.Context, w jetstream.KeyWatcher, created time.Time, opts []jetstream.WatchOpt,
	apply func(jetstream.KeyValueEntry), again, tick func()) {
	defer func() {
		if w != nil {
			_ = w.Stop()
		}
	}()
	check := time.NewTicker(bucketCheck)
	defer check.Stop()
	look := func() {
		c, err := b.made(ctx)
		if err != nil || (w != nil && c.Equal(created)) {
			return // NATS unreachable (the next look tries again), or the same bucket
		}
		if w != nil {
			_ = w.Stop()
			w = nil
		}
		nw, c, err := b.watch(ctx, opts...)
		if err != nil {
			return
		}
		again()
		w, created = nw, c
	}
	for {
		var updates <-chan jetstream.KeyValueEntry
		if w != nil {
			updates = w.Updates()
		}
		select {
		case <-ctx.Done():
			return
		case e, ok := <-updates:
			if ok {
				apply(e)
				continue
			}
			w = nil
			look()
		case <-check.C:
			look()
			if tick != nil {
				tick()
			}
		}
	}
}
