package natskv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/natskv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestBucketsMadeAgain: NATS loses every bucket (their streams deleted, as when a server comes
// back without its files). Records and Counters make theirs again at their next call; a Mirror
// and a Cache make theirs again and follow the new bucket, holding what it holds (not what the
// lost one held), whether their watch ended or went on.
func TestBucketsMadeAgain(t *testing.T) {
	t.Cleanup(natskv.SetBucketCheck(200 * time.Millisecond))
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	mirror, err := natskv.OpenMirror(ctx, js, "lost_mirror", time.Hour, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mirror.Close)
	cache, err := natskv.OpenCache(ctx, js, "lost_cache", time.Hour, 1, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.Close)
	records, err := natskv.OpenRecords(ctx, js, "lost_records", time.Hour, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	counters, err := natskv.OpenCounters(ctx, js, "lost_counters", time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	count := func(old []byte) ([]byte, error) { return append(old, 'x'), nil }
	// Several writes, so that the lost buckets' sequences are ahead of the new ones'.
	for _, k := range []string{"a", "b", "c"} {
		if err := mirror.Put(ctx, k, []byte("lost")); err != nil {
			t.Fatal(err)
		}
		if err := cache.Put(ctx, k, []byte("lost")); err != nil {
			t.Fatal(err)
		}
		if _, err := records.Create(ctx, k, []byte("lost")); err != nil {
			t.Fatal(err)
		}
		if _, err := counters.Update(ctx, k, count); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"lost_mirror", "lost_cache", "lost_records", "lost_counters"} {
		if err := js.DeleteStream(ctx, "KV_"+b); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := records.Create(ctx, "a", []byte("new")); err != nil {
		t.Fatalf("a record created after its bucket was lost: %v", err)
	}
	if v, _, err := records.Get(ctx, "a"); err != nil || string(v) != "new" {
		t.Fatalf("the record read back: %q %v", v, err)
	}
	if _, _, err := records.Get(ctx, "b"); !errors.Is(err, natskv.ErrNoRecord) {
		t.Fatalf("a record of the lost bucket: %v, want ErrNoRecord", err)
	}
	if v, err := counters.Update(ctx, "a", count); err != nil || string(v) != "x" {
		t.Fatalf("a counter after its bucket was lost: %q %v, want \"x\"", v, err)
	}

	// Another replica writes to the mirror's and the cache's buckets, made again at once (before
	// the watches notice): the writes are at sequences the lost buckets had passed.
	other, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "lost_mirror", TTL: time.Hour, History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Put(ctx, "b", []byte("new")); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the mirror holds the new bucket's entries only", func() bool {
		b, okB := mirror.Get("b")
		_, okA := mirror.Get("a")
		return okB && string(b) == "new" && !okA
	})
	if err := mirror.Put(ctx, "c", []byte("new")); err != nil {
		t.Fatal(err)
	}
	if e, err := other.Get(ctx, "c"); err != nil || string(e.Value()) != "new" {
		t.Fatalf("the mirror's write read by another replica: %v", err)
	}

	otherCache, err := natskv.OpenCache(ctx, js, "lost_cache", time.Hour, 1, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(otherCache.Close)
	// "b" was in its memory: it goes once the cache notices the new bucket.
	embeddedtest.Eventually(t, 10*time.Second, "the cache forgets the lost bucket's entries", func() bool {
		_, ok, err := cache.Get(ctx, "b")
		return err == nil && !ok
	})
	if err := otherCache.Put(ctx, "a", []byte("new")); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the cache sees another replica's write to the new bucket", func() bool {
		v, ok, err := cache.Get(ctx, "a")
		return err == nil && ok && string(v) == "new"
	})
}
