// Package queue carries accepted pushes from the front end to the workers on a NATS JetStream
// stream: the stream and subject names, the durable consumer all workers share, and the
// publisher that answers only after the stream has stored the message.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// ChunkPrefix starts the subject of a chunk: the pushes of one batch request that share a block
// of ucsIds (push.NewBlock), stored as one message, which the workers' expander turns into
// single pushes on their own subjects. The block follows the prefix, so that a lookup finds a
// push still in its chunk by its ucsId alone.
const ChunkPrefix = "ucs.push.batch."

// ChunkSubject is the subject of the chunk that holds ucsID, if it is in one.
func ChunkSubject(ucsID string) string { return ChunkPrefix + push.BlockOf(ucsID) }

// ChunkBytes is the size a batch's pushes are gathered into chunks up to (by their bodies):
// large enough that the queue stores a few messages for a thousand pushes, small enough that a
// lookup reading one push out of its chunk stays cheap.
const ChunkBytes = 64 << 10

// Number gives the messages of one request their ucsIds, as the queue stores them together:
// runs of about ChunkBytes of request bodies (sizes[i] is message i's), each numbered by a block
// of ucsIds made at now (push.NewBlock), which PublishBatch stores as one chunk.
func Number(ms []push.Message, sizes []int, now time.Time) {
	for from := 0; from < len(ms); {
		to, size := from, 0
		for to < len(ms) && (to == from || size+sizes[to] <= ChunkBytes) {
			size += sizes[to]
			to++
		}
		for i, id := range push.NewBlock(now, to-from) {
			ms[from+i].UcsID = id
		}
		from = to
	}
}

// HeaderAgain marks a message that may have been published before: its worker reads what an
// earlier copy recorded before sending it.
const HeaderAgain = "Ucs-Again"

// ExpandConsumer is the name of the durable consumer of chunks, beside the workers' consumer.
func ExpandConsumer(consumer string) string { return consumer + "_expand" }

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
		Subjects:    []string{SubjectPrefix + ">", ChunkPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxBytes:    c.MaxBytes,
		MaxAge:      c.MaxAge,
		Discard:     jetstream.DiscardNew,
		// Lookups read waiting messages by subject from any replica, without a consumer.
		AllowDirect: true,
		// A subject is one push (or one chunk): a second message under the same ucsId is
		// refused, never stored.
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

// EnsureExpandConsumer creates the durable pull consumer of chunks every worker shares, or
// updates it.
func EnsureExpandConsumer(ctx context.Context, js jetstream.JetStream, c Config) (jetstream.Consumer, error) {
	name := ExpandConsumer(c.Consumer)
	cons, err := js.CreateOrUpdateConsumer(ctx, c.Stream, jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "delivery workers expanding batch chunks",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 64,
		FilterSubject: ChunkPrefix + ">",
	})
	if err != nil {
		return nil, fmt.Errorf("ensure consumer %s: %w", name, err)
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

	// Gather's pushes wait in in for the group they are stored with.
	in        chan *gathered
	startOnce sync.Once
	// mu orders Gather's hand-overs before Close: once isClosed is set, nothing more comes.
	mu       sync.RWMutex
	isClosed bool
	closed   chan struct{}
}

// NewPublisher returns a publisher on js. Close it once nothing publishes any more.
func NewPublisher(js jetstream.JetStream) *Publisher {
	return &Publisher{js: js, in: make(chan *gathered, gatherMax*gatherInFlight), closed: make(chan struct{})}
}

// Group commit: pushes that arrive while earlier groups await their PubAck are stored together.
const (
	// gatherMax bounds the pushes of one group (one chunk in the stream).
	gatherMax = 128
	// gatherInFlight bounds the groups awaiting their PubAck at once; while that many do,
	// new pushes wait and gather for the next group.
	gatherInFlight = 2
)

// ErrClosed is returned by Gather once the publisher is closed.
var ErrClosed = errors.New("the publisher is closed")

type gathered struct {
	m    push.Message
	err  error
	done chan struct{}
}

// Gather stores the new push m in the stream and returns the ucsId it gave it, once the stream
// acknowledged it: only then may the ucsId be given to the caller. Pushes that arrive while
// earlier ones await their PubAck are stored together (group commit), those of one client as
// one chunk whose block of ucsIds (push.NewBlock) they share, so that under load the stream
// stores a message for many pushes; a push that arrives alone is stored alone, at once.
// m.UcsID is ignored.
func (p *Publisher) Gather(ctx context.Context, m push.Message) (string, error) {
	p.startOnce.Do(func() { go p.gatherLoop() })
	g := &gathered{m: m, done: make(chan struct{})}
	p.mu.RLock()
	if p.isClosed {
		p.mu.RUnlock()
		return "", ErrClosed
	}
	select {
	case p.in <- g:
		p.mu.RUnlock()
	case <-ctx.Done():
		p.mu.RUnlock()
		return "", ctx.Err()
	}
	// Once handed over, the push may be stored whatever ctx does: its answer is awaited
	// (at most batchAckWait), so that a push is never stored without its outcome known.
	<-g.done
	return g.m.UcsID, g.err
}

// gatherLoop makes the groups of Gather: it waits for a free slot of gatherInFlight, takes
// every push waiting (up to gatherMax) and publishes them together.
func (p *Publisher) gatherLoop() {
	slots := make(chan struct{}, gatherInFlight)
	for {
		select {
		case slots <- struct{}{}:
		case <-p.closed:
			p.failWaiting()
			return
		}
		var first *gathered
		select {
		case first = <-p.in:
		case <-p.closed:
			p.failWaiting()
			return
		}
		group := append(make([]*gathered, 0, 8), first)
	fill:
		for len(group) < gatherMax {
			select {
			case g := <-p.in:
				group = append(group, g)
			default:
				break fill
			}
		}
		go func() {
			defer func() { <-slots }()
			p.publishGroup(group)
		}()
	}
}

// publishGroup numbers group and stores it: the pushes of each client together, as one chunk
// numbered by a block of its own, since the ucsIds of a block are guessable from one another.
func (p *Publisher) publishGroup(group []*gathered) {
	slices.SortStableFunc(group, func(a, b *gathered) int { return strings.Compare(a.m.ClientID, b.m.ClientID) })
	ms := make([]push.Message, len(group))
	for from := 0; from < len(group); {
		to := from + 1
		for to < len(group) && group[to].m.ClientID == group[from].m.ClientID {
			to++
		}
		for i, id := range push.NewBlock(time.UnixMilli(group[from].m.Accepted), to-from) {
			group[from+i].m.UcsID = id
		}
		from = to
	}
	for i, g := range group {
		ms[i] = g.m
	}
	errs := p.PublishBatch(context.Background(), ms, PublishOptions{})
	for i, g := range group {
		g.err = errs[i]
		close(g.done)
	}
}

// failWaiting answers the pushes still waiting for a group when the publisher closes.
func (p *Publisher) failWaiting() {
	for {
		select {
		case g := <-p.in:
			g.err = ErrClosed
			close(g.done)
		default:
			return
		}
	}
}

// Close stops Gather: pushes still waiting for a group get ErrClosed. Groups being published
// finish.
func (p *Publisher) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.isClosed {
		p.isClosed = true
		close(p.closed)
	}
}

// Publish stores m, under the ucsId it carries, in the stream and returns once the stream
// acknowledged it; only then may its ucsId be given to the caller. A second push under the
// same ucsId is refused while the first waits.
func (p *Publisher) Publish(ctx context.Context, m push.Message) error {
	return p.PublishBatch(ctx, []push.Message{m}, PublishOptions{})[0]
}

// DedupeWindow is how long the stream remembers the message ids of pushes published with
// one (PublishBatch with dedupe).
const DedupeWindow = 10 * time.Minute

// batchWindow bounds the messages of one batch awaiting their PubAck at once: enough to keep
// the stream busy, few enough that many concurrent batches do not stall the connection.
const batchWindow = 256

// batchAckWait bounds the wait for one message's PubAck in a batch.
const batchAckWait = 10 * time.Second

// ackWindow keeps at most batchWindow publishes awaiting their PubAck, and hands each answer,
// in publishing order, to answer: nil for a stored message, else the publish's error.
type ackWindow struct {
	ctx    context.Context
	futs   []jetstream.PubAckFuture
	waited int
	answer func(k int, err error)
}

// room waits until one more publish may await its PubAck.
func (a *ackWindow) room() {
	for len(a.futs)-a.waited >= batchWindow {
		a.next()
	}
}

// add counts a publish as awaiting its PubAck; it is the k-th, from 0.
func (a *ackWindow) add(f jetstream.PubAckFuture) { a.futs = append(a.futs, f) }

// next waits for the oldest publish's answer.
func (a *ackWindow) next() {
	var err error
	select {
	case <-a.futs[a.waited].Ok():
	case err = <-a.futs[a.waited].Err():
	case <-a.ctx.Done():
		err = a.ctx.Err()
	}
	a.answer(a.waited, err)
	a.waited++
}

// drain waits for every answer.
func (a *ackWindow) drain() {
	for a.waited < len(a.futs) {
		a.next()
	}
}

// PublishOptions say how PublishBatch publishes.
type PublishOptions struct {
	// Dedupe gives each message its ucsId (a chunk: its block) as message id, so that
	// publishing it again within DedupeWindow stores nothing new; a message the stream already
	// holds counts as stored.
	Dedupe bool
	// Again marks the messages as possibly published before (a retried request): a worker
	// reads what an earlier copy recorded before it sends one.
	Again bool
}

// unit is what PublishBatch stores as one stream message: ms[from:to], a chunk when chunk.
type unit struct {
	from, to int
	chunk    bool
}

// units groups ms: a run of two or more whose ucsIds number one block from index 0 on
// (push.NewBlock), in order, is a chunk; every other message stands alone.
func units(ms []push.Message) []unit {
	var us []unit
	for i := 0; i < len(ms); {
		j := i + 1
		if push.BlockIndex(ms[i].UcsID) == 0 {
			blk := push.BlockOf(ms[i].UcsID)
			for j < len(ms) && push.BlockOf(ms[j].UcsID) == blk && push.BlockIndex(ms[j].UcsID) == j-i {
				j++
			}
		}
		us = append(us, unit{from: i, to: j, chunk: j-i > 1})
		i = j
	}
	return us
}

// PublishBatch stores every message of ms in the stream with asynchronous publishes, at most
// batchWindow awaiting their PubAck at once, and returns once each has its answer: errs[i] is
// nil for a message the stream acknowledged (its ucsId may be given out), else why not. A run
// of messages numbered by one block (push.NewBlock) is stored as one chunk, which stands or
// falls as one, unless it is too large for one message. After the first failure the messages
// not yet sent are not tried (the queue is unavailable); they get that error too.
func (p *Publisher) PublishBatch(ctx context.Context, ms []push.Message, o PublishOptions) []error {
	errs := make([]error, len(ms))
	us := units(ms)
	sent := make([]unit, 0, len(us))
	ctx, cancel := context.WithTimeout(ctx, batchAckWait)
	defer cancel()
	var failed error
	fail := func(u unit, err error) {
		for i := u.from; i < u.to; i++ {
			errs[i] = err
		}
		if failed == nil {
			failed = err
		}
	}
	acks := ackWindow{ctx: ctx, answer: func(k int, err error) {
		u := sent[k]
		if err != nil && !(o.Dedupe && alreadyStored(err)) {
			fail(u, publishError(ms[u.from].UcsID, err))
		}
	}}
	limit := int(p.js.Conn().MaxPayload()) - 4<<10 // room for the headers
	var publish func(u unit)
	publish = func(u unit) {
		acks.room()
		if failed != nil {
			fail(u, failed)
			return
		}
		first := ms[u.from].UcsID
		msg := &nats.Msg{Subject: Subject(first)}
		if o.Dedupe || o.Again {
			msg.Header = nats.Header{}
		}
		var err error
		if u.chunk {
			msg.Subject = ChunkSubject(first)
			msg.Data, err = push.EncodeChunk(ms[u.from:u.to])
			if err == nil && len(msg.Data) > limit {
				// Too large for one message: each push on its own subject.
				for i := u.from; i < u.to; i++ {
					publish(unit{from: i, to: i + 1})
				}
				return
			}
		} else {
			msg.Data, err = ms[u.from].Encode()
		}
		if err != nil {
			for i := u.from; i < u.to; i++ {
				errs[i] = fmt.Errorf("encode message: %w", err)
			}
			return
		}
		var opts []jetstream.PublishOpt
		if o.Dedupe {
			id := first
			if u.chunk {
				id = push.BlockOf(first)
			}
			opts = append(opts, jetstream.WithMsgID(id))
		}
		if o.Again {
			msg.Header.Set(HeaderAgain, "1")
		}
		f, err := p.js.PublishMsgAsync(msg, opts...)
		if err != nil {
			fail(u, publishError(first, err))
			return
		}
		acks.add(f)
		sent = append(sent, u)
	}
	for _, u := range us {
		publish(u)
	}
	acks.drain()
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
	nc *nats.Conn
	st jetstream.Stream
	// pushes is the workers' consumer of single pushes, chunks that of chunks.
	pushes, chunks *progress
}

// progress is how far a consumer has handed out messages, read at most every deliveredEvery.
type progress struct {
	name      string
	mu        sync.Mutex
	delivered uint64    // the highest stream sequence the consumer has handed out
	checked   time.Time // when delivered was read
}

// deliveredEvery is how often Waiting reads how far the workers got: a push looked up may have
// reached a worker this long before the lookup says so.
const deliveredEvery = 250 * time.Millisecond

// NewWaiting returns a reader of st, as EnsureStream returned it on js (its configuration
// allows direct gets); consumer is the workers' durable consumer.
func NewWaiting(js jetstream.JetStream, st jetstream.Stream, consumer string) *Waiting {
	return &Waiting{nc: js.Conn(), st: st, pushes: &progress{name: consumer}, chunks: &progress{name: ExpandConsumer(consumer)}}
}

// ErrNotWaiting is returned by Get for a push that is not in the stream: unknown, or finished
// (a worker acknowledges a message only after recording its outcome).
var ErrNotWaiting = errors.New("not in the push queue")

// Get returns the push ucsID while it waits in the stream, with a direct get by its subject
// (or, for a push of a batch not yet expanded, by its chunk's), and whether a worker may have
// received it yet: a push behind every message the workers' consumer has handed out has no
// attempt to report.
func (w *Waiting) Get(ctx context.Context, ucsID string) (push.Message, bool, error) {
	m, seq, err := w.single(ctx, ucsID)
	if err == nil {
		return m, seq <= w.pushes.seq(ctx, w.st), nil
	}
	if !errors.Is(err, ErrNotWaiting) {
		return push.Message{}, false, err
	}
	m, seq, err = w.inChunk(ctx, ucsID)
	if err != nil {
		return push.Message{}, false, err
	}
	if seq > w.chunks.seq(ctx, w.st) {
		return m, false, nil // no worker has the chunk: nothing of it is under way
	}
	// Its chunk is being expanded: the push may be on its own subject by now, even under way.
	if m2, seq2, err := w.single(ctx, ucsID); err == nil {
		return m2, seq2 <= w.pushes.seq(ctx, w.st), nil
	}
	return m, true, nil
}

// single reads the push on its own subject, with its stream sequence.
func (w *Waiting) single(ctx context.Context, ucsID string) (push.Message, uint64, error) {
	raw, err := w.st.GetLastMsgForSubject(ctx, Subject(ucsID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return push.Message{}, 0, ErrNotWaiting
	}
	if err != nil {
		return push.Message{}, 0, fmt.Errorf("get %s from the queue: %w", ucsID, err)
	}
	m, err := push.DecodeMessage(raw.Data)
	return m, raw.Sequence, err
}

// inChunk reads the push out of the chunk its ucsId names, with the chunk's stream sequence.
func (w *Waiting) inChunk(ctx context.Context, ucsID string) (push.Message, uint64, error) {
	i := push.BlockIndex(ucsID)
	if i < 0 {
		return push.Message{}, 0, ErrNotWaiting
	}
	raw, err := w.st.GetLastMsgForSubject(ctx, ChunkSubject(ucsID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return push.Message{}, 0, ErrNotWaiting
	}
	if err != nil {
		return push.Message{}, 0, fmt.Errorf("get %s from the queue: %w", ucsID, err)
	}
	m, err := push.ChunkItem(raw.Data, i)
	if errors.Is(err, push.ErrNotInChunk) || err == nil && m.UcsID != ucsID {
		return push.Message{}, 0, ErrNotWaiting
	}
	return m, raw.Sequence, err
}

// FromLeader is Get answered by the stream's leader. Any replica answers a direct get, and one
// may not yet hold a push the others acknowledged a moment ago; before a lookup says a push does
// not exist, the leader is asked.
func (w *Waiting) FromLeader(ctx context.Context, ucsID string) (push.Message, error) {
	i := push.BlockIndex(ucsID)
	if i < 0 {
		return push.Message{}, ErrNotWaiting
	}
	data, err := w.leaderGet(ctx, ChunkSubject(ucsID))
	if err == nil {
		m, err := push.ChunkItem(data, i)
		if err == nil && m.UcsID == ucsID {
			return m, nil
		}
		if err != nil && !errors.Is(err, push.ErrNotInChunk) {
			return push.Message{}, err
		}
	} else if !errors.Is(err, ErrNotWaiting) {
		return push.Message{}, err
	}
	data, err = w.leaderGet(ctx, Subject(ucsID))
	if err != nil {
		return push.Message{}, err
	}
	return push.DecodeMessage(data)
}

// leaderGet reads the last message on subject from the stream's leader.
func (w *Waiting) leaderGet(ctx context.Context, subject string) ([]byte, error) {
	req, err := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return nil, err
	}
	reply, err := w.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+w.st.CachedInfo().Config.Name, req)
	if err != nil {
		return nil, fmt.Errorf("get %s from the queue's leader: %w", subject, err)
	}
	var resp struct {
		Message *struct {
			Data []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("get %s from the queue's leader: %w", subject, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, ErrNotWaiting
	case resp.Error != nil:
		return nil, fmt.Errorf("get %s from the queue's leader: %w", subject, resp.Error)
	case resp.Message == nil:
		return nil, fmt.Errorf("get %s from the queue's leader: empty answer", subject)
	}
	return resp.Message.Data, nil
}

// seq is how far the consumer has handed out messages of st, read at most every
// deliveredEvery; a consumer that does not exist yet has handed out nothing. When it cannot be
// read, every message counts as reached.
func (p *progress) seq(ctx context.Context, st jetstream.Stream) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.checked) < deliveredEvery {
		return p.delivered
	}
	c, err := st.Consumer(ctx, p.name)
	var info *jetstream.ConsumerInfo
	if err == nil {
		info, err = c.Info(ctx)
	}
	switch {
	case err == nil:
		p.delivered = info.Delivered.Stream
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		p.delivered = 0
	default:
		return ^uint64(0)
	}
	p.checked = time.Now()
	return p.delivered
}
