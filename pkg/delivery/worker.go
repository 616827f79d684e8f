package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/store"
)

// Sender sends template messages; *platform.Client implements it.
type Sender interface {
	SendTemplate(ctx context.Context, m platform.TemplateMessage) (int64, error)
}

// Store is what a worker reads; *store.Store implements it.
type Store interface {
	Current(ctx context.Context, ucsID string) (store.Result, error)
	Binding(ctx context.Context, userID string) (store.Binding, error)
}

// Events records delivery results; *store.Writer implements it.
type Events interface {
	Write(ctx context.Context, ws ...store.Write) error
	Post(w store.Write)
}

// Config wires a Worker.
type Config struct {
	// Consumer is the durable pull consumer shared by every worker.
	Consumer jetstream.Consumer
	Store    Store
	Events   Events
	Platform Sender
	// Templates maps push types to platform templates.
	Templates map[string]config.Template
	Policy    RetryPolicy
	// Concurrency is how many messages are delivered at once. Default 256.
	Concurrency int
	// SendTimeout bounds one call to the platform. Default 15s.
	SendTimeout time.Duration
	// BindingTTL is how long a looked-up binding is reused. Default 30s.
	BindingTTL time.Duration
	// Announce, when set, tells the front ends of a failure recorded as final, so that they
	// serve its lookups from memory.
	Announce func(store.Result)
	// AnnounceSent, when set, tells the front ends of a message the platform accepted and the
	// follower it went to, as soon as the platform answers, so that its delivery receipt finds
	// it in memory even before (or while the store refuses) the sent record.
	AnnounceSent func(r store.Result, openID string)
	// StoreRetry is the delay before a message whose outcome could not be recorded is tried
	// again. Default 5s.
	StoreRetry time.Duration
	// DeadLetter, when set, keeps a copy of a message that exhausted its attempts (the
	// dead-letter stream); the message is failed only once the copy is kept.
	DeadLetter func(ctx context.Context, msg jetstream.Msg, reason string) error
	// Pause is the pause of sending every worker obeys (the platform's daily quota); nil: never
	// paused.
	Pause Pauser
	// QuotaReset is when the platform's daily quota renews after now: sending pauses until
	// then after a 45009 answer. Required with Pause.
	QuotaReset func(now time.Time) time.Time
	// Budget, when set, caps the sends of every worker together (platform.max_rate).
	Budget Budget
	// Metrics counts attempts, failures and platform calls; nil counts nothing.
	Metrics *metrics.Metrics
	Now     func() time.Time
	Logger  *slog.Logger
}

// Pauser is the shared pause of sending; *queue.Pause implements it.
type Pauser interface {
	Paused() (queue.PauseState, bool)
	Set(ctx context.Context, st queue.PauseState) error
}

// Budget is a send budget shared by every worker; *queue.Budget implements it.
type Budget interface {
	Wait(ctx context.Context) error
}

// Worker delivers messages from the queue.
type Worker struct {
	cfg Config
	// stopping ends when Run's context does: messages held back by a pause are handed back
	// to the queue then, for another worker.
	stopping context.Context
	// bindings keeps looked-up bindings briefly: a bulk send to thousands of users reads each
	// binding once, not once per message, and an unsubscribe takes effect within BindingTTL
	// (sooner still, as the platform itself refuses a non-follower).
	bindings *lru.Cache[string, cachedBinding]
}

// maxCachedBindings bounds the binding cache (about 100 bytes an entry).
const maxCachedBindings = 100_000

// New checks cfg and returns a worker.
func New(cfg Config) (*Worker, error) {
	if cfg.Consumer == nil || cfg.Store == nil || cfg.Events == nil || cfg.Platform == nil {
		return nil, errors.New("delivery: consumer, store, events and platform are required")
	}
	if cfg.Policy.MaxAttempts < 1 {
		return nil, errors.New("delivery: policy.MaxAttempts must be at least 1")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 256
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = 15 * time.Second
	}
	if cfg.BindingTTL <= 0 {
		cfg.BindingTTL = 30 * time.Second
	}
	if cfg.StoreRetry <= 0 {
		cfg.StoreRetry = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	bindings, err := lru.New[string, cachedBinding](maxCachedBindings)
	if err != nil {
		return nil, err
	}
	if cfg.Pause != nil && cfg.QuotaReset == nil {
		return nil, errors.New("delivery: QuotaReset is required with Pause")
	}
	return &Worker{cfg: cfg, bindings: bindings, stopping: context.Background()}, nil
}

// Run delivers messages until ctx ends, then finishes the deliveries under way and the
// messages already fetched, and returns. While sending is paused it fetches nothing: the
// messages it holds wait (kept from redelivery), the rest stay in the queue.
func (w *Worker) Run(ctx context.Context) error {
	w.stopping = ctx
	// Deliveries under way finish even when ctx ends: a half-recorded attempt would only be
	// repeated later.
	work := context.WithoutCancel(ctx)
	// Concurrency handlers live as long as Run: a goroutine started for each message would
	// grow its stack again for every delivery (the HTTP client's calls run deep).
	jobs := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range w.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msg := range jobs {
				w.Handle(work, msg)
			}
		}()
	}
	defer func() {
		close(jobs)
		wg.Wait()
	}()
	for ctx.Err() == nil {
		if !w.waitUnpaused(ctx) {
			break
		}
		it, err := w.cfg.Consumer.Messages(jetstream.PullMaxMessages(2 * w.cfg.Concurrency))
		if err != nil {
			return fmt.Errorf("consume: %w", err)
		}
		watched := make(chan struct{})
		go func() {
			t := time.NewTicker(pausePoll)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					// Drain: stop pulling, but hand out what was already fetched so it
					// is answered now rather than redelivered after the ack wait.
					it.Drain()
					return
				case <-watched:
					return
				case <-t.C:
					if _, paused := w.paused(); paused {
						// Stop: what was fetched and not handed out goes back to the
						// queue (after the ack wait), not to the platform.
						it.Stop()
						return
					}
				}
			}
		}()
		for {
			msg, err := it.Next()
			if err != nil {
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					break
				}
				w.cfg.Logger.Warn("fetching messages failed", "err", err)
				continue
			}
			jobs <- msg // waits for a free handler
		}
		close(watched)
	}
	return nil
}

// pausePoll is how often a paused worker looks whether sending may resume.
const pausePoll = 250 * time.Millisecond

// paused reports the pause in force, and shows it in the metrics.
func (w *Worker) paused() (queue.PauseState, bool) {
	if w.cfg.Pause == nil {
		return queue.PauseState{}, false
	}
	st, ok := w.cfg.Pause.Paused()
	w.cfg.Metrics.Paused(ok)
	return st, ok
}

// waitUnpaused returns once sending is not paused (true), or when ctx ends (false).
func (w *Worker) waitUnpaused(ctx context.Context) bool {
	logged := false
	for {
		st, paused := w.paused()
		if !paused {
			if logged {
				w.cfg.Logger.Info("sending resumed")
			}
			return true
		}
		if !logged {
			w.cfg.Logger.Warn("sending paused", "until", st.Until, "reason", st.Reason)
			logged = true
		}
		t := time.NewTimer(pausePoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// errStopping is returned by gate when the worker stops while a message waits to be sent.
var errStopping = errors.New("the worker is stopping")

// gate returns once msg may be sent: sending is not paused and the shared budget allows one
// more. While it waits, the queue is told the message is still being worked on.
func (w *Worker) gate(ctx context.Context, msg jetstream.Msg, r store.Result) error {
	if st, paused := w.paused(); paused {
		w.showHeld(ctx, r, st)
		beat := time.NewTicker(heartbeat)
		defer beat.Stop()
		poll := time.NewTicker(pausePoll)
		defer poll.Stop()
		for paused {
			select {
			case <-w.stopping.Done():
				return errStopping
			case <-beat.C:
				_ = msg.InProgress()
			case <-poll.C:
				_, paused = w.paused()
			}
		}
	}
	if w.cfg.Budget != nil {
		if err := w.cfg.Budget.Wait(w.stopping); err != nil {
			if w.stopping.Err() != nil {
				return errStopping
			}
			return err
		}
	}
	return nil
}

// sendingShownAfter is how long a first attempt is under way before it is recorded as
// sending; until then a lookup reads queued.
const sendingShownAfter = 250 * time.Millisecond

// heartbeat is how often a message held back by a pause is reported in progress: well inside
// the shortest ack wait (5 s).
const heartbeat = 2 * time.Second

// Handle delivers one message from the queue and answers the queue: ack once the outcome is
// recorded, or a delayed nak for a retry. An outcome that cannot be recorded is not acked, so
// the message comes back.
func (w *Worker) Handle(ctx context.Context, msg jetstream.Msg) {
	log := w.cfg.Logger
	m, err := push.DecodeMessage(msg.Data())
	if err != nil {
		w.poison(ctx, msg, err)
		return
	}
	attempt := 1
	if meta, err := msg.Metadata(); err == nil {
		attempt = int(meta.NumDelivered)
	}
	r := store.Result{
		UcsID: m.UcsID, ClientID: m.ClientID, UserID: m.UserID, Type: string(m.Type),
		State: store.StateSending, Attempts: attempt, Accepted: time.UnixMilli(m.Accepted), Updated: w.cfg.Now(),
	}
	// stopSending keeps the first attempt's "sending" record from being written once the
	// attempt's outcome is about to be.
	stopSending := func() {}
	// A push published again (a batch's chunk expanded twice, a retried request) may have
	// been delivered under an earlier copy: its first attempt reads that copy's outcome.
	if attempt == 1 && msg.Headers().Get(queue.HeaderAgain) == "" {
		// Recorded only once the attempt has been under way for sendingShownAfter: most
		// attempts end sooner, and their outcome record alone says all a lookup needs,
		// so the store takes three writes a message rather than four. Written late, the
		// record changes nothing (FirstAttemptRecord never replaces).
		first := store.FirstAttemptRecord(r, r.Updated)
		t := time.AfterFunc(sendingShownAfter, func() { w.cfg.Events.Post(first) })
		stopSending = func() { t.Stop() }
		defer stopSending()
	} else {
		done, lastErr, err := w.earlier(ctx, m.UcsID)
		if err != nil {
			log.Warn("reading an earlier attempt failed; message will be retried", "ucsId", m.UcsID, "err", err)
			_ = msg.NakWithDelay(w.cfg.StoreRetry)
			return
		}
		if done {
			// A previous attempt (or copy) was recorded but its ack was lost (a worker died
			// in between).
			_ = msg.Ack()
			return
		}
		r.LastError = lastErr
		// Waited for, so that this attempt's own outcome is never overwritten by its start.
		if err := w.cfg.Events.Write(ctx, store.ProgressRecord(r, r.Updated)); err != nil {
			log.Warn("recording an attempt failed; message will be retried", "ucsId", m.UcsID, "err", err)
			_ = msg.NakWithDelay(w.cfg.StoreRetry)
			return
		}
	}

	res := w.deliver(ctx, m, msg, r)
	if res.release {
		// The worker stopped while the message waited for a pause or the budget: another
		// worker takes it at once, and no attempt was made.
		_ = msg.Nak()
		return
	}
	if res.storeDown {
		// The store could not say who the recipient is: not the message's fault, and not an
		// attempt at the platform, so no outcome is recorded and the policy is not consulted.
		log.Warn("binding lookup failed; message will be retried", "ucsId", m.UcsID, "err", res.out.reason)
		_ = msg.NakWithDelay(w.cfg.StoreRetry)
		return
	}
	out := w.cfg.Policy.Apply(res.out, attempt)
	if out.exhausted && w.cfg.DeadLetter != nil {
		if err := w.cfg.DeadLetter(ctx, msg, out.reason); err != nil {
			log.Warn("dead-lettering failed; message will be retried", "ucsId", m.UcsID, "err", err)
			_ = msg.NakWithDelay(w.cfg.StoreRetry)
			return
		}
	}
	now := w.cfg.Now()
	r.Updated = now
	var recs []store.Write
	switch out.kind {
	case outcomeSent:
		r.State, r.MsgID, r.Sent = store.StateSent, out.msgID, now
		recs = store.SentRecords(r, res.openID, now)
	case outcomeRetry:
		r.State, r.LastError, r.RetryAt = store.StateQueued, out.reason, now.Add(out.delay)
		recs = []store.Write{store.ProgressRecord(r, now)}
	case outcomeFailed:
		r.State, r.Reason, r.Finished = store.StateFailed, out.reason, now
		recs = []store.Write{store.FinalRecord(r, now)}
	}
	if out.kind == outcomeSent && w.cfg.AnnounceSent != nil {
		// Announced before it is recorded: the platform has the message whatever the store
		// does, and its receipt comes within seconds. A store that cannot take the sent
		// record now (it is retried) must not make the front ends refuse that receipt as
		// one for a message this service never sent.
		w.cfg.AnnounceSent(r, res.openID)
	}
	stopSending()
	if err := w.cfg.Events.Write(ctx, recs...); err != nil {
		log.Warn("recording outcome failed; message will be retried", "ucsId", m.UcsID, "err", err)
		_ = msg.NakWithDelay(w.cfg.StoreRetry)
		return
	}
	if out.kind == outcomeSent || res.platformCode != "" && out.kind == outcomeFailed {
		w.cfg.Metrics.Delivered(now.Sub(r.Accepted).Seconds())
	}
	switch out.kind {
	case outcomeRetry:
		w.cfg.Metrics.Delivery(metrics.OutcomeRetry, "")
		log.Info("delivery will be retried", "ucsId", m.UcsID, "attempt", attempt, "in", out.delay, "reason", out.reason)
		_ = msg.NakWithDelay(out.delay)
	case outcomeFailed:
		w.cfg.Metrics.Delivery(metrics.OutcomeFailed, out.class)
		if out.exhausted && w.cfg.DeadLetter != nil {
			w.cfg.Metrics.DeadLetter()
		}
		log.Info("delivery failed", "ucsId", m.UcsID, "attempt", attempt, "reason", out.reason)
		_ = msg.Ack()
		if w.cfg.Announce != nil {
			w.cfg.Announce(r)
		}
	default:
		w.cfg.Metrics.Delivery(metrics.OutcomeSent, "")
		log.Debug("delivery sent", "ucsId", m.UcsID, "attempt", attempt, "msgId", out.msgID)
		_ = msg.Ack()
	}
}

// poison ends a message that does not decode. Nothing the front end publishes fails to
// decode, so it can never be delivered: rather than being retried forever in front of the
// others, it ends failed with the reason under the ucsId its subject names, a copy goes to the
// dead letters, and it leaves the queue.
func (w *Worker) poison(ctx context.Context, msg jetstream.Msg, decodeErr error) {
	log := w.cfg.Logger
	id := strings.TrimPrefix(msg.Subject(), queue.SubjectPrefix)
	reason := "undecodable message: " + decodeErr.Error()
	log.Error("undecodable message fails", "subject", msg.Subject(), "err", decodeErr)
	if w.cfg.DeadLetter != nil {
		if err := w.cfg.DeadLetter(ctx, msg, reason); err != nil {
			log.Warn("dead-lettering failed; message will be retried", "subject", msg.Subject(), "err", err)
			_ = msg.NakWithDelay(w.cfg.StoreRetry)
			return
		}
		w.cfg.Metrics.DeadLetter()
	}
	if push.ValidID(id) {
		now := w.cfg.Now()
		r := store.Result{UcsID: id, State: store.StateFailed, Reason: reason, Updated: now, Finished: now}
		if meta, err := msg.Metadata(); err == nil {
			r.Attempts = int(meta.NumDelivered)
			r.Accepted = meta.Timestamp
		}
		if err := w.cfg.Events.Write(ctx, store.FinalRecord(r, now)); err != nil {
			log.Warn("recording outcome failed; message will be retried", "ucsId", id, "err", err)
			_ = msg.NakWithDelay(w.cfg.StoreRetry)
			return
		}
	}
	w.cfg.Metrics.Delivery(metrics.OutcomeFailed, "undecodable")
	_ = msg.Term()
}

// earlier reads what earlier attempts of a redelivered message recorded: whether it is already
// sent or final, and the last error of a retry.
func (w *Worker) earlier(ctx context.Context, ucsID string) (done bool, lastErr string, err error) {
	r, err := w.cfg.Store.Current(ctx, ucsID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, "", nil
	case err != nil:
		return false, "", err
	}
	return r.State == store.StateSent || r.State.Final(), r.LastError, nil
}

// attemptResult is what one attempt came to: the outcome, the follower it went to, and whether
// the store failed before the platform was tried.
type attemptResult struct {
	release      bool // not attempted: the worker is stopping
	out          Outcome
	openID       string
	storeDown    bool
	platformCode string // the errcode label of the platform's refusal, "" if none
}

// deliver makes one attempt. r is the message's record, for the progress shown while the
// platform's daily quota holds it back.
func (w *Worker) deliver(ctx context.Context, m push.Message, msg jetstream.Msg, r store.Result) attemptResult {
	b, err := w.binding(ctx, m.UserID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return attemptResult{out: failedAs("no_binding", "no binding: user "+m.UserID+" has no follower id of the official account")}
	case err != nil:
		return attemptResult{out: Retry("binding lookup: "+err.Error(), 0), storeDown: true}
	case !b.Following:
		return attemptResult{out: failedAs("not_following", "not following: user "+m.UserID+" does not follow the official account")}
	}
	tpl, ok := w.cfg.Templates[string(m.Type)]
	if !ok {
		return attemptResult{out: failedAs("no_template", "no template configured for type "+string(m.Type))}
	}
	data := make(map[string]string, len(tpl.Fields))
	for field, keyword := range tpl.Fields {
		if v, ok := m.Data[field]; ok {
			data[keyword] = v
		}
	}
	tm := platform.TemplateMessage{ToUser: b.OpenID, TemplateID: tpl.TemplateID, URL: m.URL, ClientMsgID: m.UcsID, Data: data}
	var id int64
	for {
		if gerr := w.gate(ctx, msg, r); errors.Is(gerr, errStopping) {
			return attemptResult{release: true}
		} else if gerr != nil {
			return attemptResult{out: Retry("send budget: "+gerr.Error(), 0)}
		}
		id, err = w.send(ctx, tm)
		var pe *platform.Error
		if !errors.As(err, &pe) || pe.Code != platform.CodeDailyQuota || w.cfg.Pause == nil || !w.quotaUsedUp(ctx, r) {
			break
		}
	}
	code := errCode(err)
	res := attemptResult{openID: b.OpenID, platformCode: code}
	switch reason, permanent := platform.Permanent(err); {
	case err == nil:
		res.out = Sent(id)
	case permanent:
		res.out = failedAs(code, reason)
	default:
		res.out = Retry(err.Error(), 0)
	}
	return res
}

// send makes one call of the platform.
func (w *Worker) send(ctx context.Context, tm platform.TemplateMessage) (int64, error) {
	sctx, cancel := context.WithTimeout(ctx, w.cfg.SendTimeout)
	defer cancel()
	started := time.Now()
	id, err := w.cfg.Platform.SendTemplate(sctx, tm)
	w.cfg.Metrics.PlatformCall(time.Since(started).Seconds(), errCode(err))
	return id, err
}

// quotaUsedUp pauses sending for every worker until the daily quota renews, and reports
// whether sending is paused now; the message then waits at the gate, which shows it as queued
// with the reason. When the pause cannot be set, the caller retries the message later rather
// than calling the platform again at once.
func (w *Worker) quotaUsedUp(ctx context.Context, r store.Result) bool {
	w.cfg.Metrics.Delivery(metrics.OutcomeRetry, "")
	if _, paused := w.cfg.Pause.Paused(); paused {
		return true
	}
	st := queue.PauseState{Until: w.cfg.QuotaReset(w.cfg.Now()), Reason: "45009: the platform's daily quota is used up"}
	if err := w.cfg.Pause.Set(ctx, st); err != nil {
		w.cfg.Logger.Error("pausing sending failed; the message will be retried", "ucsId", r.UcsID, "err", err)
		return false
	}
	w.cfg.Logger.Warn("the platform's daily quota is used up; sending paused", "until", st.Until, "ucsId", r.UcsID)
	return true
}

// showHeld records a message held back by a pause as queued, with the pause's reason and end.
func (w *Worker) showHeld(ctx context.Context, r store.Result, st queue.PauseState) {
	now := w.cfg.Now()
	r.State, r.Updated, r.RetryAt = store.StateQueued, now, st.Until
	r.LastError = st.Explain()
	if err := w.cfg.Events.Write(ctx, store.ProgressRecord(r, now)); err != nil {
		w.cfg.Logger.Warn("recording a paused message failed", "ucsId", r.UcsID, "err", err)
	}
}

// errCode is the metrics label of a failed send: the platform's errcode, or timeout, http or
// network when it gave none; "" for a success.
func errCode(err error) string {
	var pe *platform.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &pe):
		return metrics.ErrCode(pe.Code)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case strings.Contains(err.Error(), "HTTP status"):
		return "http"
	}
	return "network"
}

// Forget drops what the worker cached of userID's binding, which a student just changed: the
// next message to them reads the store.
func (w *Worker) Forget(userID string) { w.bindings.Remove(userID) }

type cachedBinding struct {
	b       store.Binding
	err     error
	expires time.Time
}

func (w *Worker) binding(ctx context.Context, userID string) (store.Binding, error) {
	now := w.cfg.Now()
	if e, ok := w.bindings.Get(userID); ok && now.Before(e.expires) {
		return e.b, e.err
	}
	b, err := w.cfg.Store.Binding(ctx, userID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return b, err // not cached: an outage is not an answer
	}
	w.bindings.Add(userID, cachedBinding{b: b, err: err, expires: now.Add(w.cfg.BindingTTL)})
	return b, err
}
