package platform_test

import (
	"bytes"
	"context"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLargeAnswersOfManySendsStayBounded: a gateway (or captive portal) in front of the platform
// that answers every send with a page of a megabyte makes each of a worker's concurrent sends
// (worker.concurrency, 256 by default) buffer what it reads of it at once. The
// platform's own answers are under 200 bytes; the deployment gives a worker 512 MiB
// (GOMEMLIMIT 460 MiB). What the answers of 256 sends hold at once must stay a small share of it.
func TestLargeAnswersOfManySendsStayBounded(t *testing.T) {
	const sends = 256
	var arrived sync.WaitGroup
	arrived.Add(sends)
	release := make(chan struct{})
	page := append([]byte("<html>"), bytes.Repeat([]byte("x"), 1<<20-16)...)
	e := newEnv(t, envOptions{wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, "/template/send") {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write(page)
			w.(http.Flusher).Flush()
			arrived.Done()
			<-release // the rest of the page comes later
			_, _ = w.Write([]byte("</html>"))
		})
	}})
	// The token first, so that the sends do not wait for it.
	if err := e.client.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	var done sync.WaitGroup
	for i := range sends {
		done.Add(1)
		go func() {
			defer done.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = e.client.SendTemplate(ctx, exam(follower, "u"+string(rune('a'+i%26))))
		}()
	}
	arrived.Wait()
	time.Sleep(500 * time.Millisecond) // the client reads what was sent
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	close(release)
	done.Wait()

	held := int64(during.HeapAlloc) - int64(before.HeapAlloc)
	const limit = 32 << 20
	if held > limit {
		t.Fatalf("%d concurrent sends answered with a 1 MiB page hold %d MiB of heap at once (limit here %d MiB;"+
			" the worker's container has 512 MiB, GOMEMLIMIT 460 MiB, and worker.concurrency may be up to 4096)",
			sends, held>>20, limit>>20)
	}
}
