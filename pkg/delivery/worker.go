package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/store"
)

// Sender sends template messages; *platform.Client implements it.
type Sender interface {
	SendTemplate(ctx context.Context, m platform.TemplateMessage) (int64, error)
}

// Store is what a worker reads; *store.Store implements it.
type Store interface {
	Result(ctx context.Context, ucsID string) (store.Result, error)
	Binding(ctx context.Context, userID string) (store.Binding, error)
}

// Events records delivery events; *store.Writer implements it.
type Events interface {
	Write(ctx context.Context, evs ...store.Event) error
	Post(ev store.Event)
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
	// StoreRetry is the delay before a message whose outcome could not be recorded is tried
	// again. Default 5s.
	StoreRetry time.Duration
	Now        func() time.Time
	Logger     *slog.Logger
}

// Worker delivers messages from the queue.
type Worker struct {
	cfg      Config
	bindings bindingCache
}

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
	return &Worker{cfg: cfg, bindings: bindingCache{m: map[string]cachedBinding{}, max: 100_000}}, nil
}

// Run delivers messages until ctx ends, then finishes the deliveries under way and the
// messages already fetched, and returns.
func (w *Worker) Run(ctx context.Context) error {
	it, err := w.cfg.Consumer.Messages(jetstream.PullMaxMessages(2 * w.cfg.Concurrency))
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	go func() {
		<-ctx.Done()
		// Drain: stop pulling, but hand out what was already fetched so it is answered now
		// rather than redelivered after the ack wait.
		it.Drain()
	}()
	// Deliveries under way finish even when ctx ends: a half-recorded attempt would only be
	// repeated later.
	work := context.WithoutCancel(ctx)
	sem := make(chan struct{}, w.cfg.Concurrency)
	var wg sync.WaitGroup
	for {
		msg, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				break
			}
			w.cfg.Logger.Warn("fetching messages failed", "err", err)
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			w.Handle(work, msg)
		}()
	}
	wg.Wait()
	return nil
}

// Handle delivers one message from the queue and answers the queue: ack once the outcome is
// recorded, or a delayed nak for a retry. An outcome that cannot be recorded is not acked, so
// the message comes back.
func (w *Worker) Handle(ctx context.Context, msg jetstream.Msg) {
	log := w.cfg.Logger
	m, err := push.DecodeMessage(msg.Data())
	if err != nil {
		// Nothing the front end publishes fails to decode; a message that does can never be
		// delivered, so it is removed rather than retried forever.
		log.Error("dropping undecodable message", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	attempt := 1
	if meta, err := msg.Metadata(); err == nil {
		attempt = int(meta.NumDelivered)
	}
	if attempt > 1 && w.alreadyDone(ctx, m.UcsID) {
		// A previous attempt was recorded but its ack was lost (a worker died in between).
		_ = msg.Ack()
		return
	}
	now := w.cfg.Now()
	base := store.Event{UcsID: m.UcsID, ClientID: m.ClientID, UserID: m.UserID, Type: string(m.Type), Attempt: attempt}
	ev := base
	ev.Kind, ev.At = store.KindAttempt, now
	w.cfg.Events.Post(ev)

	out := w.cfg.Policy.Apply(w.deliver(ctx, m), attempt)

	ev = base
	ev.At = w.cfg.Now()
	switch out.kind {
	case outcomeSent:
		ev.Kind, ev.MsgID = store.KindSent, out.msgID
	case outcomeRetry:
		ev.Kind, ev.Error, ev.RetryAt = store.KindRetry, out.reason, ev.At.Add(out.delay)
	case outcomeFailed:
		ev.Kind, ev.Error = store.KindFailed, out.reason
	}
	if err := w.cfg.Events.Write(ctx, ev); err != nil {
		log.Warn("recording outcome failed; message will be retried", "ucsId", m.UcsID, "err", err)
		_ = msg.NakWithDelay(w.cfg.StoreRetry)
		return
	}
	switch out.kind {
	case outcomeRetry:
		log.Info("delivery will be retried", "ucsId", m.UcsID, "attempt", attempt, "in", out.delay, "reason", out.reason)
		_ = msg.NakWithDelay(out.delay)
	case outcomeFailed:
		log.Info("delivery failed", "ucsId", m.UcsID, "attempt", attempt, "reason", out.reason)
		_ = msg.Ack()
	default:
		_ = msg.Ack()
	}
}

func (w *Worker) alreadyDone(ctx context.Context, ucsID string) bool {
	r, err := w.cfg.Store.Result(ctx, ucsID)
	return err == nil && (r.State == store.StateSent || r.State.Final())
}

// deliver makes one attempt.
func (w *Worker) deliver(ctx context.Context, m push.Message) Outcome {
	b, err := w.binding(ctx, m.UserID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Failed("no binding: user " + m.UserID + " has no follower id of the official account")
	case err != nil:
		return Retry("binding lookup: "+err.Error(), 0)
	case !b.Following:
		return Failed("not following: user " + m.UserID + " does not follow the official account")
	}
	tpl, ok := w.cfg.Templates[string(m.Type)]
	if !ok {
		return Failed("no template configured for type " + string(m.Type))
	}
	data := make(map[string]string, len(tpl.Fields))
	for field, keyword := range tpl.Fields {
		if v, ok := m.Data[field]; ok {
			data[keyword] = v
		}
	}
	sctx, cancel := context.WithTimeout(ctx, w.cfg.SendTimeout)
	defer cancel()
	id, err := w.cfg.Platform.SendTemplate(sctx, platform.TemplateMessage{
		ToUser: b.OpenID, TemplateID: tpl.TemplateID, URL: m.URL, ClientMsgID: m.UcsID, Data: data,
	})
	if err == nil {
		return Sent(id)
	}
	if reason, ok := platform.Permanent(err); ok {
		return Failed(reason)
	}
	return Retry(err.Error(), 0)
}

type cachedBinding struct {
	b       store.Binding
	err     error
	expires time.Time
}

// bindingCache keeps looked-up bindings briefly: a bulk send to thousands of users reads each
// binding once, not once per message, and an unsubscribe takes effect within the TTL (sooner
// still, as the platform itself refuses a non-follower).
type bindingCache struct {
	mu  sync.Mutex
	m   map[string]cachedBinding
	max int
}

func (w *Worker) binding(ctx context.Context, userID string) (store.Binding, error) {
	now := w.cfg.Now()
	c := &w.bindings
	c.mu.Lock()
	e, ok := c.m[userID]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.b, e.err
	}
	b, err := w.cfg.Store.Binding(ctx, userID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return b, err // not cached: an outage is not an answer
	}
	c.mu.Lock()
	if len(c.m) >= c.max {
		for k := range c.m {
			delete(c.m, k)
			if len(c.m) < c.max*9/10 {
				break
			}
		}
	}
	c.m[userID] = cachedBinding{b: b, err: err, expires: now.Add(w.cfg.BindingTTL)}
	c.mu.Unlock()
	return b, err
}
