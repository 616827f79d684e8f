package notification

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/store"
)

// LookupTimeout bounds a lookup's wait for the queue and the store: past it the lookup is
// ErrResultsUnavailable, to be retried.
const LookupTimeout = 5 * time.Second

// Result finds the current result of client's push id in at most three steps, each a read by
// key: the final results in memory; the queue, which holds a push until a worker has recorded
// its outcome (one direct get of the push's own subject, which holds only the client's own
// pushes), with the store's most advanced record of it once a worker has received it; for a
// push no longer in the queue, the store's outcome record (one read for a delivered push, two
// for any other and for a ucsId the store has no record of). A push of another client is
// ErrNotFound, as an unknown one. On a queue of several replicas, whose direct gets any
// replica answers, a ucsId found nowhere is asked of the queue's leader before it is
// ErrNotFound: a replica may lag behind a push acknowledged a moment ago. A ucsId is a ULID,
// read in either case.
//
// Two answers may seem to go back: while the store is slow or down, a push still in the queue
// is answered from the queue alone, as queued, even one already sent, until the store answers
// again; and a front end reads how far the workers got at most every 250 ms, so that behind a
// load balancer one front end may answer queued a moment after another answered sent.
func (s *Service) Result(ctx context.Context, client, id string) (push.Result, error) {
	id = strings.ToUpper(id)
	if !push.ValidID(id) {
		return push.Result{}, ErrNotFound
	}
	if r, ok := s.results.Get(id); ok && r.ClientID == client {
		return r, nil
	}
	ctx, cancel := context.WithTimeout(ctx, LookupTimeout)
	defer cancel()
	m, err := s.cfg.Waiting.Get(ctx, client, id)
	switch {
	case err == nil:
		return s.waitingResult(ctx, m), nil
	case !errors.Is(err, queue.ErrNotWaiting):
		// the queue could not say whether it holds the push: not a 404
		return push.Result{}, fmt.Errorf("%w: %w", ErrResultsUnavailable, err)
	}
	return s.outcome(ctx, client, id, store.ReceiptFirst)
}

// Lookup is one answer of Results: the push's result, or Found false for a ucsId the caller
// has no push of.
type Lookup struct {
	Result push.Result
	Found  bool
}

// lookupWorkers bounds the store reads one batch lookup makes at once, so that one request
// cannot take every connection to the store.
const lookupWorkers = 32

// Results finds the results of client's pushes ids, in request order, as Result finds each,
// in a bounded number of round trips: the memory of final results; one read of the queue for
// all the others (a batch direct get of their subjects); then the store, by key, for each (the
// progress of a push in the queue, the outcome of one that left it), several at once: a query
// for many ids at once is a table scan on the embedded store. The outcome is read as
// store.OutcomeFirst, so that a ucsId the store has no record of costs one read: a thousand
// of them are the heaviest batch a caller can ask for. It fails as a whole
// (ErrResultsUnavailable) when the queue or the store cannot answer for one of them.
func (s *Service) Results(ctx context.Context, client string, ids []string) ([]Lookup, error) {
	out := make([]Lookup, len(ids))
	done := make([]bool, len(ids))
	ctx, cancel := context.WithTimeout(ctx, LookupTimeout)
	defer cancel()
	var missed []string
	ids = slices.Clone(ids)
	for i, id := range ids {
		id = strings.ToUpper(id) // a ULID, read in either case
		ids[i] = id
		if !push.ValidID(id) {
			done[i] = true
			continue
		}
		if r, ok := s.results.Get(id); ok && r.ClientID == client {
			out[i] = Lookup{Result: r, Found: true}
			done[i] = true
			continue
		}
		missed = append(missed, id)
	}
	var waiting map[string]queue.Waited
	if len(missed) > 0 {
		var err error
		if waiting, err = s.cfg.Waiting.GetMany(ctx, client, missed); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrResultsUnavailable, err)
		}
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		lookErr error
	)
	jobs := make(chan int)
	for range min(lookupWorkers, len(missed)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				id := ids[i]
				if m, ok := waiting[id]; ok {
					out[i] = Lookup{Result: s.waitingResult(ctx, m), Found: true}
					continue
				}
				r, err := s.outcome(ctx, client, id, store.OutcomeFirst)
				switch {
				case errors.Is(err, ErrNotFound):
				case err != nil:
					mu.Lock()
					if lookErr == nil {
						lookErr = err
					}
					mu.Unlock()
				default:
					out[i] = Lookup{Result: r, Found: true}
				}
			}
		}()
	}
	for i := range ids {
		if !done[i] {
			jobs <- i
		}
	}
	close(jobs)
	wg.Wait()
	if lookErr != nil {
		return nil, lookErr
	}
	return out, nil
}

// waitingResult is the result of the push m, waiting in the queue: queued if no worker has
// received it yet (no store read), else the store's most advanced record of it, if it has
// any: the progress of its attempts, or, for a push whose acknowledgement to the queue is
// still to come (or was lost, and the queue gives the push out again), its sent or final
// result, so that a lookup never goes back from delivered to sending. When the store is slow
// or down, the queue answers alone.
func (s *Service) waitingResult(ctx context.Context, w queue.Waited) push.Result {
	m := w.Message
	if !w.Reached {
		return s.queuedResult(m)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StoreWait)
	defer cancel()
	p, err := s.cfg.Store.Current(ctx, m.UcsID)
	if err == nil && p.ClientID == m.ClientID {
		switch {
		case p.State.Final():
			s.remember(p, false)
		case p.State == push.StateQueued:
			s.explainPause(&p)
		}
		return p
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.cfg.Logger.Warn("progress unavailable; answering from the queue", "ucsId", m.UcsID, "err", err)
	}
	return s.queuedResult(m)
}

// outcome reads what became of client's push id once it left the queue, reading the store in
// order, and keeps a final result in memory. A push the store has no record of is looked for
// at the queue's leader before it is ErrNotFound (Waiting.FromLeader).
func (s *Service) outcome(ctx context.Context, client, id string, order store.Order) (push.Result, error) {
	r, err := s.cfg.Store.OutcomeOf(ctx, client, id, order) // another client's push is not found
	switch {
	case errors.Is(err, store.ErrNotFound):
		w, lerr := s.cfg.Waiting.FromLeader(ctx, client, id)
		switch {
		case lerr == nil:
			return s.queuedResult(w.Message), nil
		case !errors.Is(lerr, queue.ErrNotWaiting):
			return push.Result{}, fmt.Errorf("%w: %w", ErrResultsUnavailable, lerr)
		}
		return push.Result{}, ErrNotFound
	case err != nil:
		return push.Result{}, fmt.Errorf("%w: %w", ErrResultsUnavailable, err)
	}
	s.remember(r, false)
	return r, nil
}

// queuedResult is the result of a push waiting in the queue that no worker has reached; while
// sending is paused, it says why and until when.
func (s *Service) queuedResult(m push.Message) push.Result {
	at := time.UnixMilli(m.Accepted)
	r := push.Result{
		UcsID: m.UcsID, ClientID: m.ClientID, State: push.StateQueued, Type: string(m.Type), UserID: m.UserID,
		Accepted: at, Updated: at,
	}
	s.explainPause(&r)
	return r
}

// explainPause names a pause of sending in a queued push's result: why, and until when. A
// retry the push waits for after the pause ends keeps its time and its error, which the pause
// does not change; one that would come sooner waits for the pause, whose reason follows the
// error.
func (s *Service) explainPause(r *push.Result) {
	if s.cfg.Paused == nil {
		return
	}
	st, ok := s.cfg.Paused()
	switch {
	case !ok || r.RetryAt.After(st.Until):
	case r.LastError == "" || strings.HasPrefix(r.LastError, st.Reason):
		r.LastError, r.RetryAt = st.Explain(s.cfg.Location), st.Until
	default:
		r.LastError, r.RetryAt = r.LastError+"; then "+st.Explain(s.cfg.Location), st.Until
	}
}
