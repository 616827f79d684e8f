package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/sending"
	"github.com/campus-it/ucs/pkg/store"
)

// Sender sends template messages; *platform.Client implements it.
type Sender interface {
	SendTemplate(ctx context.Context, m platform.TemplateMessage) (int64, error)
}

// Store is what a worker reads; *store.Store implements it.
type Store interface {
	Current(ctx context.Context, ucsID string) (push.Result, error)
	ReceiptResult(ctx context.Context, ucsID string) (push.Result, error)
	Binding(ctx context.Context, userID string) (store.Binding, error)
}

// Events records delivery results; *store.Writer implements it.
type Events interface {
	Write(ctx context.Context, ws ...store.Write) error
}

// Config wires a Worker.
type Config struct {
	// Consumer is the durable pull consumer shared by every worker.
	Consumer jetstream.Consumer
	Store    Store
	Events   Events
	Platform Sender
	// Reconsume makes the consumer again, with the stream it reads, when it is gone (an
	// operator's `nats consumer rm`, NATS restarted without its data); nil: never.
	Reconsume func(ctx context.Context) (jetstream.Consumer, error)
	// ConsumerCheck is how often a worker that fetched nothing asks whether its consumer
	// still exists: a pull from a consumer that is gone just waits, as if nothing were
	// queued. Default 15s.
	ConsumerCheck time.Duration
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
	Announce func(push.Result)
	// AnnounceSent, when set, tells the front ends of a message the platform accepted and the
	// follower it went to, as soon as the platform answers, so that its delivery receipt finds
	// it in memory even before (or while the store refuses) the sent record.
	AnnounceSent func(r push.Result, openID string)
	// StoreRetry is the delay before a message whose outcome could not be recorded is tried
	// again. Default 5s.
	StoreRetry time.Duration
	// DeadLetter, when set, keeps a copy of a message that exhausted its attempts (the
	// dead-letter stream), with the platform calls made for it; the message is failed only
	// once the copy is kept.
	DeadLetter func(ctx context.Context, msg jetstream.Msg, reason string, attempts int) error
	// Pause is the pause of sending every worker obeys (the platform's daily quota); nil: never
	// paused.
	Pause Pauser
	// Location is the service's time zone (config time_zone), in which a message held by a
	// pause names the pause's end; nil: the process's.
	Location *time.Location
	// QuotaReset is when the platform's daily quota renews after now: sending pauses until
	// then after a 45009 answer. Required with Pause.
	QuotaReset func(now time.Time) time.Time
	// MaxAge, when set, is how long after its acceptance a push may still be sent: an older one
	// fails as expired (nats.max_age), unless its last attempt's outcome is unknown, when it is
	// asked again. The stream drops none by age.
	MaxAge time.Duration
	// Budget, when set, caps the sends of every worker together (platform.max_rate).
	Budget Budget
	// AddressPauseFor is how long this worker alone stops sending when the platform refuses
	// its address (40164): it hands its messages back to the queue for the other workers, and
	// then tries again. Default 1 minute.
	AddressPauseFor time.Duration
	// TokenPauseFor is how long this worker alone stops sending when it cannot get an access
	// token (the platform's token endpoint failing, or this worker's way to it): it hands its
	// messages back as for AddressPauseFor, and then tries again. Default 30 s.
	TokenPauseFor time.Duration
	// Metrics counts attempts and failures; nil counts nothing. The platform's calls are
	// counted by the platform client (platform.Config.OnSend).
	Metrics *metrics.Metrics
	Now     func() time.Time
	Logger  *slog.Logger
}

// Pauser is the shared pause of sending; *sending.Pause implements it.
type Pauser interface {
	Paused() (sending.PauseState, bool)
	Set(ctx context.Context, st sending.PauseState) error
}

// Budget is a send budget shared by every worker; *sending.Budget implements it.
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
	// forgets counts the bindings dropped by Forget, so that a read of the store begun
	// before one is not cached after it.
	forgetMu sync.Mutex
	forgets  uint64
	// own is this worker's own pause: the platform refused its address (40164), or it could
	// get no access token; other workers may still send.
	ownMu sync.Mutex
	own   sending.PauseState
	// refused is the pause for a problem of the account that this worker's own call met,
	// until it sends again; nil when it met none (it may wait for a pause another set).
	refused atomic.Pointer[sending.PauseState]
	// consumer is the one fetched from (Run's loop alone uses it); checked is when it was
	// last found to exist, and gone says why it is missing and could not be made again.
	consumer jetstream.Consumer
	checked  time.Time
	gone     atomic.Pointer[string]
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
	if cfg.AddressPauseFor <= 0 {
		cfg.AddressPauseFor = time.Minute
	}
	if cfg.TokenPauseFor <= 0 {
		cfg.TokenPauseFor = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ConsumerCheck <= 0 {
		cfg.ConsumerCheck = 15 * time.Second
	}
	bindings, err := lru.New[string, cachedBinding](maxCachedBindings)
	if err != nil {
		return nil, err
	}
	if cfg.Pause != nil && cfg.QuotaReset == nil {
		return nil, errors.New("delivery: QuotaReset is required with Pause")
	}
	return &Worker{cfg: cfg, bindings: bindings, stopping: context.Background(), consumer: cfg.Consumer, checked: time.Now()}, nil
}

// Run delivers messages until ctx ends, then finishes the deliveries under way and the
// messages already fetched, and returns. It fetches only as many messages as it has idle
// handlers, and tells the queue at once, and then every heartbeat, that it works on each: a
// message this worker holds is never given to another worker while it lives. While sending is
// paused it fetches nothing: the messages it holds wait, the rest stay in the queue.
func (w *Worker) Run(ctx context.Context) error {
	w.stopping = ctx
	// Deliveries under way finish even when ctx ends: a half-recorded attempt would only be
	// repeated later.
	work := context.WithoutCancel(ctx)
	// Concurrency handlers live as long as Run: a goroutine started for each message would
	// grow its stack again for every delivery (the HTTP client's calls run deep).
	jobs := make(chan held, w.cfg.Concurrency)
	idle := make(chan struct{}, w.cfg.Concurrency) // a token for each idle handler
	var wg sync.WaitGroup
	for range w.cfg.Concurrency {
		idle <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for h := range jobs {
				w.handle(work, h.msg, h.alive)
				idle <- struct{}{}
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
		n := 0
		select {
		case <-idle:
			n = 1
		case <-ctx.Done():
			return nil
		}
	more:
		for n < w.cfg.Concurrency {
			select {
			case <-idle:
				n++
			default:
				break more
			}
		}
		got := w.fetch(n, jobs)
		for range n - got {
			idle <- struct{}{}
		}
		if got == 0 && time.Since(w.checked) >= w.cfg.ConsumerCheck {
			w.checkConsumer()
		}
	}
	return nil
}

// checkConsumer asks whether the consumer exists, and makes it again (Config.Reconsume) when
// it is gone; until that succeeds, ConsumerGone says why this worker delivers nothing.
func (w *Worker) checkConsumer() {
	ctx, cancel := context.WithTimeout(w.stopping, 5*time.Second)
	defer cancel()
	_, err := w.consumer.Info(ctx)
	switch {
	case err == nil:
		w.checked = time.Now()
		w.gone.Store(nil)
		return
	case !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound):
		return // NATS unreachable: the connection says so; looked at again after the next fetch
	}
	if w.cfg.Reconsume != nil {
		c, rerr := w.cfg.Reconsume(ctx)
		if rerr == nil {
			w.cfg.Logger.Warn("the consumer was gone; made it again", "err", err)
			w.consumer, w.checked = c, time.Now()
			w.gone.Store(nil)
			return
		}
		err = rerr
	}
	why := "the queue's consumer is gone: " + err.Error()
	w.gone.Store(&why)
	w.cfg.Logger.Error("fetching nothing: the queue's consumer is gone and could not be made again", "err", err)
}

// ConsumerGone reports why this worker fetches nothing when the consumer it reads is gone and
// could not be made again.
func (w *Worker) ConsumerGone() (string, bool) {
	if why := w.gone.Load(); why != nil {
		return *why, true
	}
	return "", false
}

// held is a fetched message, kept from redelivery until alive is called.
type held struct {
	msg   jetstream.Msg
	alive func()
}

// fetchWait bounds one pull: how long an idle worker waits for a message before it looks
// again whether to stop or pause.
const fetchWait = time.Second

// fetch pulls up to n messages and hands each to a handler as it arrives, kept from
// redelivery from that moment; it returns how many came.
func (w *Worker) fetch(n int, jobs chan<- held) int {
	// Ended early when the worker stops: a message the server sends after that is given
	// to another worker after the ack wait.
	ctx, cancel := context.WithTimeout(w.stopping, fetchWait)
	defer cancel()
	batch, err := w.consumer.Fetch(n, jetstream.FetchContext(ctx))
	if err != nil {
		w.cfg.Logger.Warn("fetching messages failed", "err", err)
		t := time.NewTimer(fetchWait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-w.stopping.Done():
		}
		return 0
	}
	got := 0
	for msg := range batch.Messages() {
		got++
		jobs <- held{msg: msg, alive: keepAlive(msg)}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
		w.cfg.Logger.Warn("fetching messages failed", "err", err)
	}
	return got
}

// pausePoll is how often a paused worker looks whether sending may resume.
const pausePoll = 250 * time.Millisecond

// paused reports the pause in force, every worker's or this worker's own, and shows it in
// the metrics.
func (w *Worker) paused() (sending.PauseState, bool) {
	st, ok := w.ownPause()
	if !ok && w.cfg.Pause != nil {
		st, ok = w.cfg.Pause.Paused()
	}
	w.cfg.Metrics.Paused(ok)
	return st, ok
}

// ownPause reports this worker's own pause: the platform refused its address, or it could get
// no access token, and it sends nothing until the pause ends.
func (w *Worker) ownPause() (sending.PauseState, bool) {
	w.ownMu.Lock()
	defer w.ownMu.Unlock()
	return w.own, w.cfg.Now().Before(w.own.Until)
}

// handBack is how long a message this worker hands back for its own pause waits in the queue:
// past the pull this worker may have under way, so that it goes to another.
const handBack = fetchWait

// OwnPause reports that this worker alone sends nothing for now, with the cause and what an
// operator can do: the platform refuses its address (40164), or it can get no access token.
// It tries again after Config.AddressPauseFor or Config.TokenPauseFor.
func (w *Worker) OwnPause() (string, bool) {
	st, ok := w.ownPause()
	if st.Action != "" {
		return st.Reason + "; " + st.Action, ok
	}
	return st.Reason, ok
}

// AccountRefused reports that the platform refused this worker's own call for a problem of the
// account that an operator must fix (a wrong secret, a template id, a missing permission),
// with the cause and what to do, while that pause holds and until the worker sends again. A
// worker that only waits for such a pause another set reports nothing: it may run the
// corrected configuration.
func (w *Worker) AccountRefused() (string, bool) {
	st := w.refused.Load()
	if st == nil || w.cfg.Pause == nil {
		return "", false
	}
	if cur, paused := w.cfg.Pause.Paused(); !paused || cur.Action == "" {
		// Resumed, or ended after its 24 hours: the next call tells whether the fix holds.
		return "", false
	}
	return st.Reason + "; " + st.Action, true
}

// selfPause reports the pause of this worker alone that err calls for: the platform refused
// this worker's address (40164); an HTTP 429, or a 503 with Retry-After, asked it to wait (the
// platform's own limits are errcodes: such an answer comes from a gateway on this worker's way,
// which may be its alone, as long as it asks, a minute for a 429 that says nothing; a shared
// gateway's reaches every worker in turn); or it could get no access token for a cause other
// than the account's (the token endpoint failing, or this worker's way to it); false for any
// other err.
func (w *Worker) selfPause(err error) (sending.PauseState, bool) {
	now := w.cfg.Now()
	if reason, action, ok := platform.AddressRefused(err); ok {
		return sending.PauseState{Until: now.Add(w.cfg.AddressPauseFor), Reason: reason, Action: action}, true
	}
	if he, wait := platform.AskedWait(err); he != nil {
		if errors.As(err, new(*platform.NotSentError)) {
			wait = max(wait, w.cfg.TokenPauseFor) // the token endpoint's answer
		}
		return sending.PauseState{Until: now.Add(wait), Reason: "HTTP " + he.Status + ": the platform's address, or a gateway on this worker's way to it, asked to wait " + wait.String()}, true
	}
	if _, _, account := platform.AccountProblem(err); !account && errors.As(err, new(*platform.NotSentError)) {
		w.cfg.Logger.Warn("no access token could be had from the platform", "err", err)
		return sending.PauseState{Until: now.Add(w.cfg.TokenPauseFor), Reason: "no access token: " + platform.Reason(err)}, true
	}
	return sending.PauseState{}, false
}

// errOwnPause is returned by gate while this worker's own pause holds: the message goes back
// to the queue at once, for another worker.
var errOwnPause = errors.New("this worker's sending is paused")

// pauseSelf starts this worker's own pause for st (see Config.AddressPauseFor and
// Config.TokenPauseFor), or extends the one that holds to st's end when that is later, and
// returns the record of a message handed back meanwhile. The call that met it does not count.
func (w *Worker) pauseSelf(st sending.PauseState) string {
	w.ownMu.Lock()
	defer w.ownMu.Unlock()
	// A pause in force is extended by a longer wait asked meanwhile (two calls under way at
	// once, the shorter wait answered first), never shortened.
	if now := w.cfg.Now(); !now.Before(w.own.Until) || st.Until.After(w.own.Until) {
		if now.Before(w.own.Until) && st.Action == "" {
			st.Action = w.own.Action // the operator's action of an address pause still holds
		}
		w.own = st
		w.cfg.Logger.Error("this worker hands its messages to the other workers and tries again later",
			"reason", st.Reason, "action", st.Action, "until", st.Until)
	}
	why := st.Reason + "; handed to another worker"
	if st.Action != "" {
		why += ": " + st.Action
	}
	return why
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

// gate returns once a message may be sent: sending is not paused and the shared budget allows
// one more. (While it waits, handle's keepAlive tells the queue the message is being worked on.)
// A message held by a pause is shown queued, with the pause's reason, unless its last call's
// outcome is unknown (inDoubt): its record keeps saying sending, so that whichever worker
// gets it next asks the platform again rather than take that call for failed.
func (w *Worker) gate(ctx context.Context, r *push.Result, inDoubt, first bool) error {
	for {
		if _, own := w.ownPause(); own {
			return errOwnPause
		}
		if st, paused := w.paused(); paused {
			if !inDoubt {
				w.showHeld(ctx, r, st, first)
			}
			poll := time.NewTicker(pausePoll)
			for paused {
				select {
				case <-w.stopping.Done():
					poll.Stop()
					return errStopping
				case <-poll.C:
					if _, own := w.ownPause(); own {
						poll.Stop()
						return errOwnPause // to another worker, which obeys the shared pause too
					}
					_, paused = w.paused()
				}
			}
			poll.Stop()
		}
		if w.cfg.Budget == nil {
			return nil
		}
		if err := w.cfg.Budget.Wait(w.stopping); err != nil {
			if w.stopping.Err() != nil {
				return errStopping
			}
			return err
		}
		// A pause that began while the message waited for the budget holds it too.
		if _, paused := w.paused(); !paused {
			return nil
		}
	}
}

// budgetFresh is how long a send budget's token lasts while the attempt's record is written:
// above a store's usual answer, and a tenth of the second over which the budget holds.
const budgetFresh = 100 * time.Millisecond

// heartbeat is how often a message a worker is still handling is reported in progress: well
// inside the shortest ack wait (5 s).
const heartbeat = 2 * time.Second

// handle delivers one message from the queue and answers the queue: ack once the outcome is
// recorded, a delayed nak for a retry, or a nak that counts no attempt when the message is
// handed back (snoozed). An outcome that cannot be recorded is not acked, so the message comes
// back.
//
// Attempts count calls of the platform, and only those: before each call the attempt's number
// is recorded in the push's progress record (the store), and a redelivered message reads it
// there. A worker killed during a call leaves the record saying so, and the call counts once.
//
// The message is kept from redelivery until stop is called: however long the store or the
// platform takes, the queue gives it to no other worker, which would call the platform again.
func (w *Worker) handle(ctx context.Context, msg jetstream.Msg, stop func()) {
	defer stop()
	if _, own := w.ownPause(); own {
		// Fetched just before this worker paused itself: another worker delivers it.
		_ = msg.NakWithDelay(handBack)
		return
	}
	m, err := push.DecodeMessage(msg.Data())
	if err != nil {
		w.poison(ctx, msg, err)
		return
	}
	now := w.cfg.Now()
	r := push.Result{
		UcsID: m.UcsID, ClientID: m.ClientID, UserID: m.UserID, Type: string(m.Type),
		State: push.StateQueued, Accepted: time.UnixMilli(m.Accepted), Updated: now,
	}
	// A message delivered for the first time has no history, and costs no read; one delivered
	// again (after a retry, a snooze, a worker that died) reads what came of it so far.
	first := msg.Headers().Get(queue.HeaderMigrated) == ""
	inDoubt := false    // the last attempt was under way when its copy was handed back
	var since time.Time // when that attempt's call was made
	delivery := uint64(1)
	if meta, err := msg.Metadata(); err == nil {
		delivery = meta.NumDelivered
		first = first && delivery <= 1
	}
	// This delivery's writes of the push's progress are entries above those of the deliveries
	// before it (see store.ProgressRecord).
	r.Rev = store.DeliveryRev(delivery)
	if !first {
		cur, err := w.cfg.Store.Current(ctx, m.UcsID)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			w.answer(ctx, msg, r, Snooze("reading earlier attempts: "+err.Error(), w.cfg.StoreRetry), attemptResult{})
			return
		case cur.State == push.StateSent || cur.State.Final():
			// An earlier delivery was recorded but its ack was lost (a worker died in
			// between).
			if err := w.settle(ctx, cur); err != nil {
				w.answer(ctx, msg, r, Snooze("recording the sent result: "+err.Error(), w.cfg.StoreRetry), attemptResult{})
				return
			}
			_ = msg.Ack()
			return
		default:
			r.Attempts, r.LastError, r.Rev = cur.Attempts, cur.LastError, store.Rebase(r.Rev, cur.Rev)
			inDoubt, since = cur.State == push.StateSending, cur.Updated
			if inDoubt {
				r.To = cur.To
			}
		}
		if w.usedUp(cur) {
			// The last attempt failed, and its worker stopped before the final record: the
			// message fails as it would have, without calling the platform again. (A record
			// that says sending leaves the last call's outcome unknown: the call is made
			// again, and the platform's duplicate check answers one it took with its msgid,
			// within its 10 minutes: see the package doc.)
			w.answer(ctx, msg, r, w.cfg.Policy.GiveUp(r.Attempts, r.LastError), attemptResult{})
			return
		}
		if wait := cur.RetryAt.Sub(w.cfg.Now()); cur.State == push.StateQueued && cur.Attempts > 0 && wait > retryAtSkew && wait <= w.cfg.Policy.Max {
			// A retry is recorded before its delayed nak: a copy handed out again before its
			// time (its worker died in between, or the nak was lost) waits out what is left
			// of the backoff the lookup shows, counting nothing. (A pause's end is not
			// recorded: the gate holds to the pause, and lets go when sending resumes.)
			w.answer(ctx, msg, r, Snooze("waiting for its retry time", wait), attemptResult{})
			return
		}
	}
	res := w.deliver(ctx, m, msg, &r, first, inDoubt, since)
	if res.done {
		_ = msg.Ack()
		return
	}
	out := w.cfg.Policy.Apply(res.out, r.Attempts)
	if !res.inDoubtSince.IsZero() {
		out = w.askAgain(out, res.inDoubtSince, r.Attempts)
	}
	w.answer(ctx, msg, r, out, res)
}

// retryAtSkew is how far before a recorded retry time a copy of the message handed out again
// is sent all the same: the clocks of the worker that wrote it and of this one may differ.
const retryAtSkew = time.Second

// mayHaveBeenTaken reports whether a call that failed may have been taken by the platform all
// the same: no answer came (a time-out, the connection lost), or none of the platform's (a
// gateway's time-out, or a success without a msgid). An errcode, or a status such as 502 or 503
// of the platform's gateway, says the call was not taken; so does a connection that could not
// be made (refused, or a name that did not resolve), as nothing was sent.
func mayHaveBeenTaken(err error) bool {
	var pe *platform.Error
	var he *platform.HTTPError
	var oe *net.OpError
	switch {
	case errors.As(err, &oe) && oe.Op == "dial", errors.As(err, new(*net.DNSError)):
		return false // no connection: nothing was sent
	case errors.As(err, &pe):
		return false
	case errors.As(err, &he):
		return he.Code == http.StatusGatewayTimeout
	}
	return true
}

// askAgain is the outcome of a retryable failure out of a message whose call made at since
// has an unknown outcome (its answer was lost: a time-out, a network error, a gateway's
// status), which no later call settled: the platform may have taken it. Within the platform's
// duplicate check of that call, the message is called again with the same client_msg_id, even
// past max_attempts, since the platform answers a call it took with its msgid and sends nothing
// twice; a retry's record keeps saying sending, so that a copy handed to another worker asks
// again too. Once the check is over, a repeat could reach the user twice: the message fails, its
// reason saying that the platform may have sent it.
func (w *Worker) askAgain(out Outcome, since time.Time, attempts int) Outcome {
	now := w.cfg.Now()
	until := since.Add(platform.DuplicateWindow - w.cfg.SendTimeout - 30*time.Second)
	if out.kind != outcomeRetry && !out.exhausted {
		return out
	}
	if now.Before(until) {
		if out.kind != outcomeRetry {
			out = Retry(out.lastError, max(w.cfg.Policy.Max, w.cfg.Policy.Initial))
		}
		out.delay = max(min(out.delay, until.Sub(now)), 0)
		out.inDoubtSince = since
		return out
	}
	// The check is over, attempts left or not: a call now could be a second message.
	if out.kind == outcomeRetry {
		out = w.cfg.Policy.GiveUp(attempts, out.reason)
	}
	out.reason += "; the outcome of a call is unknown (its answer was lost): the platform may have sent the message"
	return out
}

// answer records what came of a delivery and answers the queue. r holds the attempts made
// so far (the one just made included).
func (w *Worker) answer(ctx context.Context, msg jetstream.Msg, r push.Result, out Outcome, res attemptResult) {
	log := w.cfg.Logger
	if out.kind == outcomeSnooze {
		log.Warn("message handed back without an attempt", "ucsId", r.UcsID, "in", out.delay, "reason", out.reason)
		if out.delay <= 0 {
			_ = msg.Nak()
		} else {
			_ = msg.NakWithDelay(out.delay)
		}
		return
	}
	if out.exhausted {
		// The last attempt's failure is recorded first: a copy of the message handed back
		// before its final record (the worker stopped) then knows the attempts used up, and
		// fails without calling the platform again.
		r.Rev = store.NextRev(r.Rev)
		failing := r
		failing.State, failing.LastError, failing.Updated, failing.RetryAt = push.StateQueued, out.lastError, w.cfg.Now(), time.Time{}
		failing.To = ""
		err := w.keepTrying("recording the last attempt's failure", msg, func() error {
			return w.cfg.Events.Write(ctx, store.ProgressRecord(failing, failing.Updated))
		})
		if err != nil {
			w.answer(ctx, msg, r, Snooze("recording the last attempt's failure: "+err.Error(), 0), res)
			return
		}
	}
	if out.exhausted && w.cfg.DeadLetter != nil {
		// The copy is tried again in place while it fails, as the outcome's record is: the
		// message handed back would call the platform once more on its next delivery.
		err := w.keepTrying("dead-lettering", msg, func() error { return w.cfg.DeadLetter(ctx, msg, out.reason, r.Attempts) })
		if err != nil {
			w.answer(ctx, msg, r, Snooze("dead-lettering: "+err.Error(), 0), res)
			return
		}
	}
	// The push's acceptance is the front end's time; this worker's clock may run up to 15 s
	// behind it, and nothing of the push is recorded as before it was accepted.
	now := w.cfg.Now()
	if now.Before(r.Accepted) {
		now = r.Accepted
	}
	r.Updated = now
	if out.inDoubtSince.IsZero() {
		r.To = "" // kept only while a call's outcome is unknown
	}
	var recs []store.Write
	switch out.kind {
	case outcomeSent:
		r.State, r.MsgID, r.Sent, r.RetryAt = push.StateSent, out.msgID, now, time.Time{}
		recs = store.SentRecords(r, res.openID, now)
	case outcomeRetry:
		r.State, r.LastError, r.RetryAt = push.StateQueued, out.reason, now.Add(out.delay)
		if !out.inDoubtSince.IsZero() {
			// Still sending, since the call whose outcome is unknown: whichever worker gets
			// the message next asks the platform again rather than take it for failed.
			r.State, r.Updated = push.StateSending, out.inDoubtSince
		}
		r.Rev = store.NextRev(r.Rev)
		recs = []store.Write{store.ProgressRecord(r, now)}
	case outcomeFailed:
		r.State, r.Reason, r.Finished, r.RetryAt = push.StateFailed, out.reason, now, time.Time{}
		recs = []store.Write{store.FirstFinalRecord(r, now)}
	}
	if out.kind == outcomeSent && w.cfg.AnnounceSent != nil {
		// Announced before it is recorded: the platform has the message whatever the store
		// does, and its receipt comes within seconds. A store that cannot take the sent
		// record now (it is retried) must not make the front ends refuse that receipt as
		// one for a message this service never sent.
		w.cfg.AnnounceSent(r, res.openID)
	}
	var err error
	if out.kind == outcomeFailed && r.MsgID == 0 && r.Attempts > 0 {
		var sent bool
		if sent, err = w.failAfterCalls(ctx, msg, &r); sent {
			out = Sent(r.MsgID) // counted and answered as the send it was
		}
	} else {
		err = w.record(ctx, msg, recs)
	}
	if errors.Is(err, store.ErrFinalExists) {
		// The push had an outcome already (another copy of this message sent it, and its
		// receipt may have come): the first one stays, and is the one the front ends are
		// told.
		if first, ferr := w.cfg.Store.Current(ctx, r.UcsID); ferr == nil && (first.State.Final() || first.State == push.StateSent) {
			r = first
		}
		err = nil
	}
	if err != nil {
		// The worker stops before the store took the outcome: the message comes back to
		// another worker, which reads the attempt's record and counts the call made once.
		w.answer(ctx, msg, r, Snooze("recording the outcome: "+err.Error(), 0), res)
		return
	}
	if out.kind == outcomeSent || res.platformCode != "" && out.kind == outcomeFailed {
		w.cfg.Metrics.Delivered(now.Sub(r.Accepted).Seconds())
	}
	switch out.kind {
	case outcomeRetry:
		w.cfg.Metrics.Delivery(metrics.OutcomeRetry, "")
		log.Info("delivery will be retried", "ucsId", r.UcsID, "attempt", r.Attempts, "in", out.delay, "reason", out.reason)
		_ = msg.NakWithDelay(out.delay)
	case outcomeFailed:
		w.cfg.Metrics.Delivery(metrics.OutcomeFailed, out.class)
		if out.exhausted && w.cfg.DeadLetter != nil {
			w.cfg.Metrics.DeadLetter()
		}
		log.Info("delivery failed", "ucsId", r.UcsID, "attempts", r.Attempts, "reason", out.reason)
		_ = msg.Ack()
		if w.cfg.Announce != nil {
			w.cfg.Announce(r)
		}
	default:
		w.refused.Store(nil)
		w.cfg.Metrics.Delivery(metrics.OutcomeSent, "")
		log.Debug("delivery sent", "ucsId", r.UcsID, "attempt", r.Attempts, "msgId", out.msgID)
		_ = msg.Ack()
	}
}

// keepAlive tells the queue every heartbeat that msg is still being worked on, until the
// function it returns is called. A message handled within a heartbeat costs one timer.
func keepAlive(msg jetstream.Msg) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	var beat func()
	beat = func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		_ = msg.InProgress()
		t = time.AfterFunc(heartbeat, beat)
	}
	mu.Lock()
	t = time.AfterFunc(heartbeat, beat)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// record writes the outcome of an attempt, and keeps trying while the store refuses it: the
// platform has answered, and asking it again would only repeat the call. A push that had a
// final result already answers store.ErrFinalExists.
func (w *Worker) record(ctx context.Context, msg jetstream.Msg, recs []store.Write) error {
	var exists error
	err := w.keepTrying("recording an outcome", msg, func() error {
		err := w.cfg.Events.Write(ctx, recs...)
		if errors.Is(err, store.ErrFinalExists) {
			exists, err = err, nil
		}
		return err
	})
	if err != nil {
		return err
	}
	return exists
}

// keepTrying calls f until it succeeds, every StoreRetry: the message is kept from redelivery
// meanwhile. It gives up, with f's last error, only when the worker stops.
func (w *Worker) keepTrying(what string, msg jetstream.Msg, f func() error) error {
	err := f()
	if err == nil {
		return nil
	}
	w.cfg.Logger.Warn(what+" failed; trying again", "ucsId", queue.IDOfSubject(msg.Subject()), "in", w.cfg.StoreRetry, "err", err)
	for w.sleep(w.cfg.StoreRetry) {
		if err = f(); err == nil {
			return nil
		}
	}
	return err
}

// poison ends a message that does not decode. Nothing the front end publishes fails to
// decode, so it can never be delivered: rather than being retried forever in front of the
// others, it ends failed with the reason under the ucsId its subject names, a copy goes to the
// dead letters, and it leaves the queue. No attempt was made.
func (w *Worker) poison(ctx context.Context, msg jetstream.Msg, decodeErr error) {
	log := w.cfg.Logger
	id := queue.IDOfSubject(msg.Subject())
	reason := "undecodable message: " + decodeErr.Error()
	log.Error("undecodable message fails", "ucsId", id, "subject", msg.Subject(), "err", decodeErr)
	if w.cfg.DeadLetter != nil {
		if err := w.cfg.DeadLetter(ctx, msg, reason, 0); err != nil {
			log.Warn("dead-lettering failed; message will be retried", "ucsId", id, "subject", msg.Subject(), "err", err)
			_ = msg.NakWithDelay(w.cfg.StoreRetry)
			return
		}
	}
	var r push.Result
	if id != "" {
		now := w.cfg.Now()
		// The client from the subject: its own lookup finds the failure.
		r = push.Result{UcsID: id, ClientID: queue.ClientOfSubject(msg.Subject()), State: push.StateFailed, Reason: reason,
			Updated: now, Finished: now}
		if meta, err := msg.Metadata(); err == nil {
			r.Accepted = meta.Timestamp
		}
		if err := w.cfg.Events.Write(ctx, store.FinalRecord(r, now)); err != nil {
			log.Warn("recording outcome failed; message will be retried", "ucsId", id, "err", err)
			_ = msg.NakWithDelay(w.cfg.StoreRetry)
			return
		}
	}
	// Counted once it ends: a copy handed back (the store refused its record) is copied to the
	// dead letters again, which the stream's duplicate check keeps once.
	if w.cfg.DeadLetter != nil {
		w.cfg.Metrics.DeadLetter()
	}
	w.cfg.Metrics.Delivery(metrics.OutcomeFailed, "undecodable")
	_ = msg.Term()
	if r.UcsID != "" && w.cfg.Announce != nil {
		w.cfg.Announce(r) // the front ends' memory and the operations page
	}
}

// attemptResult is what one delivery came to: the outcome, and the follower it went to.
type attemptResult struct {
	done         bool // an earlier copy of the message was delivered: nothing to do
	out          Outcome
	openID       string
	platformCode string // the errcode label of the platform's refusal, "" if none
	// inDoubtSince, when not zero, is when a call was made whose outcome is unknown and that
	// no later call settled (see askAgain).
	inDoubtSince time.Time
}

// deliver delivers m once: finds the follower, waits at the gate (a pause, the send budget),
// records the attempt and calls the platform. r is the message's record: its Attempts are the
// calls made so far, and grow by the one made here. first says that no record of m exists yet;
// inDoubt that its last attempt, whose call was made at since, was under way (its outcome
// unknown) when m was handed back.
func (w *Worker) deliver(ctx context.Context, m push.Message, msg jetstream.Msg, r *push.Result, first, inDoubt bool, since time.Time) attemptResult {
	// follower is whom the call goes to: the follower a call in doubt went to (see
	// push.Result.To), or, for a record of an earlier version that names none, the one bound now
	// even if they left since (the platform answers a call it took with its msgid); else the
	// follower bound now. A first delivery, which has not read the push's history, reads it
	// before failing the push for its binding: an earlier copy's call in doubt is asked again.
	follower := func() (string, *attemptResult) {
		if inDoubt && r.To != "" {
			return r.To, nil
		}
		openID, refused := w.recipient(ctx, m.UserID, inDoubt)
		if refused == nil || !first || refused.out.kind != outcomeFailed {
			return openID, refused
		}
		res, doubt := w.earlier(ctx, r, &first)
		switch {
		case res != nil:
			return "", res
		case doubt.IsZero():
			return "", refused // with the attempts of the history, if any
		}
		inDoubt, since = true, doubt
		if r.To != "" {
			return r.To, nil
		}
		return w.recipient(ctx, m.UserID, true)
	}
	openID, refused := follower()
	if refused != nil {
		return *refused
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
	tm := platform.TemplateMessage{ToUser: openID, TemplateID: tpl.TemplateID, URL: m.URL, ClientMsgID: m.UcsID, Data: data}
	// A push past its age fails unsent, before it takes a place in the send budget and after
	// any wait at the gate; but one whose last call's outcome is unknown is asked again (the
	// platform answers a call it took with its msgid): it may be sent.
	expired := func() bool {
		return w.cfg.MaxAge > 0 && !inDoubt && !w.cfg.Now().Before(r.Accepted.Add(w.cfg.MaxAge))
	}
	// adoptDoubt makes the attempt the call in doubt an earlier copy made at doubt (r holds
	// its attempts and follower), to be asked again.
	adoptDoubt := func(doubt time.Time) {
		inDoubt, since = true, doubt
		if r.To != "" {
			tm.ToUser = r.To
		}
	}
	// pastAge is the outcome of a push past its age, nil when it is not past it or an earlier
	// copy's call in doubt was adopted instead (again: it goes through the gate as that call).
	pastAge := func() (res *attemptResult, again bool) {
		if !expired() {
			return nil, false
		}
		res, doubt := w.pastAge(ctx, r, &first)
		if res == nil {
			adoptDoubt(doubt)
		}
		return res, res == nil
	}
	regated := false // the message went through the gate again for a record that took long
	for {
		if res, again := pastAge(); res != nil {
			return *res
		} else if again {
			continue
		}
		if gerr := w.gate(ctx, r, inDoubt, first); errors.Is(gerr, errStopping) {
			return attemptResult{out: Snooze(gerr.Error(), 0)}
		} else if errors.Is(gerr, errOwnPause) {
			return attemptResult{out: Snooze(gerr.Error(), handBack)}
		} else if gerr != nil {
			return attemptResult{out: Snooze("send budget: "+gerr.Error(), w.cfg.StoreRetry)}
		}
		gated := w.cfg.Now()
		if res, again := pastAge(); res != nil {
			return *res
		} else if again {
			continue
		}
		// The wait at the gate may have been long (a pause of the account lasts until its
		// quota is reset): the student may have unbound or moved to another follower meanwhile,
		// and the message goes to the follower bound now. One whose earlier call's outcome is
		// unknown keeps that call's follower: the platform may have taken it under the same
		// client_msg_id, and a call to another follower could reach a second person.
		if !inDoubt {
			if tm.ToUser, refused = follower(); refused != nil {
				return *refused
			}
		}
		// The attempt is recorded before the call, with the follower it goes to, so that it
		// counts even if this worker dies before the platform answers, and is asked again of
		// the same follower.
		r.Attempts++
		r.To = tm.ToUser
		var earlier *earlierDoubt
		switch done, err := w.markAttempt(ctx, r, &first, inDoubt, since); {
		case done:
			return attemptResult{done: true}
		case errors.Is(err, errExhausted):
			return attemptResult{out: w.cfg.Policy.GiveUp(r.Attempts, r.LastError)}
		case errors.As(err, &earlier):
			adoptDoubt(earlier.since) // through the gate again, as the call in doubt it is
			continue
		case err != nil:
			r.Attempts--
			return attemptResult{out: Snooze(err.Error(), w.cfg.StoreRetry)}
		}
		// The gate let the message through before its record was written. A pause may have
		// begun since; and budget tokens held through a slow or unreachable store would all be
		// spent at once when it answers, past the rate. So a paused message, or one whose
		// budget token is older than budgetFresh, is taken back and goes through the gate
		// again (for a slow record once: a store slow throughout must not hold it for ever).
		_, paused := w.paused()
		if stale := w.cfg.Budget != nil && !regated && w.cfg.Now().Sub(gated) > budgetFresh; paused || stale {
			regated = regated || stale
			if err := w.takeBack(ctx, msg, r, r.LastError, inDoubt, since); err != nil {
				return attemptResult{out: Snooze(err.Error(), w.cfg.StoreRetry)}
			}
			first = false // its record is written
			continue
		}
		called := w.cfg.Now()
		id, err := w.send(ctx, tm)
		// A call the platform refused for the account, or none made, tells nothing of an
		// earlier call whose outcome is unknown: that doubt stays.
		wasInDoubt := inDoubt
		inDoubt = false
		if st, ok := w.selfPause(err); ok {
			// This worker's address or its access token, not the message nor the account:
			// the call, if one was made, does not count, and the message goes back to the
			// queue at once, for another worker.
			why := w.pauseSelf(st)
			if err := w.takeBack(ctx, msg, r, why, wasInDoubt, since); err != nil {
				return attemptResult{out: Snooze(err.Error(), w.cfg.StoreRetry)}
			}
			return attemptResult{out: Snooze(why, handBack)}
		}
		if st, ok := w.accountPause(ctx, err); ok {
			// Not the message's doing: the call does not count, and the message waits
			// at the gate with every other until sending resumes.
			inDoubt = wasInDoubt
			if err := w.takeBack(ctx, msg, r, st.Explain(w.cfg.Location), inDoubt, since); err != nil {
				return attemptResult{out: Snooze(err.Error(), w.cfg.StoreRetry)}
			}
			continue
		}
		if errors.As(err, new(*platform.NotSentError)) {
			// No call went out (no access token to be had) and no pause holds the message: the
			// attempt does not count, and the message comes back after a while.
			inDoubt = wasInDoubt
			w.cfg.Logger.Warn("no access token could be had from the platform", "ucsId", r.UcsID, "err", err)
			why := "no access token: " + platform.Reason(err)
			if err := w.takeBack(ctx, msg, r, why, inDoubt, since); err != nil {
				return attemptResult{out: Snooze(err.Error(), w.cfg.StoreRetry)}
			}
			return attemptResult{out: Snooze(why, w.cfg.StoreRetry)}
		}
		code := platform.ErrorLabel(err)
		res := attemptResult{openID: tm.ToUser, platformCode: code}
		switch reason, permanent := platform.Permanent(err); {
		case err == nil:
			res.out = Sent(id)
		case permanent:
			res.out = failedAs(code, reason)
		default:
			res.out = Retry(platform.Reason(err), 0)
			if code == "network" || code == "timeout" {
				w.cfg.Logger.Info("the platform's answer did not come", "ucsId", r.UcsID, "err", err)
			}
			// A refusal says this call was not taken, but not whether an earlier one in doubt
			// was; a call that got no answer may have been.
			switch {
			case wasInDoubt:
				res.inDoubtSince = since
			case mayHaveBeenTaken(err):
				res.inDoubtSince = called
			}
		}
		return res
	}
}

// earlier reads, for a first delivery (which has not read the push's history), the history an
// earlier copy may have left (see markAttempt), before the push fails without a call: res is
// the outcome when that copy's delivery stands (done) or the history cannot be read; doubt,
// when not zero, is when that copy made a call in doubt, to be asked again (r holds its
// attempts and follower); otherwise r holds the history's attempts, if any.
func (w *Worker) earlier(ctx context.Context, r *push.Result, first *bool) (res *attemptResult, doubt time.Time) {
	if !*first {
		return nil, time.Time{}
	}
	cur, err := w.cfg.Store.Current(ctx, r.UcsID)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return &attemptResult{out: Snooze("reading earlier attempts: "+err.Error(), w.cfg.StoreRetry)}, time.Time{}
	case cur.State == push.StateSent || cur.State.Final():
		if err := w.settle(ctx, cur); err != nil {
			return &attemptResult{out: Snooze("recording the sent result: "+err.Error(), w.cfg.StoreRetry)}, time.Time{}
		}
		return &attemptResult{done: true}, time.Time{}
	default:
		*first = false
		r.Attempts, r.LastError, r.Rev = cur.Attempts, cur.LastError, store.Rebase(r.Rev, cur.Rev)
		if cur.State == push.StateSending {
			r.To = cur.To // "" in a record of an earlier version: the follower bound now
			return nil, cur.Updated
		}
	}
	return nil, time.Time{}
}

// pastAge is what comes of a push past its age: it fails unsent, unless a first delivery finds
// an earlier copy's history (see earlier).
func (w *Worker) pastAge(ctx context.Context, r *push.Result, first *bool) (res *attemptResult, doubt time.Time) {
	if res, doubt := w.earlier(ctx, r, first); res != nil || !doubt.IsZero() {
		return res, doubt
	}
	return &attemptResult{out: Expired(w.cfg.MaxAge, r.LastError)}, time.Time{}
}

// recipient returns the follower bound to userID, or the outcome of a push that cannot go out:
// failed if the user number has no binding or (unless left, for a call in doubt asked again)
// its follower left the official account, snoozed if the store cannot say.
func (w *Worker) recipient(ctx context.Context, userID string, left bool) (openID string, refused *attemptResult) {
	b, err := w.binding(ctx, userID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", &attemptResult{out: failedAs("no_binding", "no binding: user "+userID+" has no follower id of the official account")}
	case err != nil:
		// The store could not say who the recipient is: not the message's fault, and no
		// call of the platform.
		return "", &attemptResult{out: Snooze("binding lookup: "+err.Error(), w.cfg.StoreRetry)}
	case !b.Following && !left:
		return "", &attemptResult{out: failedAs("not_following", "not following: user "+userID+" does not follow the official account")}
	}
	return b.OpenID, nil
}

// markAttempt records that attempt r.Attempts is about to call the platform, and returns once
// the store has it: a write the store may or may not have taken is written again, never left in
// doubt, so that the recorded attempts are the calls made. It reports done when an earlier copy
// of the message was delivered, and adopts the attempts of an earlier copy's history when there
// is one (first becomes false). It gives up, with an error, only when the worker stops or the
// history cannot be read.
func (w *Worker) markAttempt(ctx context.Context, r *push.Result, first *bool, inDoubt bool, since time.Time) (done bool, err error) {
	for {
		mark := *r
		mark.State, mark.Updated, mark.RetryAt = push.StateSending, w.cfg.Now(), time.Time{}
		if inDoubt {
			// A repeat of a call in doubt: the record keeps that call's time, from which the
			// platform's duplicate check runs, should this worker die during the repeat.
			mark.Updated = since
		}
		mark.Rev = store.NextRev(r.Rev)
		rec := store.ProgressRecord(mark, mark.Updated)
		if *first && r.Attempts == 1 {
			mark.Rev = r.Rev // the first attempt's record: inserted whole, not an entry
			rec = store.FirstAttemptRecord(mark, mark.Updated)
		}
		for {
			err = w.cfg.Events.Write(ctx, rec)
			if err == nil || errors.Is(err, store.ErrHistory) {
				break
			}
			w.cfg.Logger.Warn("recording an attempt failed; trying again", "ucsId", r.UcsID, "in", w.cfg.StoreRetry, "err", err)
			if !w.sleep(w.cfg.StoreRetry) {
				w.unmark(ctx, mark, *first, inDoubt, since)
				return false, fmt.Errorf("recording the attempt: %w", err)
			}
		}
		if err == nil {
			r.Rev = mark.Rev
			return false, nil
		}
		// The push has a progress record: this one, written by a try whose answer was
		// lost, or one of an earlier copy of the message (the queue gave it out again).
		cur, err := w.cfg.Store.Current(ctx, r.UcsID)
		switch {
		case err != nil:
			return false, fmt.Errorf("reading earlier attempts: %w", err)
		case cur.State == push.StateSent || cur.State.Final():
			if err := w.settle(ctx, cur); err != nil {
				return false, fmt.Errorf("recording the sent result: %w", err)
			}
			return true, nil
		case cur.State == push.StateSending && cur.Attempts == mark.Attempts && cur.Updated.UnixMilli() == mark.Updated.UnixMilli():
			return false, nil // its own
		}
		r.Rev = store.Rebase(r.Rev, cur.Rev)
		if w.usedUp(cur) {
			r.Attempts, r.LastError = cur.Attempts, cur.LastError
			return false, errExhausted
		}
		if cur.State == push.StateSending && !inDoubt {
			// An earlier copy's call is in doubt: it is asked again as that copy's, of the
			// follower it went to (see deliver; a record of an earlier version names none:
			// the follower bound now), and nothing is recorded here.
			r.Attempts, r.LastError, r.To, *first = cur.Attempts, cur.LastError, cur.To, false
			return false, &earlierDoubt{since: cur.Updated}
		}
		r.Attempts, r.LastError, *first = cur.Attempts+1, cur.LastError, false
	}
}

// earlierDoubt is markAttempt's answer when the push's history shows an earlier copy's call in
// doubt, made at since: r holds that copy's attempts and follower.
type earlierDoubt struct{ since time.Time }

func (e *earlierDoubt) Error() string { return "an earlier copy's call is in doubt" }

// failAfterCalls records the failure r of a push that called the platform without learning a
// msgid. An earlier call's answer may have been lost while the platform took the message (its
// worker stopped), and the front ends then apply its delivery receipt: the receipt and this
// failure are two final results of one push. Both are inserted at the same record
// (store.FirstFailureAfterCalls), so the store keeps whichever came first, and no lookup ever
// sees the other: the failure, copied then to <ucsId>; or the receipt, and sent is true, r its
// result (the front end that applied it has told the others), and its sent record is written.
// ErrFinalExists: <ucsId> holds another copy's sent record or result, which stays.
func (w *Worker) failAfterCalls(ctx context.Context, msg jetstream.Msg, r *push.Result) (sent bool, err error) {
	err = w.record(ctx, msg, []store.Write{store.FirstFailureAfterCalls(*r, r.Updated)})
	if errors.Is(err, store.ErrFinalExists) {
		var first push.Result
		err = w.keepTrying("reading the push's final result", msg, func() (err error) {
			first, err = w.cfg.Store.ReceiptResult(ctx, r.UcsID)
			return err
		})
		if err != nil {
			return false, err
		}
		if first.MsgID != 0 {
			*r = first
			return true, w.record(ctx, msg, []store.Write{store.ReceiptCopy(first, w.cfg.Now())})
		}
		*r = first // this failure, as an earlier copy recorded it
	}
	if err != nil {
		return false, err
	}
	return false, w.record(ctx, msg, []store.Write{store.FirstFinalRecord(*r, r.Updated)})
}

// settle completes the records of a push an earlier copy of the message delivered, cur being
// its current record: a receipt's final result recorded before the sent record (the worker
// that sent it stopped before writing it, and the front ends applied the receipt from its
// announcement), and a worker's failure, each get their copy at <ucsId>, which lookups read
// first once the push leaves the queue. Otherwise nothing is written.
func (w *Worker) settle(ctx context.Context, cur push.Result) error {
	switch {
	case !cur.State.Final():
		return nil
	case cur.MsgID == 0:
		// A worker's failure, which may be at <ucsId>/f only (failAfterCalls stopped before
		// its copy): the copy, which one written before makes a no-op.
		return w.cfg.Events.Write(ctx, store.FinalRecord(cur, w.cfg.Now()))
	}
	return w.cfg.Events.Write(ctx, store.ReceiptCopy(cur, w.cfg.Now()))
}

// usedUp reports whether a push's record shows its attempts used up, the last one failed (not
// under way: that call's outcome is unknown, and it is asked again).
func (w *Worker) usedUp(cur push.Result) bool {
	p := w.cfg.Policy
	return p.MaxAttempts > 0 && cur.Attempts >= p.MaxAttempts && cur.State == push.StateQueued
}

// unmarkWait bounds the one write of unmark.
const unmarkWait = 2 * time.Second

// unmark puts back, with one write, what the record said before markAttempt tried to record
// mark, the attempt mark.Attempts, which is not made: the worker stops, and the store may have
// taken that record with its answer lost. Left, it would say a call was under way, and the
// next worker would count a call never made. Before it, the push was queued with one attempt
// fewer, or, when the call before was in doubt, still sending. A first delivery has not read
// the push's history, which an earlier copy may have left (a call in doubt among it): it puts
// back only its own record, and leaves any other (or, unable to read, counts a call too many
// rather than erase a call in doubt). When it finds no record, its own may still be on the way
// to a slow store, which would take it after the writer gave up waiting: the record of no
// attempt is inserted in its place, and the late insert finds a history and is refused.
func (w *Worker) unmark(ctx context.Context, mark push.Result, first, inDoubt bool, since time.Time) {
	now := w.cfg.Now()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unmarkWait)
	defer cancel()
	back := untried(mark, inDoubt, since, now)
	back.Rev = store.NextRev(mark.Rev) // above the mark, should it reach the store after this
	if first {
		cur, err := w.cfg.Store.Current(wctx, mark.UcsID)
		if errors.Is(err, store.ErrNotFound) {
			if err = w.cfg.Events.Write(wctx, store.FirstAttemptRecord(back, now)); !errors.Is(err, store.ErrHistory) {
				if err != nil {
					w.cfg.Logger.Warn("putting back the record of an attempt not made failed", "ucsId", mark.UcsID, "err", err)
				}
				return
			}
			cur, err = w.cfg.Store.Current(wctx, mark.UcsID) // a record landed meanwhile
		}
		if err != nil || cur.State != push.StateSending || cur.Attempts != mark.Attempts || cur.Updated.UnixMilli() != mark.Updated.UnixMilli() {
			return
		}
	}
	if err := w.cfg.Events.Write(wctx, store.ProgressRecord(back, now)); err != nil {
		w.cfg.Logger.Warn("putting back the record of an attempt not made failed", "ucsId", mark.UcsID, "err", err)
	}
}

// untried is r as its record was before attempt r.Attempts, which made no call: queued with
// one attempt fewer, or, when the call before it, made at since, was in doubt, still sending
// since then (see gate): the time by which the platform's duplicate check of that call ends.
func untried(r push.Result, inDoubt bool, since, now time.Time) push.Result {
	r.Attempts--
	r.State, r.Updated, r.RetryAt = push.StateQueued, now, time.Time{}
	if inDoubt {
		r.State, r.Updated = push.StateSending, since
	} else {
		r.To = ""
	}
	return r
}

// errExhausted is a message whose history shows its attempts used up, the last one failed, by
// a copy that stopped before its final record: it fails without another call.
var errExhausted = errors.New("its attempts are used up")

// takeBack takes back the attempt recorded before a call that did not count (the platform
// refused the account or this worker, not the message; or no call went out) and records the
// message held, and why (lastError). The record is written again until the store has it, so
// that the recorded attempts stay the calls made; an error only when the worker stops first.
// When the call before was in doubt, the record keeps saying sending, as gate explains. Until
// when it is held is not recorded: a pause may be lifted before its end, and a copy handed out
// again waits for a recorded retry time (handle); a lookup names the pause's end while it holds.
func (w *Worker) takeBack(ctx context.Context, msg jetstream.Msg, r *push.Result, lastError string, inDoubt bool, since time.Time) error {
	now := w.cfg.Now()
	held := untried(*r, inDoubt, since, now)
	held.Rev = store.NextRev(r.Rev)
	r.Attempts, r.Rev = held.Attempts, held.Rev
	held.LastError = lastError
	return w.keepTrying("recording a call that did not count", msg, func() error {
		return w.cfg.Events.Write(ctx, store.ProgressRecord(held, now))
	})
}

// sleep waits d, and reports false if the worker stops first.
func (w *Worker) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.stopping.Done():
		return false
	}
}

// send asks the platform to send tm (Config.Platform counts its calls, as the platform
// client's OnSend does).
func (w *Worker) send(ctx context.Context, tm platform.TemplateMessage) (int64, error) {
	sctx, cancel := context.WithTimeout(ctx, w.cfg.SendTimeout)
	defer cancel()
	return w.cfg.Platform.SendTemplate(sctx, tm)
}

// accountPauseFor bounds a pause for a problem of the account: sending is tried again after
// it even if no operator resumed it.
const accountPauseFor = 24 * time.Hour

// quotaRenewalGrace is how long after the daily quota's renewal a 45009 is taken for the
// platform not having renewed it yet, and pauses sending for quotaRenewalRetry only.
const (
	quotaRenewalGrace = 10 * time.Minute
	quotaRenewalRetry = time.Minute
)

// accountPause pauses sending for every worker when err is the platform refusing the account
// rather than the message: its daily quota used up (until the quota renews), its per-minute
// limit hit (until the next minute), or an
// account problem an operator must fix (platform.AccountProblem). It reports the pause in
// force; false when err is no such refusal, or the pause could not be set (the message is then
// retried as usual rather than calling the platform again at once).
func (w *Worker) accountPause(ctx context.Context, err error) (sending.PauseState, bool) {
	if err == nil || w.cfg.Pause == nil {
		return sending.PauseState{}, false
	}
	now := w.cfg.Now()
	var st sending.PauseState
	var pe *platform.Error
	hasCode := errors.As(err, &pe)
	reason, action, isAccount := platform.AccountProblem(err)
	switch {
	case isAccount:
		st = sending.PauseState{Until: now.Add(accountPauseFor), Reason: reason, Action: action}
		w.refused.Store(&st)
	case hasCode && pe.Code == platform.CodeMinuteQuota:
		// "retry next minute": every message would meet it until then.
		st = sending.PauseState{Until: now.Truncate(time.Minute).Add(time.Minute),
			Reason: "45011: the platform's per-minute limit was hit"}
	case hasCode && pe.Code == platform.CodeDailyQuota:
		st = sending.PauseState{Until: w.cfg.QuotaReset(now), Reason: "45009: the platform's daily quota is used up"}
		if renewed := st.Until.AddDate(0, 0, -1); now.Sub(renewed) < quotaRenewalGrace {
			// The quota renewed a moment ago by this worker's clock: the platform's clock
			// may be behind it, or the call left before the renewal. A day's pause would
			// be wrong; a short one lets a send after the renewal tell.
			st.Until = now.Add(quotaRenewalRetry)
		}
	default:
		return sending.PauseState{}, false
	}
	// A call the platform refused for the account ends as a retry, counted once the message
	// waits at the gate (a pause that cannot be set sends it the ordinary retry's way, which
	// counts it there); a send that never went out counts nothing.
	called := !errors.As(err, new(*platform.NotSentError))
	// A pause in force that lasts as long stands; a shorter one (the per-minute limit) gives
	// way to this one (the daily quota, a refusal of the account), which Set keeps.
	if cur, paused := w.cfg.Pause.Paused(); paused && !cur.Until.Before(st.Until) {
		if called {
			w.cfg.Metrics.Delivery(metrics.OutcomeRetry, "")
		}
		return cur, true
	}
	if err := w.cfg.Pause.Set(ctx, st); err != nil {
		w.cfg.Logger.Error("pausing sending failed; the message will be retried", "err", err)
		return sending.PauseState{}, false
	}
	if called {
		w.cfg.Metrics.Delivery(metrics.OutcomeRetry, "")
	}
	if st.Action != "" {
		w.cfg.Logger.Error("the platform refuses the official account; sending paused for every worker",
			"reason", st.Reason, "action", st.Action)
	} else {
		w.cfg.Logger.Warn("the platform's quota is used up; sending paused", "reason", st.Reason, "until", st.Until)
	}
	return st, true
}

// showHeld records a message held back by a pause (or handed back before its call) as queued,
// with the reason, and the attempts made; not the pause's end (see takeBack).
func (w *Worker) showHeld(ctx context.Context, r *push.Result, st sending.PauseState, first bool) {
	now := w.cfg.Now()
	held := *r
	held.State, held.Updated, held.RetryAt = push.StateQueued, now, time.Time{}
	held.LastError = st.Explain(w.cfg.Location)
	// A first delivery has not read the push's history, which an earlier copy may have left
	// (see markAttempt): its record is inserted, and the attempt's record finds the history.
	rec := store.FirstAttemptRecord(held, now)
	if !first {
		r.Rev = store.NextRev(r.Rev)
		held.Rev = r.Rev
		rec = store.ProgressRecord(held, now)
	}
	if err := w.cfg.Events.Write(ctx, rec); err != nil && !errors.Is(err, store.ErrHistory) {
		w.cfg.Logger.Warn("recording a paused message failed", "ucsId", r.UcsID, "err", err)
	}
}

// Forget drops what the worker cached of userID's binding, which a student just changed: the
// next message to them reads the store. A read of the store under way meanwhile may have seen
// the binding before the change: it is not cached.
func (w *Worker) Forget(userID string) {
	w.forgetMu.Lock()
	defer w.forgetMu.Unlock()
	w.forgets++
	w.bindings.Remove(userID)
}

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
	w.forgetMu.Lock()
	forgets := w.forgets
	w.forgetMu.Unlock()
	b, err := w.cfg.Store.Binding(ctx, userID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return b, err // not cached: an outage is not an answer
	}
	w.forgetMu.Lock()
	defer w.forgetMu.Unlock()
	// A follower who left is not cached: the platform's subscribe event, when they follow
	// again, changes the store and tells no worker, and their next message must see it.
	if w.forgets == forgets && (err != nil || b.Following) {
		w.bindings.Add(userID, cachedBinding{b: b, err: err, expires: now.Add(w.cfg.BindingTTL)})
	}
	return b, err
}
