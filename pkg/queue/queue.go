// Package queue carries accepted pushes from the front end to the workers on a NATS JetStream
// stream: the stream and subject names, the durable consumer all workers share, and the
// publisher that answers only after the stream has stored the message.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/push"
)

// SubjectPrefix starts the subject of every push; its ucsId follows it. A subject per message
// lets a lookup fetch a push still waiting in the stream by its ucsId alone (a direct get of the
// subject's last message), so the queue itself answers for queued pushes.
const SubjectPrefix = "ucs.push.mp."

// Subject is the subject the push ucsID is published on.
func Subject(ucsID string) string { return SubjectPrefix + ucsID }

// Config describes the stream and its consumer.
type Config struct {
	// Stream is the stream's name.
	Stream string
	// Consumer is the durable consumer's name.
	Consumer string
	// Replicas of the stream.
	Replicas int
	// MaxBytes bounds the stream; when full, publishing fails rather than dropping messages.
	MaxBytes int64
	// MaxAge is how long a message may wait.
	MaxAge time.Duration
	// AckWait is how long a delivered message may go unanswered before it is delivered again.
	AckWait time.Duration
	// MaxAckPending bounds messages delivered but not yet answered, over all workers.
	MaxAckPending int
}

// EnsureStream creates the stream or brings its configuration up to date. The stream is a work
// queue: a message is removed once a worker acknowledges it, and until then it is on disk,
// replicated. When the stream is full, new messages are refused, never old ones dropped.
func EnsureStream(ctx context.Context, js jetstream.JetStream, c Config) (jetstream.Stream, error) {
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        c.Stream,
		Description: "template message pushes accepted by the front end, awaiting delivery",
		Subjects:    []string{SubjectPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxBytes:    c.MaxBytes,
		MaxAge:      c.MaxAge,
		Discard:     jetstream.DiscardNew,
		// Lookups read waiting messages by subject from any replica, without a consumer.
		AllowDirect: true,
		// A subject is one push: a second message under the same ucsId is refused, never stored.
		MaxMsgsPerSubject:    1,
		DiscardNewPerSubject: true,
		// A push sent again under an Idempotency-Key carries its ucsId as message id: within
		// this window the stream answers the first PubAck again instead of storing it twice.
		// Pushes without a key carry no id and cost the window nothing.
		Duplicates: DedupeWindow,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", c.Stream, err)
	}
	return st, nil
}

// EnsureConsumer creates the durable pull consumer every worker shares, or updates it.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, c Config) (jetstream.Consumer, error) {
	if c.MaxAckPending == 0 {
		// Messages waiting out a retry delay count as pending; the bound is high so that a
		// platform outage's retries do not hold back new messages for long.
		c.MaxAckPending = 100_000
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, c.Stream, jetstream.ConsumerConfig{
		Durable:       c.Consumer,
		Description:   "delivery workers",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    -1, // the workers' retry policy decides when to give up
		MaxAckPending: c.MaxAckPending,
		FilterSubject: SubjectPrefix + ">",
	})
	if err != nil {
		return nil, fmt.Errorf("ensure consumer %s: %w", c.Consumer, err)
	}
	return cons, nil
}

// JetStream error codes of a stream that cannot take more: 10077 is a refused store (the
// stream's limits with DiscardNew), 10047 a server out of storage.
const (
	errCodeStoreFailed     jetstream.ErrorCode = 10077
	errCodeStorageExceeded jetstream.ErrorCode = 10047
)

// ErrFull is returned when the stream refuses a message because it is full.
var ErrFull = errors.New("the push queue is full")

// Publisher publishes accepted pushes.
type Publisher struct {
	js jetstream.JetStream
}

// NewPublisher returns a publisher on js.
func NewPublisher(js jetstream.JetStream) *Publisher { return &Publisher{js: js} }

// Publish stores m in the stream and returns once the stream acknowledged it; only then may
// its ucsId be given to the caller. Every push is published once, under a ucsId made for it,
// so the stream needs no de-duplication by message id (and keeps no table of ids for it).
func (p *Publisher) Publish(ctx context.Context, m push.Message) error {
	b, err := m.Encode()
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	if _, err := p.js.Publish(ctx, Subject(m.UcsID), b); err != nil {
		return publishError(m.UcsID, err)
	}
	return nil
}

// DedupeWindow is how long the stream remembers the message ids of pushes published with
// one (PublishBatch with dedupe).
const DedupeWindow = 10 * time.Minute

// batchWindow bounds the messages of one batch awaiting their PubAck at once: enough to keep
// the stream busy, few enough that many concurrent batches do not stall the connection.
const batchWindow = 256

// batchAckWait bounds the wait for one message's PubAck in a batch.
const batchAckWait = 10 * time.Second

// PublishBatch stores every message of ms in the stream with asynchronous publishes, at most
// batchWindow awaiting their PubAck at once, and returns once each has its answer: errs[i] is
// nil for a message the stream acknowledged (its ucsId may be given out), else why not. After
// the first failure the messages not yet sent are not tried (the queue is unavailable); they
// get that error too. With dedupe, each message carries its ucsId as message id, so that
// publishing it again (a retried request) stores nothing new: for a message the stream
// already holds, the answer is success.
func (p *Publisher) PublishBatch(ctx context.Context, ms []push.Message, dedupe bool) []error {
	errs := make([]error, len(ms))
	futs := make([]jetstream.PubAckFuture, len(ms))
	ctx, cancel := context.WithTimeout(ctx, batchAckWait)
	defer cancel()
	var failed error
	waited := 0
	wait := func(i int) {
		f := futs[i]
		if f == nil {
			return
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if !(dedupe && alreadyStored(err)) {
				errs[i] = publishError(ms[i].UcsID, err)
			}
		case <-ctx.Done():
			errs[i] = fmt.Errorf("publish %s: %w", ms[i].UcsID, ctx.Err())
		}
		if errs[i] != nil && failed == nil {
			failed = errs[i]
		}
	}
	for i := range ms {
		for i-waited >= batchWindow {
			wait(waited)
			waited++
		}
		if failed != nil {
			errs[i] = failed
			continue
		}
		b, err := ms[i].Encode()
		if err != nil {
			errs[i] = fmt.Errorf("encode message: %w", err)
			continue
		}
		var opts []jetstream.PublishOpt
		if dedupe {
			opts = append(opts, jetstream.WithMsgID(ms[i].UcsID))
		}
		f, err := p.js.PublishAsync(Subject(ms[i].UcsID), b, opts...)
		if err != nil {
			errs[i] = publishError(ms[i].UcsID, err)
			failed = errs[i]
			continue
		}
		futs[i] = f
	}
	for ; waited < len(ms); waited++ {
		wait(waited)
	}
	return errs
}

// alreadyStored reports whether a publish was refused because the stream holds a message on
// its subject: a push published again after the dedupe window, still waiting.
func alreadyStored(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStoreFailed &&
		strings.Contains(apiErr.Description, "per subject")
}

// publishError wraps a refused publish, as ErrFull when the stream is full.
func publishError(ucsID string, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeStoreFailed || apiErr.ErrorCode == errCodeStorageExceeded) {
		return fmt.Errorf("%w: %v", ErrFull, err)
	}
	return fmt.Errorf("publish %s: %w", ucsID, err)
}

// Waiting reads pushes that are still in the stream: accepted and not yet finished by a worker.
type Waiting struct {
	nc       *nats.Conn
	st       jetstream.Stream
	consumer string

	mu        sync.Mutex
	delivered uint64    // the highest stream sequence the workers' consumer has handed out
	checked   time.Time // when delivered was read
}

// deliveredEvery is how often Waiting reads how far the workers got: a push looked up may have
// reached a worker this long before the lookup says so.
const deliveredEvery = 250 * time.Millisecond

// NewWaiting returns a reader of st, as EnsureStream returned it on js (its configuration
// allows direct gets); consumer is the workers' durable consumer.
func NewWaiting(js jetstream.JetStream, st jetstream.Stream, consumer string) *Waiting {
	return &Waiting{nc: js.Conn(), st: st, consumer: consumer}
}

// ErrNotWaiting is returned by Get for a push that is not in the stream: unknown, or finished
// (a worker acknowledges a message only after recording its outcome).
var ErrNotWaiting = errors.New("not in the push queue")

// Get returns the push ucsID while it waits in the stream, with a direct get by its subject,
// and whether a worker may have received it yet: a push behind every message the workers'
// consumer has handed out has no attempt to report.
func (w *Waiting) Get(ctx context.Context, ucsID string) (push.Message, bool, error) {
	raw, err := w.st.GetLastMsgForSubject(ctx, Subject(ucsID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return push.Message{}, false, ErrNotWaiting
	}
	if err != nil {
		return push.Message{}, false, fmt.Errorf("get %s from the queue: %w", ucsID, err)
	}
	m, err := push.DecodeMessage(raw.Data)
	if err != nil {
		return push.Message{}, false, err
	}
	return m, raw.Sequence <= w.deliveredSeq(ctx), nil
}

// FromLeader is Get answered by the stream's leader. Any replica answers a direct get, and one
// may not yet hold a push the others acknowledged a moment ago; before a lookup says a push does
// not exist, the leader is asked.
func (w *Waiting) FromLeader(ctx context.Context, ucsID string) (push.Message, error) {
	req, err := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{Subject(ucsID)})
	if err != nil {
		return push.Message{}, err
	}
	reply, err := w.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+w.st.CachedInfo().Config.Name, req)
	if err != nil {
		return push.Message{}, fmt.Errorf("get %s from the queue's leader: %w", ucsID, err)
	}
	var resp struct {
		Message *struct {
			Data []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return push.Message{}, fmt.Errorf("get %s from the queue's leader: %w", ucsID, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return push.Message{}, ErrNotWaiting
	case resp.Error != nil:
		return push.Message{}, fmt.Errorf("get %s from the queue's leader: %w", ucsID, resp.Error)
	case resp.Message == nil:
		return push.Message{}, fmt.Errorf("get %s from the queue's leader: empty answer", ucsID)
	}
	return push.DecodeMessage(resp.Message.Data)
}

// deliveredSeq is how far the workers' consumer has handed out messages, read at most every
// deliveredEvery; a consumer that does not exist yet has handed out nothing. When it cannot be
// read, every message counts as reached.
func (w *Waiting) deliveredSeq(ctx context.Context) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.checked) < deliveredEvery {
		return w.delivered
	}
	c, err := w.st.Consumer(ctx, w.consumer)
	var info *jetstream.ConsumerInfo
	if err == nil {
		info, err = c.Info(ctx)
	}
	switch {
	case err == nil:
		w.delivered = info.Delivered.Stream
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		w.delivered = 0
	default:
		return ^uint64(0)
	}
	w.checked = time.Now()
	return w.delivered
}
