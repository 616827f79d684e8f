package natskv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Rate is the policy of one token bucket: PerSecond tokens come back every second, and the
// bucket holds at most Burst of them.
type Rate struct {
	PerSecond float64
	Burst     int
}

// Updater changes a key of a key-value bucket atomically; *Counters and *Mirror implement it.
type Updater interface {
	Update(ctx context.Context, key string, change func(old []byte) ([]byte, error)) ([]byte, error)
}

// TokenBuckets are token buckets shared by every replica through a NATS key-value bucket, one
// bucket per key: the token endpoint's rate limits (per client, per address), the slowing of
// an address that fails to authenticate, and the workers' send budget all use this one type.
//
// A replica does not ask the shared bucket for every token: it takes Lease's worth of tokens
// at a time (a lease) with one compare-and-set, and hands them out from memory for at most
// Keep (a second by default); tokens it did not use by then are gone, so an idle replica
// cannot save them up.
// When the shared bucket is empty, the replica remembers until when, and answers from memory
// until then. So a key costs a round trip to NATS a few times a second however busy it is, and
// the limit holds across replicas, give or take one lease per replica.
//
// When the shared bucket is empty, the replica asks again once a lease's worth is back, and a
// try that finds it empty writes nothing: an empty bucket costs reads, not writes, and a busy
// key is written about once a lease however many replicas share it.
//
// Replicas refill the shared bucket by their own clocks, which must agree (NTP): a bucket's
// time is not moved back by less than maxAhead, so that no interval is refilled twice. A
// bucket time further ahead of a replica's clock than that (a replica whose clock ran fast,
// perhaps gone since) is not believed: the bucket's time becomes the replica's, or every
// other replica would refill nothing until its clock caught up.
//
// Memory: at most Keys leases are kept (least recently used first out); a lease is a key and
// a few numbers, so with keys of at most 80 bytes (the keys callers build are) the leases take
// at most Keys × 350 bytes (35 MB at the default 100,000; measured 269 bytes a lease),
// whatever the callers send.
// A key whose lease was dropped is read again from the shared bucket: nothing is lost but a
// round trip.
type TokenBuckets struct {
	kv    Updater
	now   func() time.Time
	lease time.Duration
	keep  time.Duration

	mu     sync.Mutex
	leases *lru.Cache[string, *lease]
}

// TokenBucketsConfig configures NewTokenBuckets.
type TokenBucketsConfig struct {
	// Lease is how much of a second's worth of tokens a replica takes at a time: 100 ms takes
	// a tenth. Default 100 ms; more means fewer round trips and a coarser limit.
	Lease time.Duration
	// Keys bounds the leases kept in memory. Default 100,000.
	Keys int
	// Keep is how long tokens taken stay usable here; the rest of a lease lapses then.
	// Default a second. A replica's tokens of the last Keep add to what the shared bucket
	// hands out, so that within any second the replicas together may spend up to Keep's worth
	// more than the rate: a limit that must hold within each second (the send budget) keeps
	// its tokens no longer than a lease.
	Keep time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// lease is the part of one shared bucket this replica took.
type lease struct {
	tokens     int
	until      time.Time // the tokens lapse then
	emptyUntil time.Time // the shared bucket has no token before then
	refill     sync.Mutex
}

// NewTokenBuckets keeps token buckets in kv.
func NewTokenBuckets(kv Updater, c TokenBucketsConfig) *TokenBuckets {
	if c.Lease <= 0 {
		c.Lease = 100 * time.Millisecond
	}
	if c.Keys <= 0 {
		c.Keys = 100_000
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Keep <= 0 {
		c.Keep = time.Second
	}
	leases, _ := lru.New[string, *lease](c.Keys) // errors only for a size below 1
	return &TokenBuckets{kv: kv, now: c.Now, lease: c.Lease, keep: c.Keep, leases: leases}
}

// Leases is how many leases are in memory now; never more than TokenBucketsConfig.Keys.
func (t *TokenBuckets) Leases() int { return t.leases.Len() }

// Take takes one token from key's bucket of rate r. Without a token it says how long until
// there is one. An error means the shared bucket could not be read: the caller decides
// whether that lets the request through.
func (t *TokenBuckets) Take(ctx context.Context, key string, r Rate) (ok bool, wait time.Duration, err error) {
	l, ok, wait := t.fromMemory(key)
	if ok || wait > 0 {
		return ok, wait, nil
	}
	// One refill per key at a time: the others wait for it and share its lease.
	l.refill.Lock()
	defer l.refill.Unlock()
	if _, ok, wait := t.fromMemory(key); ok || wait > 0 {
		return ok, wait, nil
	}
	var now time.Time
	want := t.chunk(r)
	var got int
	_, err = t.kv.Update(ctx, key, func(old []byte) ([]byte, error) {
		// The clock is read at each try: a try repeated after another replica's write must
		// not count from before that write.
		now = t.now()
		var st bucketState
		if old != nil {
			if err := json.Unmarshal(old, &st); err != nil {
				return nil, fmt.Errorf("token bucket %s: %w", key, err)
			}
		} else {
			st = full(r, now)
		}
		var next bucketState
		next, got, wait = st.take(now, r, want)
		if got == 0 && next.At >= st.At {
			// The bucket stays as it was: it refills by its time. (A time not believed is
			// put right, though.)
			return nil, errNothingTaken
		}
		return json.Marshal(next)
	})
	if err != nil && !errors.Is(err, errNothingTaken) {
		return false, 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if got == 0 {
		l.emptyUntil = now.Add(wait)
		t.leases.Add(key, l)
		return false, wait, nil
	}
	if !now.Before(l.until) {
		l.tokens = 0
	}
	l.tokens += got - 1
	l.until = now.Add(t.keep)
	t.leases.Add(key, l)
	return true, 0, nil
}

// TakeN takes n tokens at once from key's shared bucket, or none, and without them says how
// long until n are there. It keeps no lease: each call is a round trip to the shared bucket,
// for costs that come in uneven amounts (the bytes of a record) rather than one a request. A
// key is used with Take or with TakeN, not both; n above r.Burst is an error.
func (t *TokenBuckets) TakeN(ctx context.Context, key string, n int, r Rate) (ok bool, wait time.Duration, err error) {
	if n > r.Burst {
		return false, 0, fmt.Errorf("token bucket %s: %d tokens asked at once, it holds %d", key, n, r.Burst)
	}
	_, err = t.kv.Update(ctx, key, func(old []byte) ([]byte, error) {
		now := t.now() // read at each try, as in Take
		st := full(r, now)
		if old != nil {
			if err := json.Unmarshal(old, &st); err != nil {
				return nil, fmt.Errorf("token bucket %s: %w", key, err)
			}
		}
		next, got, w := st.take(now, r, n)
		ok, wait = got == n, w
		if !ok && next.At >= st.At {
			return nil, errNothingTaken
		}
		return json.Marshal(next)
	})
	if err != nil && !errors.Is(err, errNothingTaken) {
		return false, 0, err
	}
	return ok, wait, nil
}

// GiveN puts n tokens back into key's shared bucket, taken by TakeN for something that then
// did not come about, up to the burst. A bucket not there (never used, or expired) is full.
func (t *TokenBuckets) GiveN(ctx context.Context, key string, n int, r Rate) error {
	_, err := t.kv.Update(ctx, key, func(old []byte) ([]byte, error) {
		if old == nil {
			return nil, errNothingTaken
		}
		var st bucketState
		if err := json.Unmarshal(old, &st); err != nil {
			return nil, fmt.Errorf("token bucket %s: %w", key, err)
		}
		next, _, _ := st.take(t.now(), r, 0) // refilled to now
		next.Tokens = math.Min(float64(r.Burst), next.Tokens+float64(n))
		return json.Marshal(next)
	})
	if err != nil && !errors.Is(err, errNothingTaken) {
		return err
	}
	return nil
}

// errNothingTaken ends an update of an empty bucket without a write.
var errNothingTaken = errors.New("no token taken")

// maxAhead is how far ahead of a replica's clock a bucket's time is believed: twice the 15 s
// by which the deployment guide lets replicas' clocks differ. A replica behind the bucket by
// less refills nothing and leaves its time; moving the time back to its own would let the
// replica ahead refill the difference again at its next take, and two replicas taking in turn
// would hand out tokens with no time passing. The price: a bucket that a replica ahead emptied
// and left refills for the replica behind only once its clock reaches the bucket's time, up to
// the clocks' difference later (the operators' guide says so).
const maxAhead = 30 * time.Second

// fromMemory takes a token of key's lease, or says how long the shared bucket stays empty; with
// neither, it returns the lease to refill.
func (t *TokenBuckets) fromMemory(key string) (*lease, bool, time.Duration) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.leases.Get(key)
	if !ok {
		l = &lease{}
		t.leases.Add(key, l)
	}
	if l.tokens > 0 && now.Before(l.until) {
		l.tokens--
		return l, true, 0
	}
	if now.Before(l.emptyUntil) {
		return l, false, l.emptyUntil.Sub(now)
	}
	return l, false, 0
}

// Empty reports whether key's bucket of rate r has no token now, and for how long still,
// taking none. It answers from memory when this replica knows (it holds tokens of the key, or
// found its shared bucket empty), and otherwise reads the shared bucket, writing nothing: a
// bucket other replicas emptied is empty here too. An error means the shared bucket could not
// be read.
func (t *TokenBuckets) Empty(ctx context.Context, key string, r Rate) (bool, time.Duration, error) {
	now := t.now()
	t.mu.Lock()
	l, ok := t.leases.Peek(key)
	switch {
	case ok && l.tokens > 0 && now.Before(l.until):
		t.mu.Unlock()
		return false, 0, nil
	case ok && now.Before(l.emptyUntil):
		t.mu.Unlock()
		return true, l.emptyUntil.Sub(now), nil
	}
	t.mu.Unlock()
	var wait time.Duration
	_, err := t.kv.Update(ctx, key, func(old []byte) ([]byte, error) {
		if old == nil {
			return nil, errNothingTaken // never used, or expired: full
		}
		var st bucketState
		if err := json.Unmarshal(old, &st); err != nil {
			return nil, fmt.Errorf("token bucket %s: %w", key, err)
		}
		now = t.now()
		if _, got, w := st.take(now, r, 1); got == 0 {
			wait = w
		}
		return nil, errNothingTaken
	})
	if err != nil && !errors.Is(err, errNothingTaken) {
		return false, 0, err
	}
	return wait > 0, wait, nil
}

// Wait takes one token from key's bucket, waiting as long as it takes, or returns ctx's error
// or the shared bucket's.
func (t *TokenBuckets) Wait(ctx context.Context, key string, r Rate) error {
	for {
		ok, wait, err := t.Take(ctx, key, r)
		if ok || err != nil {
			return err
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
	}
}

// chunk is how many tokens a lease asks for: Lease's worth, at least one, at most the burst.
func (t *TokenBuckets) chunk(r Rate) int {
	n := int(math.Ceil(r.PerSecond * t.lease.Seconds()))
	return max(1, min(n, r.Burst))
}

// bucketState is a shared token bucket as stored.
type bucketState struct {
	Tokens float64 `json:"t"`
	At     int64   `json:"at"` // unix nanoseconds of the last change
}

// full is a new bucket: a first request is not held back.
func full(r Rate, now time.Time) bucketState {
	return bucketState{Tokens: float64(r.Burst), At: now.UnixNano()}
}

// take refills the bucket for the time since its last change and takes want tokens of it (a
// lease's worth, at most the burst), or none; with none, wait is how long until they are back. A
// clock a little behind the bucket's (another replica's) refills nothing and does not move the
// bucket's time back, so that no interval is refilled twice; one more than maxAhead behind
// takes the bucket's time for wrong and moves it to its own.
func (s bucketState) take(now time.Time, r Rate, want int) (next bucketState, got int, wait time.Duration) {
	last := time.Unix(0, s.At)
	if last.Sub(now) > maxAhead {
		last = now
	}
	elapsed := max(0, now.Sub(last))
	if now.Before(last) {
		now = last
	}
	tokens := math.Min(float64(r.Burst), s.Tokens+r.PerSecond*elapsed.Seconds())
	// A whole lease or nothing: replicas that come back for the tokens at once do not each
	// write the bucket for a few.
	if need := min(want, max(r.Burst, 1)); tokens >= float64(need) {
		got = need
	}
	tokens -= float64(got)
	if got == 0 {
		if r.PerSecond <= 0 {
			wait = time.Hour
		} else {
			need := float64(min(want, max(r.Burst, 1)))
			wait = time.Duration(math.Ceil((need - tokens) / r.PerSecond * float64(time.Second)))
		}
	}
	return bucketState{Tokens: tokens, At: now.UnixNano()}, got, wait
}
