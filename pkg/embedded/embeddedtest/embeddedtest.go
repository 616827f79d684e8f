// Package embeddedtest starts the real embedded servers for tests: each call gets its own
// server on a port the OS chose, with its data in the test's temporary folder, stopped when the
// test ends.
package embeddedtest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/event"

	"github.com/campus-it/ucs/pkg/embedded"
	"github.com/campus-it/ucs/pkg/store"
)

// NATS starts a NATS server with JetStream and returns its URL.
func NATS(t testing.TB) string {
	t.Helper()
	n, err := embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	return n.URL()
}

// JetStream starts a NATS server and returns a JetStream context on a connection to it.
func JetStream(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return JetStreamAt(t, NATS(t))
}

// JetStreamAt returns a JetStream context on a connection to the NATS server (or cluster) at
// url, made with opts, closed when the test ends.
func JetStreamAt(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// MongoURI starts FerretDB and returns its MongoDB connection string.
func MongoURI(t testing.TB) string {
	t.Helper()
	return FerretDB(t).URI()
}

// FerretDB starts FerretDB.
func FerretDB(t testing.TB) *embedded.FerretDB {
	t.Helper()
	f, err := embedded.StartFerretDB(embedded.FerretDBOptions{
		Dir:    t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Shutdown)
	return f
}

// Store starts FerretDB and opens a store on a database named after the test.
func Store(t testing.TB, now func() time.Time) *store.Store {
	t.Helper()
	return StoreWith(t, store.Options{Now: now})
}

// StoreWith is Store with the options o (its URI and Database are the test's).
func StoreWith(t testing.TB, o store.Options) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := FerretDB(t)
	db := DBName(t)
	o.URI, o.Database = f.URI(), db
	st, err := store.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.IndexIDs(ctx, db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	return st
}

// DBName is a database name unique to the test.
func DBName(t testing.TB) string {
	r := strings.NewReplacer("/", "_", " ", "_", "#", "_", ".", "_")
	name := r.Replace(t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("t_%s_%d", name, time.Now().UnixNano()%1_000_000)
}

// Eventually polls cond every 20ms until it holds or the deadline passes, then fails the test
// with what. Tests wait with it rather than sleeping.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Proxy forwards TCP connections to a server and can make it slow or unreachable, so tests can
// show what the service does when its store or queue misbehaves.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	delay time.Duration
	conns map[net.Conn]struct{}
	// holdWhen, once a chunk the client sends matches it, holds every answer of the server
	// until released is closed (Release).
	holdWhen func([]byte) bool
	holding  bool
	released chan struct{}
}

// NewProxy listens on a port the OS chose and forwards to target (host:port); it stops when
// the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.Release()
		p.SetDown(true)
	})
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDown cuts every connection and refuses new ones while down is true.
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			_ = c.Close()
		}
	}
}

// SetDelay holds everything the client sends back by d, so that each answer comes d late.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// HoldAnswersAfter holds every answer of the server, from the moment the client sends a chunk
// that match reports, until Release: what the client sent with it reaches the server, and the
// server's answer to it waits, however fast the machine.
func (p *Proxy) HoldAnswersAfter(match func(sent []byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdWhen, p.holding, p.released = match, false, make(chan struct{})
}

// Release lets the answers HoldAnswersAfter held go on, and holds no more.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released != nil {
		close(p.released)
	}
	p.holdWhen, p.holding, p.released = nil, false, nil
}

// hold reports what an answer waits for: nil when nothing is held.
func (p *Proxy) hold() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holding {
		return p.released
	}
	return nil
}

// sent notes a chunk the client sends, before it reaches the server.
func (p *Proxy) sent(chunk []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holdWhen != nil && !p.holding && p.holdWhen(chunk) {
		p.holding = true
	}
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) forward(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c, s) {
		_ = c.Close()
		_ = s.Close()
		return
	}
	go p.pipe(s, c, true)
	p.pipe(c, s, false)
}

// pipe copies from src to dst: what the client sends waits out the delay, the server's answers
// wait while held.
func (p *Proxy) pipe(dst, src net.Conn, fromClient bool) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromClient {
				p.sent(buf[:n])
				p.mu.Lock()
				d := p.delay
				p.mu.Unlock()
				time.Sleep(d) // the fault being injected, not a wait for readiness
			} else if held := p.hold(); held != nil {
				<-held
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Finds counts the find commands the MongoDB driver sends on one collection: give Monitor to
// the store, read N.
type Finds struct {
	collection string
	n          atomic.Int64
}

// CountFinds counts the finds on collection.
func CountFinds(collection string) *Finds { return &Finds{collection: collection} }

// Monitor is the driver's command monitor that counts.
func (f *Finds) Monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, ev *event.CommandStartedEvent) {
		if ev.CommandName == "find" {
			if c, ok := ev.Command.Lookup("find").StringValueOK(); ok && c == f.collection {
				f.n.Add(1)
			}
		}
	}}
}

// N is the finds counted so far.
func (f *Finds) N() int64 { return f.n.Load() }

// During returns the finds that run made.
func (f *Finds) During(run func()) int64 {
	n := f.N()
	run()
	return f.N() - n
}

// SyncBuffer is a buffer that many goroutines (a process's output, a logger) write to while
// the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
