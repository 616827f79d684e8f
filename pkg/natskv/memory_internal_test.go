package natskv

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// heapAfter is the live heap after f, less the live heap before it.
func heapAfter(f func() any) (int64, any) {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	kept := f()
	runtime.GC()
	runtime.ReadMemStats(&b)
	return int64(b.HeapAlloc) - int64(a.HeapAlloc), kept
}

// TestMemoryBounds: the bounds the doc comments state, measured on the structures themselves
// after a flood of four times their size with the largest keys and values callers make: a
// Cache entry at most 600 bytes (a key of 140 bytes, a value of 200), a lease at most 350
// (a key of 80 bytes).
func TestMemoryBounds(t *testing.T) {
	const entries = 20_000
	used, kept := heapAfter(func() any {
		c, _ := lru.New[string, cacheEntry](entries)
		for i := range 4 * entries {
			k := "grant." + strings.Repeat("u", 124) + strconv.Itoa(1e9+i) // 140 bytes
			c.Add(k, cacheEntry{value: []byte(strings.Repeat("v", 200)), revision: uint64(i), at: time.Now()})
		}
		return c
	})
	t.Logf("cache: %d bytes an entry", used/entries)
	if per := used / entries; per > 600 {
		t.Errorf("cache: %d bytes an entry, bound 600", per)
	}
	runtime.KeepAlive(kept)
	used, kept = heapAfter(func() any {
		tb := NewTokenBuckets(nil, TokenBucketsConfig{Keys: entries})
		for i := range 4 * entries {
			tb.fromMemory("fail." + strings.Repeat("a", 65) + strconv.Itoa(1e9+i)) // 80 bytes
		}
		return tb
	})
	t.Logf("token buckets: %d bytes a lease", used/entries)
	if per := used / entries; per > 350 {
		t.Errorf("token buckets: %d bytes a lease, bound 350", per)
	}
	runtime.KeepAlive(kept)
}
