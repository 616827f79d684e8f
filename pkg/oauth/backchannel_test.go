package oauth_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/oauth"
)

// TestBackchannelBoundedAndClosed: the queue is bounded (a token beyond it is dropped, never
// waited for), a refusing client is retried, a 4xx answer is not, and Close ends the retries
// under way and returns once every sender has.
func TestBackchannelBoundedAndClosed(t *testing.T) {
	var failing, refused atomic.Int32
	release, marker := make(chan struct{}), make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			<-release
		case "/down":
			failing.Add(1)
			w.WriteHeader(http.StatusBadGateway)
		case "/marker":
			marker <- struct{}{}
		case "/refuses":
			refused.Add(1)
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	defer close(release)

	b := oauth.NewBackchannel(oauth.BackchannelConfig{Queue: 1, Senders: 1, InitialInterval: 10 * time.Millisecond,
		MaxInterval: 20 * time.Millisecond, MaxElapsed: time.Hour})
	if !b.Send("c", srv.URL+"/slow", "t1") {
		t.Fatal("the first token was not taken")
	}
	// The one sender is held by /slow; one token waits in the queue, the next is dropped.
	deadline := time.Now().Add(10 * time.Second)
	queued := 0
	for queued < 1 && time.Now().Before(deadline) {
		if b.Send("c", srv.URL+"/down", "t2") {
			queued++
		}
	}
	if b.Send("c", srv.URL+"/down", "t3") {
		t.Fatal("a token beyond the queue's bound was taken")
	}
	release <- struct{}{}
	embeddedtest.Eventually(t, time.Until(deadline), "a failing client is retried (3 posts)", func() bool { return failing.Load() >= 3 })
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the retries under way")
	}
	if b.Send("c", srv.URL+"/down", "t4") {
		t.Fatal("a closed sender took a token")
	}

	// A 4xx answer is the client's refusal: not retried. One sender takes the tokens in order,
	// so once the next token arrives the refused one's delivery is over.
	b = oauth.NewBackchannel(oauth.BackchannelConfig{Senders: 1, InitialInterval: 10 * time.Millisecond, MaxElapsed: time.Hour})
	defer b.Close()
	b.Send("c", srv.URL+"/refuses", "t")
	b.Send("c", srv.URL+"/marker", "t")
	select {
	case <-marker:
	case <-time.After(10 * time.Second):
		t.Fatal("the token after the refused one never came")
	}
	if refused.Load() != 1 {
		t.Fatalf("a refused token was posted %d times", refused.Load())
	}
}

// TestBackchannelClientDownDelaysOnlyItself: a client whose address answers 503 (it is being
// deployed) is retried for minutes; the tokens of other clients, queued after more of its tokens
// than there are senders, are delivered at once all the same.
func TestBackchannelClientDownDelaysOnlyItself(t *testing.T) {
	var down atomic.Int32
	healthy := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/down":
			down.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/healthy":
			healthy <- struct{}{}
		}
	}))
	defer srv.Close()
	// Retries of the client that is down wait 30 s: a sender that waited them would hold the
	// healthy client's token that long.
	b := oauth.NewBackchannel(oauth.BackchannelConfig{Senders: 2, InitialInterval: 30 * time.Second, MaxInterval: 30 * time.Second, MaxElapsed: time.Hour})
	defer b.Close()
	for range 4 {
		b.Send("deploying", srv.URL+"/down", "t")
	}
	embeddedtest.Eventually(t, 10*time.Second, "the client that is down is posted to, by every sender", func() bool { return down.Load() >= 2 })
	b.Send("healthy", srv.URL+"/healthy", "t")
	select {
	case <-healthy:
	case <-time.After(10 * time.Second):
		t.Fatalf("a healthy client's logout token waits behind the retries of a client that is down (%d posts to it)", down.Load())
	}
}

// TestBackchannelClientNotAnsweringDelaysOnlyItself: a client that is down by not answering (its
// host overloaded, a firewall dropping packets, a load balancer holding the connection during a
// deploy) holds a sender for each first post up to the HTTP client's time-out (10 s by
// default): with senders shared by all clients, twelve of its tokens queued before a healthy
// client's would hold that token 30 s, and some 120 past its expiry. Each client has senders of
// its own: the healthy client's token goes at once.
func TestBackchannelClientNotAnsweringDelaysOnlyItself(t *testing.T) {
	var hung atomic.Int32
	healthy := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hung":
			hung.Add(1)
			_, _ = io.Copy(io.Discard, r.Body) // so that the server sees the sender hang up
			<-r.Context().Done()               // never answers
		case "/healthy":
			healthy <- struct{}{}
		}
	}))
	defer srv.Close()
	b := oauth.NewBackchannel(oauth.BackchannelConfig{}) // the service's configuration: defaults
	defer b.Close()
	for range 12 {
		if !b.Send("hung", srv.URL+"/hung", "t") {
			t.Fatal("a token was not queued")
		}
	}
	embeddedtest.Eventually(t, 10*time.Second, "the hung client is posted to by every sender", func() bool { return hung.Load() >= 4 })
	b.Send("healthy", srv.URL+"/healthy", "t")
	select {
	case <-healthy:
	case <-time.After(8 * time.Second):
		t.Fatalf("a healthy client's logout token waits behind the first posts of a client that does not answer (%d posts to it under way or done)", hung.Load())
	}
}

// TestBackchannelRetriesEndWithinMaxElapsed: a token whose client keeps answering 503 is
// retried for MaxElapsed from its first post, the wait before the first retry included: the last
// retry starts within it.
func TestBackchannelRetriesEndWithinMaxElapsed(t *testing.T) {
	var mu sync.Mutex
	var posts []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts = append(posts, time.Now())
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	const maxElapsed = 2 * time.Second
	given := &embeddedtest.SyncBuffer{}
	// A long first wait (600 ms, give or take half) then short ones.
	b := oauth.NewBackchannel(oauth.BackchannelConfig{InitialInterval: 600 * time.Millisecond, MaxInterval: 50 * time.Millisecond,
		MaxElapsed: maxElapsed, Logger: slog.New(slog.NewTextHandler(given, nil))})
	defer b.Close()
	b.Send("c", srv.URL, "t")
	embeddedtest.Eventually(t, 30*time.Second, "the token given up", func() bool {
		return strings.Contains(given.String(), "back-channel logout given up")
	})
	mu.Lock()
	defer mu.Unlock()
	last := posts[len(posts)-1].Sub(posts[0])
	t.Logf("%d posts; the last %s after the first", len(posts), last)
	if last > maxElapsed+150*time.Millisecond {
		t.Fatalf("the last retry started %s after the first post, past MaxElapsed (%s)", last, maxElapsed)
	}
}

// TestBackchannelNoRetryPastMaxElapsed: a client that does not answer; the first post ends at
// the HTTP client's time-out (1.5 s), past MaxElapsed (1 s): no retry follows, and the token is
// given up at once.
func TestBackchannelNoRetryPastMaxElapsed(t *testing.T) {
	var mu sync.Mutex
	var posts []time.Time
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts = append(posts, time.Now())
		mu.Unlock()
		_, _ = io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	const maxElapsed = time.Second
	given := &embeddedtest.SyncBuffer{}
	b := oauth.NewBackchannel(oauth.BackchannelConfig{HTTPClient: &http.Client{Timeout: 1500 * time.Millisecond},
		InitialInterval: 100 * time.Millisecond, MaxInterval: 100 * time.Millisecond, MaxElapsed: maxElapsed,
		Logger: slog.New(slog.NewTextHandler(given, nil))})
	defer b.Close()
	b.Send("c", srv.URL, "t")
	embeddedtest.Eventually(t, 30*time.Second, "the token given up", func() bool {
		return strings.Contains(given.String(), "back-channel logout given up")
	})
	end := time.Now()
	mu.Lock()
	defer mu.Unlock()
	last := posts[len(posts)-1].Sub(posts[0])
	t.Logf("%d posts; the last started %s after the first; given up %s after the first", len(posts), last, end.Sub(posts[0]))
	if len(posts) != 1 {
		t.Fatalf("MaxElapsed %s: %d posts, the last %s after the first, which ended past it", maxElapsed, len(posts), last.Round(time.Millisecond))
	}
}

// TestBackchannelCloseSendsWhatIsQueuedOrSaysSo: a front end stops (a rolling update) just after
// it served sign-outs. The tokens still queued for a client that answers at once are posted
// before Close returns; those for a client that does not answer are given up after CloseWait,
// each logged with its client (never the token), so that an operator can tell which
// applications were not told.
func TestBackchannelCloseSendsWhatIsQueuedOrSaysSo(t *testing.T) {
	var got atomic.Int32
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hangs" {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		got.Add(1)
	}))
	defer srv.Close()
	defer close(hang)
	logs := &embeddedtest.SyncBuffer{}
	b := oauth.NewBackchannel(oauth.BackchannelConfig{Logger: slog.New(slog.NewTextHandler(logs, nil)), CloseWait: 500 * time.Millisecond})
	const n = 20
	for range n {
		if !b.Send("shop", srv.URL+"/logout", "token-shop") || !b.Send("slow", srv.URL+"/hangs", "token-slow") {
			t.Fatal("a token was not taken")
		}
	}
	start := time.Now()
	b.Close()
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Close took %s with a client that does not answer, want about CloseWait", took)
	}
	if got.Load() != n {
		t.Errorf("%d of %d tokens for a client answering at once were posted before Close returned", got.Load(), n)
	}
	out := logs.String()
	if given := strings.Count(out, "client=slow"); given != n {
		t.Errorf("%d given-up tokens of the client that does not answer are logged, want %d: %s", given, n, out)
	}
	if strings.Contains(out, "client=shop") || strings.Contains(out, "token-") {
		t.Errorf("the log names a token posted, or a token: %s", out)
	}
	if b.Send("shop", srv.URL+"/logout", "token-late") || !strings.Contains(logs.String(), "client=shop") {
		t.Errorf("a token after Close is neither refused nor logged: %s", logs.String())
	}
}
