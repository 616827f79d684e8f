// Package activity keeps in memory what one front end has seen of the pushes flowing through
// the service since it started: per-minute counts of pushes accepted, sent and finished, the
// end-to-end latency of delivered pushes, failures by reason and the most recent failures. It
// feeds the operations page without a query of the store, which on the embedded FerretDB would
// read whole tables: the front end counts its own accepts and the announcements every front end
// receives (ucs.results.sent and ucs.results.final).
//
// What a Recorder holds is this replica's view: accepts are its own, sends and final results are
// everyone's (each front end hears every announcement), all since it started. Announcements are
// plain NATS and best effort, so a count can fall short of the store's after a disconnection.
package activity

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/campus-it/ucs/pkg/push"
)

// Window is how far back the per-minute series go.
const Window = time.Hour

// slots is the ring of minutes: the window, the minute under way, and room so that the minute
// being reset is never one a reader still shows.
const slots = 64

// Latency buckets grow by a quarter of a power of two from 1 ms: bucket i holds latencies up
// to 2^(i/4) ms, so a percentile read from them is within 19% of the true value, from 1 ms to
// about 12 days (the last bucket takes everything longer).
const latencyBuckets = 80

func bucketOf(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	if ms <= 1 {
		return 0
	}
	return min(int(math.Ceil(4*math.Log2(ms))), latencyBuckets-1)
}

// bucketUpper is the largest latency bucket i holds.
func bucketUpper(i int) time.Duration {
	return time.Duration(math.Pow(2, float64(i)/4) * float64(time.Millisecond))
}

// minute counts one minute. Counters are atomic so that the push path adds without a lock;
// start changes only under Recorder.mu, once the ring comes round to the slot again.
type minute struct {
	start     atomic.Int64 // unix minute this slot counts
	accepted  atomic.Int64
	sent      atomic.Int64
	delivered atomic.Int64
	failed    atomic.Int64
	latency   [latencyBuckets]atomic.Int64
}

// Failure is a push that ended failed.
type Failure struct {
	UcsID, UserID, Type string
	// Reason is the failure as recorded; Kind is its class (see Kind).
	Reason, Kind string
	At           time.Time
}

// Limits of what a Recorder keeps, so that no input grows it without end.
const (
	// RecentFailures is how many failures the recent list keeps, newest first.
	RecentFailures = 50
	// maxKinds bounds the reasons counted apart; later new ones count as "other".
	maxKinds = 64
	// maxReasonRunes bounds a reason as kept: an undecodable message's reason quotes what
	// was put on the queue.
	maxReasonRunes = 300
	// MaxAwaiting bounds the sent messages kept as awaiting their receipt; past it the oldest
	// are no longer counted. maxFinished bounds the msgids of the latest final results.
	MaxAwaiting = 100_000
	maxFinished = 10_000
)

// Recorder counts what the front end sees. A nil *Recorder records nothing.
type Recorder struct {
	now     func() time.Time
	started time.Time
	ring    [slots]minute

	accepted, sent, delivered, failed atomic.Int64
	// awaiting are the msgids of the sends counted here that have no final result yet. A
	// final result of a send not counted here (sent before this front end started) changes
	// nothing. finished are the msgids of the latest final results, so that a send announced
	// after its final result (the two travel apart), or again (a second copy of the message
	// sent under the same client_msg_id), does not wait. Both change under mu.
	awaiting, finished *lru.Cache[int64, struct{}]

	mu     sync.Mutex
	kinds  map[string]int64
	recent []Failure // newest last
}

// New returns a Recorder on the clock now (nil: time.Now).
func New(now func() time.Time) *Recorder {
	if now == nil {
		now = time.Now
	}
	// lru.New fails only for a size below 1.
	awaiting, _ := lru.New[int64, struct{}](MaxAwaiting)
	finished, _ := lru.New[int64, struct{}](maxFinished)
	return &Recorder{now: now, started: now(), kinds: map[string]int64{}, awaiting: awaiting, finished: finished}
}

// slot returns the slot of the minute of t, reset when the ring came round to it.
func (r *Recorder) slot(t time.Time) *minute {
	m := t.Unix() / 60
	s := &r.ring[m%slots]
	if s.start.Load() == m {
		return s
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.start.Load() != m {
		s.accepted.Store(0)
		s.sent.Store(0)
		s.delivered.Store(0)
		s.failed.Store(0)
		for i := range s.latency {
			s.latency[i].Store(0)
		}
		s.start.Store(m)
	}
	return s
}

// Accepted counts n pushes this front end accepted (answered with a ucsId).
func (r *Recorder) Accepted(n int) {
	if r == nil || n <= 0 {
		return
	}
	r.accepted.Add(int64(n))
	r.slot(r.now()).accepted.Add(int64(n))
}

// Sent counts a push the platform accepted, as a worker announced it.
func (r *Recorder) Sent(res push.Result) {
	if r == nil {
		return
	}
	r.sent.Add(1)
	r.slot(r.now()).sent.Add(1)
	if res.MsgID != 0 {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.finished.Contains(res.MsgID) {
			r.awaiting.Add(res.MsgID, struct{}{})
		}
	}
}

// Final counts a final result, as announced. The caller passes each push once.
func (r *Recorder) Final(res push.Result) {
	if r == nil || !res.State.Final() {
		return
	}
	now := r.now()
	s := r.slot(now)
	if res.MsgID != 0 {
		r.mu.Lock()
		r.awaiting.Remove(res.MsgID)
		r.finished.Add(res.MsgID, struct{}{})
		r.mu.Unlock()
	}
	if res.State == push.StateDelivered {
		r.delivered.Add(1)
		s.delivered.Add(1)
		if !res.Accepted.IsZero() && !res.Finished.Before(res.Accepted) {
			s.latency[bucketOf(res.Finished.Sub(res.Accepted))].Add(1)
		}
		return
	}
	r.failed.Add(1)
	s.failed.Add(1)
	reason := res.Reason
	if utf8.RuneCountInString(reason) > maxReasonRunes {
		reason = string([]rune(reason)[:maxReasonRunes]) + "…"
	}
	f := Failure{UcsID: res.UcsID, UserID: res.UserID, Type: res.Type, Reason: reason, Kind: Kind(res.Reason), At: now}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := f.Kind
	if _, ok := r.kinds[k]; !ok && len(r.kinds) >= maxKinds {
		k = "other"
	}
	r.kinds[k]++
	if len(r.recent) == RecentFailures {
		copy(r.recent, r.recent[1:])
		r.recent = r.recent[:RecentFailures-1]
	}
	r.recent = append(r.recent, f)
}

// Kind names the class of a failure reason in a word or two, as the metric
// ucs_delivery_failures_total does: no_binding, not_following, no_template, max_attempts,
// undecodable, a platform errcode ("43004"), or the platform's receipt status ("user block",
// "system failed"). A reason of none of these forms is its own text up to the first colon.
func Kind(reason string) string {
	for _, p := range []struct{ prefix, kind string }{
		{"no binding", "no_binding"}, {"not following", "not_following"}, {"no template", "no_template"},
		{"gave up after", "max_attempts"}, {"undecodable message", "undecodable"},
	} {
		if strings.HasPrefix(reason, p.prefix) {
			return p.kind
		}
	}
	if status, ok := strings.CutPrefix(reason, "failed:"); ok {
		return strings.TrimSpace(status)
	}
	code, _, _ := strings.Cut(reason, " ")
	if code != "" && strings.Trim(strings.TrimPrefix(code, "-"), "0123456789") == "" && code != "-" {
		return code
	}
	head, _, _ := strings.Cut(reason, ":")
	head = strings.TrimSpace(head)
	if utf8.RuneCountInString(head) > 40 {
		head = string([]rune(head)[:40]) + "…"
	}
	if head == "" {
		return "unknown"
	}
	return head
}

// Minute is one minute of the series.
type Minute struct {
	Start                             time.Time
	Accepted, Sent, Delivered, Failed int64
	// P50 and P95 are the end-to-end latencies (acceptance to the platform's receipt) of the
	// pushes delivered in the minute; zero when none was.
	P50, P95 time.Duration
}

// KindCount is how many failures one kind of reason caused.
type KindCount struct {
	Kind  string
	Count int64
}

// Snapshot is what a Recorder has seen.
type Snapshot struct {
	// Since is when the Recorder started: every count is from then on.
	Since time.Time
	// Accepted, Sent, Delivered and Failed are totals; AwaitingReceipt is what was sent since
	// the start and has no final result yet (at most MaxAwaiting).
	Accepted, Sent, Delivered, Failed, AwaitingReceipt int64
	// Minutes are the last hour, oldest first, the minute under way last.
	Minutes []Minute
	// Kinds are the failures by kind, most first.
	Kinds []KindCount
	// Recent are the latest failures, newest first.
	Recent []Failure
}

// Snapshot returns what the Recorder has seen; the zero Snapshot for nil.
func (r *Recorder) Snapshot() Snapshot {
	if r == nil {
		return Snapshot{}
	}
	now := r.now()
	snap := Snapshot{
		Since: r.started, Accepted: r.accepted.Load(), Sent: r.sent.Load(),
		Delivered: r.delivered.Load(), Failed: r.failed.Load(),
	}
	snap.AwaitingReceipt = int64(r.awaiting.Len())
	last := now.Unix() / 60
	n := int64(Window / time.Minute)
	for m := last - n + 1; m <= last; m++ {
		out := Minute{Start: time.Unix(m*60, 0)}
		s := &r.ring[m%slots]
		if s.start.Load() == m {
			out.Accepted, out.Sent = s.accepted.Load(), s.sent.Load()
			out.Delivered, out.Failed = s.delivered.Load(), s.failed.Load()
			var hist [latencyBuckets]int64
			for i := range hist {
				hist[i] = s.latency[i].Load()
			}
			out.P50, out.P95 = percentile(hist[:], 0.50), percentile(hist[:], 0.95)
		}
		snap.Minutes = append(snap.Minutes, out)
	}
	r.mu.Lock()
	for k, c := range r.kinds {
		snap.Kinds = append(snap.Kinds, KindCount{Kind: k, Count: c})
	}
	snap.Recent = slices.Clone(r.recent)
	r.mu.Unlock()
	slices.Reverse(snap.Recent)
	slices.SortFunc(snap.Kinds, func(a, b KindCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Kind, b.Kind))
	})
	return snap
}

// percentile reads the q-quantile from a histogram as its bucket's upper bound; zero when the
// histogram is empty.
func percentile(hist []int64, q float64) time.Duration {
	var total int64
	for _, c := range hist {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i, c := range hist {
		seen += c
		if seen >= rank {
			return bucketUpper(i)
		}
	}
	return bucketUpper(len(hist) - 1)
}
