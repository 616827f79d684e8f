// Command bench measures the standalone service from outside, as its users load it, and prints
// one table: push accept against a naive baseline, lookups of queued and of delivered pushes at
// 100,000 records and more, how lookups scale with the records stored, and the peak memory of
// the process. It builds the api, worker and baseline programs, starts the stack with no
// in-process worker (-workers 0) and adds a worker process from <data>/worker.yaml when
// deliveries are wanted, so that pushes can be held in the queue or delivered at will.
//
//	go run ./scripts/bench [-records 100000] [-duration 10s] [-compare DIR]
//
// With -compare, DIR is the source of another build of the service (a git worktree of an earlier
// commit, say): its api and worker are built too, every row is measured on both in the same
// run, one stack after the other, and the table shows both builds side by side. The yardsticks
// (the naive front end, a bare nats.go client publishing the same batches, a naive delivery
// pipeline) are measured on each stack's own NATS, MongoDB and simulator.
//
// Everything shares this machine's cores: the load generator, the stack (NATS, FerretDB, the
// platform simulator, the front end) and the worker.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/campus-it/ucs/pkg/push"
)

var (
	records  = flag.Int("records", 100_000, "delivered records to reach before the lookup rows")
	duration = flag.Duration("duration", 10*time.Second, "length of each timed load")
	keep     = flag.Bool("keep", false, "keep the work folder")
	only     = flag.String("only", "", "accept: only the push accept row (and its baseline); batch: only the batch and end-to-end rows; lookup: only the repeated lookups row")
	compare  = flag.String("compare", "", "source folder of a second build to measure side by side")
)

func main() {
	flag.Parse()
	log.SetFlags(log.Ltime)
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

// row is one line of the table.
type row struct {
	name, figure, goal string
	met                bool
}

func run() error {
	work, err := os.MkdirTemp("", "ucs-bench-")
	if err != nil {
		return err
	}
	if !*keep {
		defer func() { _ = os.RemoveAll(work) }() // a leftover temporary folder does not change the figures
	}
	tools := filepath.Join(work, "tools")
	for _, p := range []string{"./scripts/bench/baseline", "./scripts/bench/naive"} {
		if err := build(".", p, tools); err != nil {
			return err
		}
	}
	this, err := buildStack(".", filepath.Join(work, "this"))
	if err != nil {
		return err
	}
	rows, err := measure(filepath.Join(work, "this"), this, tools)
	if err != nil {
		return err
	}
	if *compare == "" {
		printTable(rows)
		return nil
	}
	other, err := buildStack(*compare, filepath.Join(work, "other"))
	if err != nil {
		return err
	}
	log.Printf("the same rows on the build of %s", *compare)
	otherRows, err := measure(filepath.Join(work, "other"), other, tools)
	if err != nil {
		return err
	}
	printTable(rows)
	fmt.Printf("\n%s\n", *compare)
	printTable(otherRows)
	printSideBySide(rows, otherRows)
	return nil
}

// build compiles the program at pkg of the module in src into the folder out.
func build(src, pkg, out string) error {
	log.Printf("building %s of %s", pkg, src)
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", out+"/", pkg)
	cmd.Dir = src
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s of %s: %w", pkg, src, err)
	}
	return nil
}

// buildStack builds the api and worker of the module in src into work/bin.
func buildStack(src, work string) (string, error) {
	bin := filepath.Join(work, "bin")
	for _, p := range []string{"./api", "./worker"} {
		if err := build(src, p, bin); err != nil {
			return "", err
		}
	}
	return bin, nil
}

// measure starts the stack built into bin, with its data under work, and measures every row.
func measure(work, bin, tools string) ([]row, error) {
	data := filepath.Join(work, "data")
	apiArgs := []string{"-standalone", "-workers", "0", "-data", data, "-listen", "127.0.0.1:0"}
	if a := os.Getenv("BENCH_PPROF"); a != "" {
		apiArgs = append(apiArgs, "-pprof", a) // profile the stack while it runs
	}
	api := start(filepath.Join(bin, "api"), apiArgs...)
	defer api.stop()
	info, err := waitInfo(filepath.Join(data, "standalone.json"))
	if err != nil {
		return nil, err
	}
	base := info.BaseURL
	if err := waitReady(base + "/readyz"); err != nil {
		return nil, err
	}
	baseline := start(filepath.Join(tools, "baseline"), "-data", filepath.Join(work, "baseline"))
	defer baseline.stop()
	baseURL, err := baseline.firstLine()
	if err != nil {
		return nil, err
	}
	tok, err := token(base, info)
	if err != nil {
		return nil, err
	}
	c := newClient(base, tok, info.PlatformURL)
	worker := func(args ...string) *proc {
		return start(filepath.Join(bin, "worker"), append([]string{"-config", filepath.Join(data, "worker.yaml")}, args...)...)
	}
	var rows []row
	// With BENCH_PPROF set, each timed load of the stack is profiled (CPU) into bench-profiles/.
	profile := func(name string) func() { return profileAt(os.Getenv("BENCH_PPROF"), name, *duration) }
	// With BENCH_PPROF set, heap(name) keeps the stack's heap profile as bench-profiles/name.pprof
	// and name.txt (with the runtime's memory statistics).
	heap := func(name string) {
		if addr := os.Getenv("BENCH_PPROF"); addr != "" {
			for file, q := range map[string]string{name + ".pprof": "", name + ".txt": "?debug=1"} {
				if err := saveURL("http://"+addr+"/debug/pprof/heap"+q, filepath.Join("bench-profiles", file)); err != nil {
					log.Printf("heap profile %s: %v", file, err)
				}
			}
		}
	}

	if *only == "batch" {
		rows, err := batchRows(c, api, worker, profile, 0, info, data, tools)
		if err != nil {
			return nil, err
		}
		return rows, nil
	}

	// Lookups of the newest records with 2,000 stored, one caller.
	w := worker()
	first, err := c.pushN(2000, 64)
	if err != nil {
		return nil, err
	}
	if err := c.waitAllDelivered(len(first), first); err != nil {
		return nil, err
	}
	p50small, err := c.sequentialP50(first)
	if err != nil {
		return nil, err
	}
	log.Printf("one caller, newest of %d records: p50 %s", len(first), p50small)
	api.logRSS("the first 2,000")
	w.stop()
	if *only == "lookup" {
		return []row{repeatedLookups(c, api, first)}, nil
	}

	// Push accept, front end alone, against the baseline, in turns.
	body := pushBody()
	log.Printf("push accept: warming up")
	c.load(2*time.Second, 256, func(int) (int, error) { return c.push(body) })
	baselineLoad := func() (int, error) { return post(c.http, "http://"+baseURL+"/push", "", body) }
	load(2*time.Second, 256, func(int) (int, error) { return baselineLoad() })
	// In turns, twice each, so that neither side gains from running first or last.
	var queued idList
	var accs, bls []*result
	for round := range 2 {
		log.Printf("push accept: stack, round %d", round+1)
		wait := func() {}
		if round == 0 {
			wait = profile("accept")
		}
		cpu0 := api.cpu()
		accs = append(accs, c.load(*duration/2, 256, func(int) (int, error) {
			id, st, err := c.pushID(body)
			if err == nil && st == 200 {
				queued.add(id)
			}
			return st, err
		}))
		a := accs[len(accs)-1]
		log.Printf("push accept: the stack used %s of processor per push", (api.cpu()-cpu0)/time.Duration(max(a.n, 1)))
		wait()
		log.Printf("push accept: baseline, round %d", round+1)
		cpu0 = baseline.cpu()
		bls = append(bls, load(*duration/2, 256, func(int) (int, error) { return baselineLoad() }))
		b := bls[len(bls)-1]
		log.Printf("push accept: the baseline used %s of processor per push", (baseline.cpu()-cpu0)/time.Duration(max(b.n, 1)))
	}
	acc, bl := merge(accs), merge(bls)
	api.logRSS("push accept")
	ratio := acc.rate() / bl.rate()
	rows = append(rows, row{
		name:   "push accept, 256 concurrent, front end alone, vs the naive baseline",
		figure: fmt.Sprintf("%.0f/s p99 %s vs %.0f/s p99 %s: %.2f×, p99 %.2f×", acc.rate(), ms(acc.p(99)), bl.rate(), ms(bl.p(99)), ratio, float64(acc.p(99))/float64(bl.p(99))),
		goal:   "≥ 0.8× req/s, p99 ≤ 1.5× the baseline's",
		met:    ratio >= 0.8 && float64(acc.p(99)) <= 1.5*float64(bl.p(99)),
	})

	if *only == "accept" {
		return rows, nil
	}

	// Lookups of queued pushes: deliveries held (no worker runs).
	ids := queued.all()
	half := ids[:len(ids)/2]
	log.Printf("lookups of queued pushes (%d held)", len(ids))
	wait := profile("lookup-queued")
	cpuQ := cpuSplit(api)
	lq := c.load(*duration, 64, func(int) (int, error) {
		return c.lookupState(half[rand.IntN(len(half))], "queued")
	})
	wait()
	cpuQ("queued lookups", "request", lq.n)
	api.logRSS("queued lookups")
	rows = append(rows, row{
		name:   fmt.Sprintf("lookups of queued ucsIds (%d held), 64 callers", len(ids)),
		figure: fmt.Sprintf("%.0f/s p99 %s", lq.rate(), ms(lq.p(99))),
		goal:   "≥ 5,000/s", met: lq.rate() >= 5000,
	})

	// Deliver everything, and push more until the store holds the records asked for.
	w = worker()
	defer func() { w.stop() }()
	total := len(first) + len(ids)
	var more []string
	if total < *records {
		log.Printf("pushing %d more", *records-total)
		more, err = c.pushN(*records-total, 256)
		if err != nil {
			return nil, err
		}
		total += len(more)
	}
	log.Printf("waiting for %d deliveries", total)
	if err := c.waitAllDelivered(total, append(slices.Clone(ids), more...)); err != nil {
		return nil, err
	}

	api.logRSS("deliveries")
	// The stack's memory is near its peak now: the delivery receipts have just caught up.
	heap("heap-deliveries")
	// Lookups of distinct delivered pushes, none looked up before.
	// each looks every one of ids up once, in random order, from 64 callers.
	each := func(profileName string, ids []string) *result {
		ids = slices.Clone(ids)
		rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		var next atomic.Int64
		defer profile(profileName)()
		return c.load(*duration, 64, func(int) (int, error) {
			i := next.Add(1) - 1
			if int(i) >= len(ids) {
				return 0, errDone
			}
			return c.lookupState(ids[i], "delivered")
		})
	}
	fresh := append(slices.Clone(ids[len(ids)/2:]), more...)
	log.Printf("lookups of delivered pushes (%d records, %d never looked up)", total, len(fresh))
	cpu := cpuSplit(api)
	ld := each("lookup-delivered", fresh)
	cpu("distinct delivered lookups", "request", ld.n)
	rows = append(rows, row{
		name:   fmt.Sprintf("lookups of distinct delivered ucsIds, %d records, 64 callers", total),
		figure: fmt.Sprintf("%.0f/s p99 %s", ld.rate(), ms(ld.p(99))),
		goal:   "≥ 5,000/s, p99 ≤ 50 ms", met: ld.rate() >= 5000 && ld.p(99) <= 50*time.Millisecond,
	})

	// The newest records at this size, one caller.
	last, err := c.pushN(2000, 64)
	if err != nil {
		return nil, err
	}
	if err := c.waitAllDelivered(total+len(last), last); err != nil {
		return nil, err
	}
	p50big, err := c.sequentialP50(last)
	if err != nil {
		return nil, err
	}
	growth := float64(p50big) / float64(p50small)
	rows = append(rows, row{
		name:   fmt.Sprintf("one caller's lookup p50 of the newest records, %d records ÷ %d", total+len(last), len(first)),
		figure: fmt.Sprintf("%s ÷ %s = %.2f", us(p50big), us(p50small), growth),
		goal:   "≤ 1.3", met: growth <= 1.3,
	})

	rows = append(rows, repeatedLookups(c, api, first))

	heap("heap")
	peak, err := api.peakRSS()
	if err != nil {
		return nil, err
	}
	rows = append(rows, row{
		name: "peak RSS of the standalone process through these loads", figure: fmt.Sprintf("%d MB", peak>>20),
		goal: "≤ 250 MB", met: peak <= 250<<20,
	})

	w.stop()
	batch, err := batchRows(c, api, worker, profile, total+len(last), info, data, tools)
	if err != nil {
		return nil, err
	}
	rows = append(rows, batch...)

	// The same from the store: the oldest deliveries, whose announced results the front end's
	// memory no longer holds (it keeps the newest 100,000). Not a row of the goals: it shows
	// what a lookup costs when memory does not answer.
	old := ids[:len(ids)/4]
	log.Printf("lookups of the oldest delivered pushes (%d), from the store", len(old))
	ls := each("lookup-store", old)
	rows = append(rows, row{
		name:   fmt.Sprintf("(for comparison) lookups of the oldest %d delivered ucsIds, past the front end's memory: from the store", len(old)),
		figure: fmt.Sprintf("%.0f/s p99 %s", ls.rate(), ms(ls.p(99))),
		goal:   "(none)", met: true,
	})

	return rows, nil
}

// repeatedLookups measures lookups of the first 1,000 of delivered, over and over.
func repeatedLookups(c *client, api *proc, delivered []string) row {
	hot := delivered[:1000]
	cpu := cpuSplit(api)
	defer profileAt(os.Getenv("BENCH_PPROF"), "lookup-repeated", *duration)()
	lr := c.load(*duration, 64, func(int) (int, error) { return c.lookupState(hot[rand.IntN(len(hot))], "delivered") })
	cpu("repeated lookups", "request", lr.n)
	return row{
		name:   "repeated lookups of 1,000 delivered ucsIds, 64 callers",
		figure: fmt.Sprintf("%.0f/s p99 %s", lr.rate(), ms(lr.p(99))),
		goal:   "≥ 20,000/s", met: lr.rate() >= 20000,
	}
}

// cpuSplit starts counting the processor used by the stack and by this load generator; the
// function returned logs each one's share per unit counted (a request, a message).
func cpuSplit(api *proc) func(what, unit string, n int) {
	a0, s0 := api.cpu(), selfCPU()
	return func(what, unit string, n int) {
		n = max(n, 1)
		log.Printf("%s: per %s, the stack used %s of processor and the load generator %s",
			what, unit, (api.cpu()-a0)/time.Duration(n), (selfCPU()-s0)/time.Duration(n))
	}
}

// selfCPU is the processor time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// printTable prints the rows measured as a Markdown table.
func printTable(rows []row) {
	fmt.Printf("\n%s, %d cores, %s\n\n", runtime.Version(), runtime.NumCPU(), time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Println("| row | figure | goal | met |")
	fmt.Println("|---|---|---|---|")
	for _, r := range rows {
		m := "not met"
		switch {
		case r.goal == "(none)":
			m = "—"
		case r.met:
			m = "met"
		}
		fmt.Printf("| %s | %s | %s | %s |\n", r.name, r.figure, r.goal, m)
	}
}

// printSideBySide prints the rows of this build and of the compared one together, with the ratio
// of their rates where a figure starts with one.
func printSideBySide(this, other []row) {
	fmt.Println("\n| row | this build | compared build | goal |")
	fmt.Println("|---|---|---|---|")
	for i, r := range this {
		o := "—"
		if i < len(other) {
			o = other[i].figure
		}
		fmt.Printf("| %s | %s | %s | %s |\n", r.name, r.figure, o, r.goal)
	}
}

// batchRows measures the batch rows: batch push from the front end alone, the end to end
// delivery of that batch through two worker processes, their memory, and batch lookups. The
// stack holds stored delivered records when it begins, and no worker runs.
func batchRows(c *client, api *proc, worker func(...string) *proc, profile func(string) func(), stored int,
	info standaloneInfo, data, tools string) ([]row, error) {
	var rows []row
	// Batch push, front end alone: 100,000 messages in requests of 1,000 from 16 callers,
	// held in the queue for the end-to-end row.
	log.Printf("batch push: warming up")
	// The platform's own count, rather than stored: pushes whose answer the load generator
	// missed (a time-out) were taken too.
	s0, err := c.simStats()
	if err != nil {
		return nil, err
	}
	if _, err := c.pushBatches(16_000, 16); err != nil {
		return nil, err
	}
	w := worker()
	if err := c.waitDelivered(int(max(s0.Accepted, int64(stored))) + 16_000); err != nil {
		return nil, err
	}
	w.stop()
	before, err := c.simStats()
	if err != nil {
		return nil, err
	}
	const e2eN = 100_000
	waitProfile := profile("batch")
	cpu := cpuSplit(api)
	t0 := time.Now()
	batchIDs, err := c.pushBatches(e2eN, 16)
	if err != nil {
		return nil, err
	}
	bt := time.Since(t0)
	cpu("batch push", "message", len(batchIDs))
	waitProfile()
	bRate := float64(len(batchIDs)) / bt.Seconds()
	rows = append(rows, row{
		name:   "batch push, 1,000 per request, 16 concurrent, front end alone",
		figure: fmt.Sprintf("%d messages in %s: %.0f messages/s", len(batchIDs), bt.Round(time.Millisecond), bRate),
		goal:   "≥ 100,000 messages/s", met: bRate >= 100_000,
	})
	log.Printf("batch push: a bare nats.go client publishing the same messages in atomic batches of 1,000")
	bare, err := bareBatches(info.NATSURL, e2eN, 16, true, false)
	if err != nil {
		return nil, err
	}
	// The same on a stream without the push stream's byte bound: with DiscardNew, a bound
	// makes the server add up the batch's staged messages for each message it stages.
	unbounded, err := bareBatches(info.NATSURL, e2eN, 16, false, false)
	if err != nil {
		return nil, err
	}
	// The same by fast ingest, the design the front end does not use (a failure leaves part
	// of a batch stored): for comparison.
	fast, err := bareBatches(info.NATSURL, e2eN, 16, true, true)
	if err != nil {
		return nil, err
	}
	rows = append(rows, row{
		name: "batch accept, 1,000 per request, 16 concurrent, vs a bare nats.go client publishing the same messages the same way (atomic batches of 1,000, 16 at once, to a stream with the push stream's limits)",
		figure: fmt.Sprintf("%.0f vs %.0f messages/s: %.2f× (bare, to a stream without a byte bound: %.0f/s, %.2f×)",
			bRate, bare, bRate/bare, unbounded, bRate/unbounded),
		goal: "≥ 0.8×", met: bRate/bare >= 0.8,
	})
	rows = append(rows, row{
		name:   "(for comparison) a bare nats.go client publishing the same messages by fast ingest (allow_batched), batches of 1,000, 16 at once, to a stream with the push stream's limits",
		figure: fmt.Sprintf("%.0f messages/s: %.2f× the bare atomic batches", fast, fast/bare),
		goal:   "(none)", met: true,
	})

	// End to end: those messages through two worker processes to a platform answering in 50 ms.
	if err := c.setPlatformLatency("50ms"); err != nil {
		return nil, err
	}
	log.Printf("end to end: %d messages through 2 worker processes, platform latency 50 ms", len(batchIDs))
	t0 = time.Now()
	apiCPU := api.cpu()
	defer func() { log.Printf("end to end: the stack used %s of processor", api.cpu()-apiCPU) }()
	var ws []*proc
	if addr := os.Getenv("BENCH_PPROF"); addr != "" {
		// Profile the stack and the first worker for 20 s once delivery is under way.
		ws = []*proc{worker("-pprof", "127.0.0.1:6071"), worker()}
		time.Sleep(5 * time.Second)
		a, b := profileAt(addr, "e2e", 20*time.Second), profileAt("127.0.0.1:6071", "e2e-worker", 20*time.Second)
		defer a()
		defer b()
	} else {
		ws = []*proc{worker(), worker()}
	}
	if err := c.waitAllDelivered(int(before.Accepted)+len(batchIDs), batchIDs); err != nil {
		return nil, err
	}
	et := time.Since(t0)
	var rss []string
	rssOK := true
	for _, p := range ws {
		r, err := p.peakRSS()
		if err != nil {
			return nil, err
		}
		rss = append(rss, fmt.Sprintf("%d MB", r>>20))
		rssOK = rssOK && r <= 150<<20
		log.Printf("end to end: a worker used %s of processor", p.cpu())
		p.stop()
	}
	after, err := c.simStats()
	if err != nil {
		return nil, err
	}
	lost, notDelivered, err := c.checkDelivered(batchIDs)
	if err != nil {
		return nil, err
	}
	sentTwice := after.Deduplicated - before.Deduplicated
	accepted := after.Accepted - before.Accepted
	eRate := float64(len(batchIDs)) / et.Seconds()
	rows = append(rows, row{
		name: "end to end: 100,000 messages through 2 worker processes to a platform answering in 50 ms, results and receipts written",
		figure: fmt.Sprintf("%.0f delivered/s (%s); platform took %d, repeated sends %d; lost %d, not delivered %d",
			eRate, et.Round(time.Millisecond), accepted, sentTwice, lost, notDelivered),
		goal: "≥ 5,000 delivered/s; 0 lost, 0 sent twice",
		met:  eRate >= 5000 && lost == 0 && notDelivered == 0 && sentTwice == 0 && accepted == int64(len(batchIDs)),
	})
	rows = append(rows, row{
		name: "RSS of each worker process through the end-to-end row", figure: strings.Join(rss, ", "),
		goal: "≤ 150 MB", met: rssOK,
	})
	log.Printf("end to end: the naive pipeline, %d messages, 2 processes", e2eN)
	naive, err := naivePipeline(info, data, tools, e2eN)
	if err != nil {
		return nil, err
	}
	rows = append(rows, row{
		name:   "end to end vs a naive pipeline (bare pull consumer → HTTP POST to the same simulator → one insert per result → ack; 2 processes), 100,000 messages, platform 50 ms",
		figure: fmt.Sprintf("%.0f delivered/s vs %.0f/s: %.2f×", eRate, naive, eRate/naive),
		goal:   "≥ 0.8×", met: eRate/naive >= 0.8,
	})

	// Batch lookup: 1,000 ids a request, 16 callers, over the delivered batch.
	log.Printf("batch lookups, %d records", stored+16_000+len(batchIDs))
	blk := c.load(*duration, 16, func(int) (int, error) {
		i := rand.IntN(len(batchIDs) - 1000)
		return c.results(batchIDs[i:i+1000], "delivered")
	})
	lRate := blk.rate() * 1000
	rows = append(rows, row{
		name:   fmt.Sprintf("batch lookup, 1,000 ids per request, 16 callers, %d records", stored+16_000+len(batchIDs)),
		figure: fmt.Sprintf("%.0f results/s, p99 %s a request", lRate, ms(blk.p(99))),
		goal:   "≥ 50,000 results/s", met: lRate >= 50_000,
	})

	// Batch lookup of ucsIds the service never gave out (ULIDs of the past day): 1,000 a
	// request, 16 callers. Each costs the store one read.
	log.Printf("batch lookups of unknown ucsIds")
	ulk := c.load(*duration, 16, func(int) (int, error) {
		ids := make([]string, 1000)
		for i := range ids {
			ids[i] = push.NewID(time.Now().Add(-rand.N(24 * time.Hour)))
		}
		return c.results(ids, "not_found")
	})
	uRate := ulk.rate() * 1000
	rows = append(rows, row{
		name:   "batch lookup of unknown ucsIds, 1,000 per request, 16 callers",
		figure: fmt.Sprintf("%.0f results/s, p99 %s a request", uRate, ms(ulk.p(99))),
		goal:   "every request answered, p99 ≤ 10 s", met: ulk.errs == 0 && ulk.p(99) <= 10*time.Second,
	})

	return rows, nil
}

// profileAt takes a CPU profile of the program serving Go's profiles at addr, for d, into
// bench-profiles/name.pprof; the function returned waits for it. Without addr it does nothing.
func profileAt(addr, name string, d time.Duration) func() {
	if addr == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds()))
		if err := saveURL(url, filepath.Join("bench-profiles", name+".pprof")); err != nil {
			log.Printf("profile %s: %v", name, err)
		}
	}()
	return func() { <-done }
}

var errDone = errors.New("no more work")

// proc is a child process.
type proc struct {
	cmd *exec.Cmd
	out *bufio.Reader
}

func start(path string, args ...string) *proc {
	cmd := exec.Command(path, args...)
	cmd.Stderr = io.Discard
	if os.Getenv("BENCH_VERBOSE") != "" {
		cmd.Stderr = os.Stderr
	}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		log.Fatalf("start %s: %v", path, err)
	}
	p := &proc{cmd: cmd, out: bufio.NewReader(out)}
	return p
}

func (p *proc) firstLine() (string, error) {
	l, err := p.out.ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, p.out) }()
	return strings.TrimSpace(l), err
}

// stop ends the process gracefully (SIGTERM) and waits for it.
func (p *proc) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// logRSS logs the process's resident memory now and its high-water mark.
func (p *proc) logRSS(phase string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return
	}
	var now, peak string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 {
			switch f[0] {
			case "VmRSS:":
				now = f[1]
			case "VmHWM:":
				peak = f[1]
			}
		}
	}
	log.Printf("  stack memory after %s: RSS %s kB, peak %s kB", phase, now, peak)
}

// peakRSS is the process's high-water mark of resident memory (VmHWM).
func (p *proc) peakRSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}

// cpu is the processor time the process has used so far (user and system), from /proc.
func (p *proc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	user, _ := strconv.ParseInt(f[11], 10, 64)
	sys, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(user+sys) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

type standaloneInfo struct {
	BaseURL     string `json:"base_url"`
	PlatformURL string `json:"platform_url"`
	NATSURL     string `json:"nats_url"`
	MongoDBURI  string `json:"mongodb_uri"`
	Platform    struct {
		AppID  string `json:"appid"`
		Secret string `json:"secret"`
	} `json:"platform"`
	Bindings []struct {
		UserID string `json:"userid"`
		OpenID string `json:"openid"`
	} `json:"bindings"`
	Clients []struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	} `json:"clients"`
}

func waitInfo(path string) (standaloneInfo, error) {
	var info standaloneInfo
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &info) == nil && info.BaseURL != "" {
			return info, nil
		}
		time.Sleep(100 * time.Millisecond) // polling for the file, with a deadline
	}
	return info, errors.New("the stack did not write standalone.json within 2 minutes")
}

func waitReady(u string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if r, err := http.Get(u); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
	return errors.New(u + " not ready within a minute")
}

func token(base string, info standaloneInfo) (string, error) {
	var secret string
	for _, c := range info.Clients {
		if c.ClientID == "demo-app" {
			secret = c.ClientSecret
		}
	}
	r, err := http.PostForm(base+"/v1/token", url.Values{"grant_type": {"client_credentials"}, "client_id": {"demo-app"}, "client_secret": {secret}})
	if err != nil {
		return "", err
	}
	defer r.Body.Close()
	var t struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(r.Body).Decode(&t); err != nil {
		return "", fmt.Errorf("token: %d: %w", r.StatusCode, err)
	}
	if t.AccessToken == "" {
		return "", fmt.Errorf("token: %d without an access token", r.StatusCode)
	}
	return "Bearer " + t.AccessToken, nil
}

func pushBody() string {
	return `{"userId":"2020000001","type":"TDL","data":{"header":"您有一条待办","type":"请假审批","list":"学生请假","step":"辅导员审批","content":"张三的请假申请待您审批","remark":"请尽快处理"}}`
}

type client struct {
	http     *http.Client
	base     string
	tok      string
	platform string
}

func newClient(base, tok, platform string) *client {
	return &client{
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxIdleConns: 1024}},
		base: base, tok: tok, platform: platform,
	}
}

func post(h *http.Client, u, tok, body string) (int, error) {
	st, _, err := do(h, "POST", u, tok, body)
	return st, err
}

func do(h *http.Client, method, u, tok, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok != "" {
		req.Header.Set("Authorization", tok)
	}
	r, err := h.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	return r.StatusCode, b, err
}

func (c *client) push(body string) (int, error) {
	return post(c.http, c.base+"/v1/infra/notification/mp", c.tok, body)
}

var ucsIDField = []byte(`"ucsId":"`)

func (c *client) pushID(body string) (string, int, error) {
	st, b, err := do(c.http, "POST", c.base+"/v1/infra/notification/mp", c.tok, body)
	if err != nil || st != 200 {
		return "", st, err
	}
	i := bytes.Index(b, ucsIDField)
	if i < 0 || len(b) < i+len(ucsIDField)+26 {
		return "", st, fmt.Errorf("no ucsId in %s", b)
	}
	return string(b[i+len(ucsIDField) : i+len(ucsIDField)+26]), st, nil
}

// lookupState looks id up and counts an answer with another state as an error.
func (c *client) lookupState(id, want string) (int, error) {
	st, b, err := do(c.http, "GET", c.base+"/v1/infra/notification/mp/"+id, c.tok, "")
	if err != nil {
		return st, err
	}
	if st == 200 && !bytes.Contains(b, []byte(`"state":"`+want+`"`)) {
		return st, fmt.Errorf("%s is not %s: %s", id, want, b)
	}
	return st, nil
}

// pushN pushes n messages from conc goroutines and returns their ucsIds in acceptance order.
func (c *client) pushN(n, conc int) ([]string, error) {
	body := pushBody()
	var ids idList
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				id, st, err := c.pushID(body)
				if err == nil && st != 200 {
					err = fmt.Errorf("push: status %d", st)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				ids.add(id)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, err
	}
	out := ids.all()
	slices.Sort(out) // ULIDs sort by acceptance time
	return out, nil
}

type simStats struct {
	Accepted           int64 `json:"accepted"`
	Deduplicated       int64 `json:"deduplicated"`
	CallbacksDelivered int64 `json:"callbacks_delivered"`
	CallbacksFailed    int64 `json:"callbacks_failed"`
	CallbacksPending   int64 `json:"callbacks_pending"`
}

// waitDelivered waits until the platform accepted n messages and its receipts were all pushed
// back to the service.
// waitAllDelivered waits until the platform took n messages and reported them, and every push
// of ids looks up as delivered: the front end answers the platform's receipts once they are
// kept, and applies them a moment later.
func (c *client) waitAllDelivered(n int, ids []string) error {
	if err := c.waitDelivered(n); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		lost, notDelivered, err := c.checkDelivered(ids)
		if err == nil && lost == 0 && notDelivered == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d pushes not delivered within 10 minutes (%d unknown, %w)", notDelivered, len(ids), lost, err)
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
}

// waitDelivered waits until the platform took n messages and reported each to the service.
func (c *client) waitDelivered(n int) error {
	deadline := time.Now().Add(10 * time.Minute)
	var s simStats
	for time.Now().Before(deadline) {
		_, b, err := do(c.http, "GET", c.platform+"/sim/stats", "", "")
		if err == nil && json.Unmarshal(b, &s) == nil &&
			s.Accepted >= int64(n) && s.CallbacksPending == 0 && s.CallbacksDelivered+s.CallbacksFailed >= s.Accepted {
			if s.CallbacksFailed > 0 {
				return fmt.Errorf("%d receipts were refused by the service", s.CallbacksFailed)
			}
			return nil
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
	return fmt.Errorf("not delivered within 10 minutes: %+v, want %d", s, n)
}

func (c *client) simStats() (simStats, error) {
	var s simStats
	_, b, err := do(c.http, "GET", c.platform+"/sim/stats", "", "")
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	return s, err
}

func (c *client) setPlatformLatency(d string) error {
	st, b, err := do(c.http, "POST", c.platform+"/sim/faults", "", `{"latency":"`+d+`"}`)
	if err == nil && st != 200 {
		err = fmt.Errorf("set faults: %d %s", st, b)
	}
	return err
}

// pushBatches pushes n messages in batches of 1,000 from conc callers and returns the ucsIds.
func (c *client) pushBatches(n, conc int) ([]string, error) {
	items := make([]string, 1000)
	for i := range items {
		items[i] = pushBody()
	}
	body := `{"messages":[` + strings.Join(items, ",") + `]}`
	var ids idList
	var left atomic.Int64
	left.Store(int64(n / 1000))
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				st, b, err := do(c.http, "POST", c.base+"/v1/infra/notification/mp/batch", c.tok, body)
				if err == nil && st != 200 {
					err = fmt.Errorf("batch: status %d %.200s", st, b)
				}
				var a struct {
					Data struct {
						Accepted int `json:"accepted"`
						Results  []struct {
							UcsID string `json:"ucsId"`
						} `json:"results"`
					} `json:"data"`
				}
				if err == nil {
					err = json.Unmarshal(b, &a)
				}
				if err == nil && a.Data.Accepted != 1000 {
					err = fmt.Errorf("batch: %d accepted", a.Data.Accepted)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				for _, r := range a.Data.Results {
					ids.add(r.UcsID)
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, err
	}
	return ids.all(), nil
}

// states looks ids up with one batch lookup and returns each one's state.
func (c *client) states(ids []string) (int, []string, error) {
	b, _ := json.Marshal(map[string]any{"ucsIds": ids})
	st, out, err := do(c.http, "POST", c.base+"/v1/infra/notification/mp/results", c.tok, string(b))
	if err != nil || st != 200 {
		return st, nil, err
	}
	var a struct {
		Data struct {
			Results []struct {
				State string `json:"state"`
			} `json:"results"`
		} `json:"data"`
	}
	if err := json.Unmarshal(out, &a); err != nil {
		return st, nil, err
	}
	states := make([]string, len(a.Data.Results))
	for i, r := range a.Data.Results {
		states[i] = r.State
	}
	return st, states, nil
}

// results looks ids up with one batch lookup and counts any other state than want as an error.
func (c *client) results(ids []string, want string) (int, error) {
	st, states, err := c.states(ids)
	if err != nil || st != 200 {
		return st, err
	}
	n := 0
	for _, s := range states {
		if s == want {
			n++
		}
	}
	if n != len(ids) {
		return st, fmt.Errorf("%d of %d results are %s", n, len(ids), want)
	}
	return st, nil
}

// checkDelivered looks every id up in batches: how many are unknown (lost) and how many are
// known but not delivered.
func (c *client) checkDelivered(ids []string) (lost, notDelivered int, err error) {
	for i := 0; i < len(ids); i += 1000 {
		st, states, err := c.states(ids[i:min(i+1000, len(ids))])
		if err != nil {
			return 0, 0, fmt.Errorf("results: %w", err)
		}
		if st != http.StatusOK {
			return 0, 0, fmt.Errorf("results: HTTP %d", st)
		}
		for _, s := range states {
			switch s {
			case "not_found":
				lost++
			case "delivered":
			default:
				notDelivered++
			}
		}
	}
	return lost, notDelivered, nil
}

// sequentialP50 looks every id up once, one after another, and returns the median latency.
func (c *client) sequentialP50(ids []string) (time.Duration, error) {
	lat := make([]time.Duration, 0, len(ids))
	for _, id := range ids {
		t0 := time.Now()
		if _, err := c.lookupState(id, "delivered"); err != nil {
			return 0, err
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return lat[len(lat)/2], nil
}

func (c *client) load(d time.Duration, conc int, f func(int) (int, error)) *result {
	return load(d, conc, f)
}

// result is what a timed load measured.
type result struct {
	n, errs int
	elapsed time.Duration
	lat     []time.Duration
	first   error
}

func (r *result) rate() float64 { return float64(r.n) / r.elapsed.Seconds() }

func (r *result) p(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, int(float64(len(r.lat))*q/100))]
}

// load calls f from conc goroutines for d (or until f says errDone) and records each call's
// latency; a call that fails or answers anything but 200 counts as an error.
func load(d time.Duration, conc int, f func(int) (int, error)) *result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	res := &result{}
	var wg sync.WaitGroup
	t0 := time.Now()
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			errs := 0
			var first error
			for ctx.Err() == nil {
				s := time.Now()
				st, err := f(g)
				if errors.Is(err, errDone) {
					break
				}
				lat = append(lat, time.Since(s))
				if err == nil && st != 200 {
					err = fmt.Errorf("status %d", st)
				}
				if err != nil {
					errs++
					if first == nil {
						first = err
					}
				}
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			res.errs += errs
			if res.first == nil {
				res.first = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(t0)
	res.n = len(res.lat)
	slices.Sort(res.lat)
	if res.errs > 0 {
		log.Printf("  %d of %d calls failed; the first: %v", res.errs, res.n, res.first)
	}
	log.Printf("  %d calls in %s: %.0f/s, p50 %s, p99 %s", res.n, res.elapsed.Round(time.Millisecond), res.rate(), ms(res.p(50)), ms(res.p(99)))
	return res
}

// merge adds the rounds of one load up.
func merge(rs []*result) *result {
	out := &result{}
	for _, r := range rs {
		out.n += r.n
		out.errs += r.errs
		out.elapsed += r.elapsed
		out.lat = append(out.lat, r.lat...)
	}
	slices.Sort(out.lat)
	return out
}

// idList collects ucsIds from many goroutines.
type idList struct {
	mu  sync.Mutex
	ids []string
}

func (l *idList) add(id string) { l.mu.Lock(); l.ids = append(l.ids, id); l.mu.Unlock() }

func (l *idList) all() []string { l.mu.Lock(); defer l.mu.Unlock(); return slices.Clone(l.ids) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

// saveURL writes what a GET of url answers into the file path.
func saveURL(url, path string) error {
	r, err := http.Get(url)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, r.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r.Body); err != nil {
		_ = f.Close() // the copy already failed
		return err
	}
	return f.Close()
}
