package drills_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/standalone"
)

// workerBin is the worker program, built once for every drill: the drills kill and start real
// worker processes.
var workerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ucs-drills-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workerBin = filepath.Join(dir, "worker")
	build := exec.Command("go", "build", "-o", workerBin, "github.com/campus-it/ucs/worker")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build the worker:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// full reports whether the drills run at their full length (scripts/drills.sh sets
// UCS_DRILLS=full): outages of 30 s and a minute, as the reliability table reports them.
// Otherwise each outage is a few seconds, enough to cross every retry path, and the drills
// fit in CI's time.
func full() bool { return os.Getenv("UCS_DRILLS") == "full" }

// pick is short under a plain go test and long under scripts/drills.sh.
func pick[T any](short, long T) T {
	if full() {
		return long
	}
	return short
}

// rig is the whole service with its parts in the drill's hands: NATS and FerretDB started
// here (so that a drill can stop them), the front end with the platform simulator
// (standalone.Start with no embedded servers of its own and no in-process worker), and worker
// processes started from the stack's worker.yaml.
type rig struct {
	t       *testing.T
	dir     string
	nats    *embedded.NATS
	natsURL string
	ferret  *embedded.FerretDB
	fAddr   string
	stack   *standalone.Stack
	client  *http.Client
	token   string
	mu      sync.Mutex
	workers []*workerProc
	// mod changes the configuration before the stack starts.
	mod func(*config.Config)
}

type rigOptions struct {
	// natsURL, when set, is a NATS deployment the drill runs (a cluster); else one embedded
	// server is started.
	natsURL string
	// mod changes the configuration before the stack starts.
	mod func(*config.Config)
}

func newRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	r := &rig{t: t, dir: t.TempDir(), client: &http.Client{Timeout: 30 * time.Second}, mod: o.mod, natsURL: o.natsURL}
	if r.natsURL == "" {
		n, err := embedded.StartNATS(embedded.NATSOptions{Dir: filepath.Join(r.dir, "nats")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Shutdown)
		r.nats, r.natsURL = n, n.URL()
	}
	r.startFerretDB()
	t.Cleanup(func() {
		if r.ferret != nil {
			r.ferret.Shutdown()
		}
	})
	r.startStack()
	t.Cleanup(func() { r.stack.Close() })
	// Workers stop before the stack and the servers they use (cleanups run last first).
	t.Cleanup(r.stopWorkers)
	return r
}

// startFerretDB starts FerretDB on its first address again after a stop, on the same files.
func (r *rig) startFerretDB() {
	r.t.Helper()
	addr := r.fAddr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	f, err := embedded.StartFerretDB(embedded.FerretDBOptions{Dir: filepath.Join(r.dir, "ferretdb"), Addr: addr,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		r.t.Fatal(err)
	}
	r.ferret = f
	if r.fAddr == "" {
		u, err := url.Parse(f.URI())
		if err != nil {
			r.t.Fatal(err)
		}
		r.fAddr = u.Host
	}
}

// stopFerretDB stops the store: every connection to it is refused until startFerretDB.
func (r *rig) stopFerretDB() {
	r.ferret.Shutdown()
	r.ferret = nil
}

// startStack starts the front end on the rig's data folder, with the same clients, secrets
// and platform account as before when it restarts.
func (r *rig) startStack() {
	r.t.Helper()
	cfg := &config.Config{
		NATS:    config.NATS{URL: r.natsURL},
		MongoDB: config.MongoDB{URI: "mongodb://" + r.fAddr + "/", Database: "ucs"},
		Worker: config.Worker{BackoffInitial: config.Duration(200 * time.Millisecond), BackoffMax: config.Duration(2 * time.Second),
			MaxAttempts: 1000, AckWait: config.Duration(10 * time.Second), Concurrency: 64},
		ShutdownGrace: config.Duration(10 * time.Second),
	}
	if r.mod != nil {
		r.mod(cfg)
	}
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("UCS_DRILLS_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	s, err := standalone.Start(context.Background(), standalone.Options{DataDir: filepath.Join(r.dir, "stack"), Config: cfg,
		Listen: "127.0.0.1:0", Logger: log})
	if err != nil {
		r.t.Fatal(err)
	}
	if r.ferret != nil {
		if err := r.ferret.IndexIDs(context.Background(), "ucs"); err != nil {
			r.t.Fatal(err)
		}
	}
	r.stack = s
	r.token = r.getToken()
}

func (r *rig) getToken() string {
	r.t.Helper()
	var c struct{ id, secret string }
	for _, cl := range r.stack.Info.Clients {
		if cl.ClientID == standalone.DemoClient {
			c.id, c.secret = cl.ClientID, cl.ClientSecret
		}
	}
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {c.id}, "client_secret": {c.secret}}
	resp, err := r.client.PostForm(r.stack.Info.BaseURL+"/v1/token", form)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || tok.AccessToken == "" {
		r.t.Fatalf("token: %d %v", resp.StatusCode, err)
	}
	return "Bearer " + tok.AccessToken
}

// workerProc is a worker process.
type workerProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *embeddedtest.SyncBuffer
}

// startWorker starts a worker process from the stack's worker.yaml.
func (r *rig) startWorker() *workerProc {
	r.t.Helper()
	cmd := exec.Command(workerBin, "-config", filepath.Join(r.stack.DataDir, standalone.WorkerConfigFile), "-listen", "127.0.0.1:0")
	stderr := &embeddedtest.SyncBuffer{}
	cmd.Stderr = stderr
	if os.Getenv("UCS_DRILLS_LOG") != "" {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	w := &workerProc{cmd: cmd, exited: make(chan struct{}), stderr: stderr}
	r.t.Cleanup(func() {
		if r.t.Failed() {
			r.t.Logf("a worker's log:\n%s", stderr)
		}
	})
	go func() { _ = cmd.Wait(); close(w.exited) }()
	r.mu.Lock()
	r.workers = append(r.workers, w)
	r.mu.Unlock()
	return w
}

// kill ends the process at once, as the kernel's OOM killer or a lost node would.
func (w *workerProc) kill() {
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.exited
}

func (r *rig) stopWorkers() {
	r.mu.Lock()
	ws := r.workers
	r.workers = nil
	r.mu.Unlock()
	for _, w := range ws {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.exited:
		case <-time.After(20 * time.Second):
			w.kill()
		}
	}
}

// body is a push to a bound demo user; n makes each one's content distinct.
func body(n int) string {
	return fmt.Sprintf(`{"userId":"2020000001","type":"JML","data":{"class":"高等数学","info":"第%d次作业"}}`, n%100000)
}

// do sends a request to the front end.
func (r *rig) do(method, path string, header http.Header, payload string) (int, []byte, error) {
	req, err := http.NewRequest(method, r.stack.Info.BaseURL+path, strings.NewReader(payload))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", r.token)
	if payload != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// pushes is what a load of pushes was answered.
type pushes struct {
	mu       sync.Mutex
	ids      []string
	refused  int // 503s, which a client retries
	failures []string
	wait     chan struct{} // closed when the load has stopped
}

func (p *pushes) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ids...)
}

// push sends one push, retrying a 503 (as the answer asks) a few times; every ucsId answered
// is recorded.
func (r *rig) push(p *pushes, n int) {
	for try := 0; try < 20; try++ {
		st, b, err := r.do("POST", "/v1/infra/notification/mp", nil, body(n))
		if err == nil && st == 200 {
			var a struct {
				Data struct {
					UcsID string `json:"ucsId"`
				} `json:"data"`
			}
			if err := json.Unmarshal(b, &a); err != nil || a.Data.UcsID == "" {
				p.mu.Lock()
				p.failures = append(p.failures, fmt.Sprintf("200 without a ucsId: %s", b))
				p.mu.Unlock()
				return
			}
			p.mu.Lock()
			p.ids = append(p.ids, a.Data.UcsID)
			p.mu.Unlock()
			return
		}
		if err == nil && st != http.StatusServiceUnavailable {
			p.mu.Lock()
			p.failures = append(p.failures, fmt.Sprintf("%d %s", st, b))
			p.mu.Unlock()
			return
		}
		p.mu.Lock()
		p.refused++
		p.mu.Unlock()
		time.Sleep(250 * time.Millisecond) // a client's pause before it retries
	}
	p.mu.Lock()
	p.failures = append(p.failures, "refused 20 times")
	p.mu.Unlock()
}

// load pushes from conc goroutines until stop is closed, at most rate pushes a second in all.
func (r *rig) load(conc int, rate int, stop <-chan struct{}) *pushes {
	p := &pushes{}
	var wg sync.WaitGroup
	var next int64
	var nmu sync.Mutex
	tick := time.NewTicker(time.Second / time.Duration(rate))
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				nmu.Lock()
				next++
				n := int(next)
				nmu.Unlock()
				r.push(p, n)
			}
		}()
	}
	r.t.Cleanup(tick.Stop)
	p.wait = make(chan struct{})
	go func() { wg.Wait(); close(p.wait) }()
	return p
}

// result is a lookup's data.
type result struct {
	UcsID    string `json:"ucsId"`
	State    string `json:"state"`
	Reason   string `json:"reason"`
	Attempts int    `json:"attempts"`
}

// results looks ids up, 1,000 at a time.
func (r *rig) results(ids []string) (map[string]result, error) {
	out := make(map[string]result, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), 1000)
		b, _ := json.Marshal(map[string][]string{"ucsIds": ids[:n]})
		st, body, err := r.do("POST", "/v1/infra/notification/mp/results", nil, string(b))
		if err != nil {
			return nil, err
		}
		if st != 200 {
			return nil, fmt.Errorf("results: %d %s", st, body)
		}
		var a struct {
			Data struct {
				Results []result `json:"results"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, err
		}
		for _, res := range a.Data.Results {
			out[res.UcsID] = res
		}
		ids = ids[n:]
	}
	return out, nil
}

// verify waits until every answered push is final, then checks the drill's promise: each
// one delivered, none missing, and the platform given each at most once. It returns how long
// the wait took.
func (r *rig) verify(ids []string, within time.Duration) time.Duration {
	r.t.Helper()
	start := time.Now()
	var last map[string]result
	for {
		res, err := r.results(ids)
		states := map[string]int{}
		if err == nil {
			last = res
			for _, id := range ids {
				states[res[id].State]++
			}
			if states["delivered"]+states["failed"] == len(ids) {
				break
			}
		}
		if time.Since(start) > within {
			r.t.Fatalf("not all %d pushes final within %s: %v (%v)", len(ids), within, states, err)
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
	took := time.Since(start)
	count := map[string]int{}
	for _, m := range r.stack.Sim.Sent() {
		count[m.ClientMsgID]++
	}
	for _, id := range ids {
		if res := last[id]; res.State != "delivered" {
			r.t.Errorf("%s ended %s (%s)", id, res.State, res.Reason)
		}
		switch c := count[id]; {
		case c == 0:
			r.t.Errorf("%s never reached the platform", id)
		case c > 1:
			r.t.Errorf("%s reached the platform %d times", id, c)
		}
	}
	return took
}
