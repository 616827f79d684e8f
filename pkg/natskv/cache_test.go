package natskv_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/natskv"
)

// TestCacheBounded: an adversary's flood of keys (here 20 times the size) leaves at most size
// entries in memory, and still every key written is read back, by the replica that wrote it
// and by another, including keys the other had already read as absent.
func TestCacheBounded(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	open := func() *natskv.Cache {
		c, err := natskv.OpenCache(ctx, js, "revoked", time.Hour, 1, 100, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	a, b := open(), open()
	// b reads the keys before they exist: it remembers them absent.
	for i := range 50 {
		if _, ok, err := b.Get(ctx, "early."+strconv.Itoa(i)); ok || err != nil {
			t.Fatalf("absent key: %v %v", ok, err)
		}
	}
	for i := range 2000 {
		if err := a.Put(ctx, "fam."+strconv.Itoa(i), []byte("1")); err != nil {
			t.Fatal(err)
		}
		if n := a.Len(); n > 100 {
			t.Fatalf("%d entries in memory, bound 100", n)
		}
	}
	for i := range 50 {
		if err := a.Put(ctx, "early."+strconv.Itoa(i), []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	// The watch tells b of the keys it remembered absent.
	embeddedtest.Eventually(t, 5*time.Second, "the other replica sees the writes", func() bool {
		for i := range 50 {
			if _, ok, _ := b.Get(ctx, "early."+strconv.Itoa(i)); !ok {
				return false
			}
		}
		return true
	})
	for _, c := range []*natskv.Cache{a, b} {
		for i := range 2000 {
			if _, ok, err := c.Get(ctx, "fam."+strconv.Itoa(i)); !ok || err != nil {
				t.Fatalf("key %d written, then read as absent: %v", i, err)
			}
			if n := c.Len(); n > 100 {
				t.Fatalf("%d entries in memory, bound 100", n)
			}
		}
	}
	v, err := b.Update(ctx, "fam.7", func(old []byte) ([]byte, error) { return append(old, '2'), nil })
	if err != nil || string(v) != "12" {
		t.Fatalf("update: %q %v", v, err)
	}
	embeddedtest.Eventually(t, 5*time.Second, "the update reaches the other replica", func() bool {
		v, _, _ := a.Get(ctx, "fam.7")
		return string(v) == "12"
	})
}
