package natskv_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/natskv"
)

// TestMirror: two mirrors of one bucket (two replicas) see each other's writes, concurrent
// updates from both are never lost, and a mirror opened later starts with what is there.
func TestMirror(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	open := func() *natskv.Mirror {
		m, err := natskv.OpenMirror(ctx, js, "shared", time.Hour, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		return m
	}
	a, b := open(), open()
	if err := a.Put(ctx, "sid.x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if v, ok := a.Get("sid.x"); !ok || string(v) != "1" {
		t.Fatalf("own write not seen at once: %q %v", v, ok)
	}
	embeddedtest.Eventually(t, 5*time.Second, "the other mirror sees the write", func() bool {
		_, ok := b.Get("sid.x")
		return ok
	})

	var wg sync.WaitGroup
	for _, m := range []*natskv.Mirror{a, b} {
		for range 4 {
			wg.Go(func() {
				for range 25 {
					_, err := m.Update(ctx, "count", func(old []byte) ([]byte, error) {
						n, _ := strconv.Atoi(string(old))
						return []byte(strconv.Itoa(n + 1)), nil
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	c := open()
	if v, ok := c.Get("count"); !ok || string(v) != "200" {
		t.Fatalf("after 200 concurrent increments, a new mirror reads %q %v", v, ok)
	}
	if _, ok := c.Get("sid.x"); !ok {
		t.Fatal("a new mirror lacks an earlier entry")
	}
}
