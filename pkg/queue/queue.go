package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/campus-it/ucs/pkg/push"
)

// SubjectPrefix starts the subject of every push; its client token and its ucsId follow.
const SubjectPrefix = "ucs.push.mp."

// ClientToken is client id as one subject token: letters, digits, '_' and '-' stay as they
// are, any other byte (a client id may hold '.') is written ~HH in hexadecimal, so that the
// token is never empty, never holds '.', '*' or '>', and two client ids never share a token.
func ClientToken(client string) string {
	plain := client != ""
	for i := 0; i < len(client) && plain; i++ {
		plain = tokenByte(client[i])
	}
	if plain {
		return client
	}
	var b strings.Builder
	if client == "" {
		return "~"
	}
	for i := 0; i < len(client); i++ {
		c := client[i]
		if tokenByte(c) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "~%02X", c)
	}
	return b.String()
}

func tokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// Subject is the subject of the push ucsID sent by client.
func Subject(client, ucsID string) string { return SubjectPrefix + ClientToken(client) + "." + ucsID }

// IDOfSubject returns the ucsId a push subject ends with, "" when it names none.
func IDOfSubject(subject string) string {
	i := strings.LastIndexByte(subject, '.')
	if !strings.HasPrefix(subject, SubjectPrefix) || i < len(SubjectPrefix) {
		return ""
	}
	if id := subject[i+1:]; push.ValidID(id) {
		return id
	}
	return ""
}

// ClientOfSubject returns the client id a push subject names (see ClientToken), "" when it
// names none.
func ClientOfSubject(subject string) string {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix)
	token, _, two := strings.Cut(rest, ".")
	if !ok || !two || token == "~" {
		return ""
	}
	var b strings.Builder
	for i := 0; i < len(token); i++ {
		if token[i] != '~' {
			b.WriteByte(token[i])
			continue
		}
		if i+3 > len(token) {
			return ""
		}
		c, err := strconv.ParseUint(token[i+1:i+3], 16, 8)
		if err != nil {
			return ""
		}
		b.WriteByte(byte(c))
		i += 2
	}
	return b.String()
}

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
	// MaxAge is how long a message may wait: the workers fail one older (delivery.Config.MaxAge),
	// and the stream remembers an Idempotency-Key no longer.
	MaxAge time.Duration
	// AckWait is how long a delivered message may go unanswered before it is delivered again.
	AckWait time.Duration
	// MaxAckPending bounds messages delivered but not yet answered, over all workers.
	MaxAckPending int
}

// DedupeWindow is how long the stream remembers the message id of a push published under an
// Idempotency-Key: as long as the key itself is kept, so that a retry with the key never
// stores a push twice, however late it comes. Pushes without a key carry no id and cost the
// window nothing.
const DedupeWindow = 24 * time.Hour

// EnsureStream creates the stream or brings its configuration up to date. The stream is a work
// queue: a message is removed once a worker acknowledges it, and until then it is on disk,
// replicated. When the stream is full, new messages are refused, never old ones dropped.
func EnsureStream(ctx context.Context, js jetstream.JetStream, c Config) (jetstream.Stream, error) {
	st, err := js.CreateOrUpdateStream(ctx, streamConfig(c))
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", c.Stream, err)
	}
	return st, nil
}

// streamConfig is the push stream's configuration.
func streamConfig(c Config) jetstream.StreamConfig {
	dedupe := DedupeWindow
	if c.MaxAge > 0 && c.MaxAge < dedupe {
		dedupe = c.MaxAge
	}
	return jetstream.StreamConfig{
		Name:        c.Stream,
		Description: "template message pushes accepted by the front end, awaiting delivery",
		// Two tokens, client and ucsId: a front end of the earlier layout still running
		// during an upgrade publishes its singles on one (ucs.push.mp.<ucsId>), which the
		// stream no longer takes, so it answers 503 rather than a ucsId no lookup would
		// find until delivered; its chunks' subject is gone too.
		Subjects:  []string{SubjectPrefix + "*.*"},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.FileStorage,
		Replicas:  c.Replicas,
		MaxBytes:  c.MaxBytes,
		// No age limit: a push past MaxAge is failed by a worker, with a record (no dead
		// letter), never dropped unseen; MaxBytes bounds the stream.
		MaxAge:  0,
		Discard: jetstream.DiscardNew,
		// Lookups read waiting pushes by subject, many at once, from any replica.
		AllowDirect: true,
		// A batch is stored whole or not at all.
		AllowAtomicPublish: true,
		// A subject is one push: a second message under the same ucsId is refused while the
		// first waits, never stored.
		MaxMsgsPerSubject:    1,
		DiscardNewPerSubject: true,
		Duplicates:           dedupe,
	}
}

// KeepStreamEvery is how often KeepStream checks the push stream's configuration.
const KeepStreamEvery = 15 * time.Second

// KeepStream checks the push stream's configuration every interval until ctx ends, and
// converts and configures the stream again (Migrate, EnsureStream) when it finds the layout
// changed, or makes it again when it is gone (deleted, or NATS restarted without its data).
// A program of the earlier version that starts during an upgrade (a worker the
// autoscaler adds, a pod restarted) configures the stream as that version did, at its start:
// the earlier subjects, no atomic batches (every batch would be refused), a 10-minute dedupe
// window and an age limit that drops waiting pushes. Only what the earlier version sets
// differently is compared; the byte bound, which a migration under way lifts, is not.
func KeepStream(ctx context.Context, js jetstream.JetStream, c Config, interval time.Duration, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	want := streamConfig(c)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := js.Stream(ctx, c.Stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			// Deleted, or NATS restarted without its data: every push would be refused
			// until a restart. Nothing is left in it to convert.
			log.Warn("the push stream is gone; making it again", "stream", c.Stream)
			if _, err := EnsureStream(ctx, js, c); err != nil {
				log.Error("making the push stream again failed", "stream", c.Stream, "err", err)
			}
			continue
		}
		if err != nil {
			continue // NATS unreachable: the next look
		}
		got := st.CachedInfo().Config
		if slices.Equal(got.Subjects, want.Subjects) && got.AllowAtomicPublish == want.AllowAtomicPublish &&
			got.Duplicates == want.Duplicates && got.MaxAge == want.MaxAge {
			continue
		}
		log.Warn("the push stream's configuration was changed, by a program of an earlier version perhaps; configuring it again",
			"stream", c.Stream, "subjects", got.Subjects, "allow_atomic", got.AllowAtomicPublish, "duplicates", got.Duplicates, "max_age", got.MaxAge)
		if _, err := Migrate(ctx, js, c, log); err != nil {
			log.Error("converting the push stream again failed", "stream", c.Stream, "err", err)
			continue
		}
		if _, err := EnsureStream(ctx, js, c); err != nil {
			log.Error("configuring the push stream again failed", "stream", c.Stream, "err", err)
		}
	}
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

// JetStream error codes this package tells apart.
const (
	// errCodeStoreFailed is a refused store: the stream's limits with DiscardNew, or a
	// subject that already holds its one message.
	errCodeStoreFailed jetstream.ErrorCode = 10077
	// errCodeStorageExceeded is a server out of storage.
	errCodeStorageExceeded jetstream.ErrorCode = 10047
	// errCodeBatchDuplicate is an atomic batch holding a message id the stream has seen:
	// with one id a batch, the batch was stored before.
	errCodeBatchDuplicate jetstream.ErrorCode = 10201
)

// ErrFull is returned when the stream refuses a push because it is full.
var ErrFull = errors.New("the push queue is full")

// Publisher publishes accepted pushes.
type Publisher struct {
	js      jetstream.JetStream
	ackWait time.Duration // bounds the wait for a PubAck
	// batches bounds the atomic batches this publisher has open at once: the server allows
	// a stream 50, across every front end.
	batches chan struct{}
	// confirms bounds the read-backs (confirm) under way at once: when the stream is slow
	// enough to lose many acknowledgements, more questions would only slow it further.
	confirms chan struct{}
}

// maxOpenBatches is how many atomic batches one publisher has open at once; more wait.
const maxOpenBatches = 16

// maxConfirms is how many publishes without their acknowledgement one publisher reads back at
// once; more are answered ErrUnconfirmed at once.
const maxConfirms = 16

// NewPublisher returns a publisher on the connection of js, with JetStream's default API
// prefix. A publish whose PubAck does not come within ackWait is given up, and frees its
// place among the connection's publishes waiting for a PubAck (at most 4,000): a PubAck lost
// on the way (in a leader change, say) would otherwise hold its place until the connection
// dropped, and once 4,000 were lost, every push would be refused.
func NewPublisher(js jetstream.JetStream) (*Publisher, error) { return newPublisher(js, ackWait) }

func newPublisher(js jetstream.JetStream, wait time.Duration) (*Publisher, error) {
	pjs, err := jetstream.New(js.Conn(), jetstream.WithPublishAsyncTimeout(wait))
	if err != nil {
		return nil, fmt.Errorf("publisher: %w", err)
	}
	return &Publisher{js: pjs, ackWait: wait, batches: make(chan struct{}, maxOpenBatches),
		confirms: make(chan struct{}, maxConfirms)}, nil
}

// PublishOptions say how a push is published.
type PublishOptions struct {
	// MsgID, when set, is the message id the stream deduplicates by within DedupeWindow: a
	// push (or a batch) published again under it is stored once. A retried Idempotency-Key
	// sets it.
	MsgID string
}

// ackWait bounds the wait for a PubAck.
const ackWait = 10 * time.Second

// Publish stores m in the stream, on its subject, and returns once the stream acknowledged it;
// only then may its ucsId be given to the caller. A PubAck that does not come (past the ack
// wait, or lost with the connection) is not taken for a refusal: only the stream's own answer
// refuses (answered). The stream is asked whether it holds the push (confirm), and
// ErrUnconfirmed says it could not be asked. (A caller that gives up first, its
// ctx done, is gone and told nothing.) With o.MsgID, a copy already stored within
// the dedupe window counts as stored (the stream answers its PubAck again). A copy can wait
// no longer than the window (it is at most the stream's MaxAge), so a push is never refused
// for its own earlier copy.
func (p *Publisher) Publish(ctx context.Context, m push.Message, o PublishOptions) error {
	data, err := m.Encode()
	if err != nil {
		return fmt.Errorf("encode push %s: %w", m.UcsID, err)
	}
	msg := &nats.Msg{Subject: Subject(m.ClientID, m.UcsID), Data: data}
	var opts []jetstream.PublishOpt
	if o.MsgID != "" {
		opts = append(opts, jetstream.WithMsgID(o.MsgID))
	}
	// Published asynchronously, and answered after its own PubAck: the connection's shared
	// reply subscription, and the publisher's ack wait as the bound.
	f, err := p.js.PublishMsgAsync(msg, opts...)
	if err != nil {
		return fmt.Errorf("publish %s: %w", m.UcsID, publishError(err))
	}
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		err = fmt.Errorf("publish %s: %w", m.UcsID, publishError(err))
		if !answered(err) {
			return p.confirm(msg.Subject, err)
		}
		return err
	case <-ctx.Done():
		return fmt.Errorf("publish %s: %w", m.UcsID, ctx.Err())
	}
}

// answered reports whether err, a publish's error, is the stream's own answer: a refusal (an
// API error), or no stream taking the subject. Any other (the ack wait passed, the connection
// lost with the answer on its way, an answer that could not be read) leaves the push perhaps
// stored.
func answered(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// ErrUnconfirmed is the error of a publish whose acknowledgement did not come (a slow stream
// leader, a lost answer), and which the stream could not be asked about either: the push may
// be stored, and will then be delivered.
var ErrUnconfirmed = errors.New("the queue did not confirm storing the push, which may be stored")

// confirmWait bounds confirm.
const confirmWait = 2 * time.Second

// beforeConfirm is called as confirm begins (tests hold the stream's answers until then).
var beforeConfirm = func() {}

// confirm asks the stream, after a publish on subject whose acknowledgement did not come
// (perr), whether it stored the message all the same: nil when it holds it, perr when no
// stream takes the subject, and otherwise ErrUnconfirmed (wrapping perr): a push not found may
// never have been stored, or have been delivered and acknowledged already, or still be on its
// way, so the caller is told it may be stored rather than that it was refused. With
// maxConfirms read-backs under way already, it is ErrUnconfirmed without asking.
func (p *Publisher) confirm(subject string, perr error) error {
	select {
	case p.confirms <- struct{}{}:
		defer func() { <-p.confirms }()
	default:
		return fmt.Errorf("%w: %w", ErrUnconfirmed, perr)
	}
	beforeConfirm()
	ctx, cancel := context.WithTimeout(context.Background(), confirmWait)
	defer cancel()
	name, err := p.js.StreamNameBySubject(ctx, subject)
	if err == nil {
		var st jetstream.Stream
		if st, err = p.js.Stream(ctx, name); err == nil {
			_, err = st.GetLastMsgForSubject(ctx, subject)
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return perr // no stream takes the subject: nothing was stored
	}
	// Not in the stream says nothing either: the stream is a work queue, and a worker may
	// have taken the push and acknowledged it already.
	return fmt.Errorf("%w: %w", ErrUnconfirmed, perr)
}

// PublishBatch stores ms in the stream as one atomic batch: when it returns nil, every push of
// ms is stored, and when it returns an error, none is (ErrUnconfirmed aside: the stream may
// hold them all; the caller then publishes the same batch again under the same o.MsgID, which
// the stream stores once). A commit whose answer does not come is confirmed as Publish
// confirms a push. At most push.MaxBatch pushes.
func (p *Publisher) PublishBatch(ctx context.Context, ms []push.Message, o PublishOptions) error {
	switch len(ms) {
	case 0:
		return nil
	case 1:
		return p.Publish(ctx, ms[0], o)
	}
	wait, cancel := context.WithTimeout(ctx, p.ackWait)
	defer cancel()
	select {
	case p.batches <- struct{}{}:
		defer func() { <-p.batches }()
	case <-wait.Done():
		return fmt.Errorf("publish a batch: %w", wait.Err())
	}
	// The commit's wait starts once the batch has its place: time spent waiting for one
	// must not cut short the wait for a commit's answer, or a batch stored would be
	// answered as refused.
	parent := ctx
	ctx, cancel = context.WithTimeout(ctx, p.ackWait)
	defer cancel()
	b, err := jetstreamext.NewBatchPublisher(p.js)
	if err != nil {
		return fmt.Errorf("publish a batch: %w", err)
	}
	last := len(ms) - 1
	for i, m := range ms {
		data, err := m.Encode()
		if err != nil {
			_ = b.Discard()
			return fmt.Errorf("encode push %s: %w", m.UcsID, err)
		}
		msg := &nats.Msg{Subject: Subject(m.ClientID, m.UcsID), Data: data}
		if i == 0 && o.MsgID != "" {
			// One id for the batch, on its first push, which the stream checks first: the
			// batch is atomic, so if its first push was stored, all were.
			msg.Header = nats.Header{jetstream.MsgIDHeader: {o.MsgID}}
		}
		if i < last {
			if err := b.AddMsg(msg); err != nil {
				_ = b.Discard()
				return batchError(err, o)
			}
			continue
		}
		if _, err := b.CommitMsg(ctx, msg); err != nil {
			err = batchError(err, o)
			// The commit's answer did not come (the ack wait passed, the connection was
			// lost), and the caller still waits: the batch is atomic, and its last push
			// stored means all of them are.
			if err != nil && !answered(err) && parent.Err() == nil {
				return p.confirm(msg.Subject, err)
			}
			return err
		}
	}
	return nil
}

// batchError is what a refused batch comes to: nil for a batch published under a message id
// that the stream already stored, else the refusal.
func batchError(err error, o PublishOptions) error {
	err = publishError(err)
	if o.MsgID != "" && errors.Is(err, errDuplicateBatch) {
		return nil
	}
	return fmt.Errorf("publish a batch: %w", err)
}

var errDuplicateBatch = errors.New("the batch was stored before")

// publishError names a refused publish by its JetStream error code: ErrFull when the stream
// cannot take it, errDuplicateBatch for a batch stored before.
func publishError(err error) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return err
	}
	switch apiErr.ErrorCode {
	case errCodeBatchDuplicate:
		return fmt.Errorf("%w: %w", errDuplicateBatch, err)
	case errCodeStoreFailed, errCodeStorageExceeded:
		return fmt.Errorf("%w: %w", ErrFull, err)
	}
	return err
}

// Waiting reads pushes that are still in the stream: accepted and not yet finished by a worker
// (a worker acknowledges a push only after recording its outcome).
type Waiting struct {
	js       jetstream.JetStream
	st       jetstream.Stream
	stream   string
	consumer string

	mu      sync.Mutex
	handed  handedOut // how far the workers' consumer has handed out messages
	checked time.Time // when handed was read
}

// NewWaiting returns a reader of st, as EnsureStream returned it on js (its configuration
// allows direct gets); consumer is the workers' durable consumer.
func NewWaiting(js jetstream.JetStream, st jetstream.Stream, consumer string) *Waiting {
	return &Waiting{js: js, st: st, stream: st.CachedInfo().Config.Name, consumer: consumer}
}

// Waited is a push waiting in the stream, and whether a worker may have received it yet: a
// push behind every message the workers' consumer has handed out has no attempt to report.
type Waited struct {
	push.Message
	Reached bool
}

// ErrNotWaiting is returned by Get for a push that is not in the stream: unknown, of another
// client, or finished.
var ErrNotWaiting = errors.New("not in the push queue")

// Get returns client's push ucsID while it waits in the stream: one direct get of its subject.
func (w *Waiting) Get(ctx context.Context, client, ucsID string) (Waited, error) {
	raw, err := w.st.GetLastMsgForSubject(ctx, Subject(client, ucsID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Waited{}, ErrNotWaiting
	}
	if err != nil {
		return Waited{}, fmt.Errorf("get %s from the queue: %w", ucsID, err)
	}
	m, err := push.DecodeMessage(raw.Data)
	if err != nil {
		return Waited{}, err
	}
	return Waited{Message: m, Reached: reached(raw, func() handedOut { return w.handedOut(ctx) })}, nil
}

// FromLeader is Get as the stream's leader answers it, for a push Get and the store found
// nowhere. Any replica of a replicated stream answers a direct get, and one may not yet hold a
// push the others acknowledged a moment ago: before a lookup says a push does not exist, the
// leader is asked. A stream of one replica is its own leader: ErrNotWaiting at once.
func (w *Waiting) FromLeader(ctx context.Context, client, ucsID string) (Waited, error) {
	if w.st.CachedInfo().Config.Replicas <= 1 {
		return Waited{}, ErrNotWaiting
	}
	req, err := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{Subject(client, ucsID)})
	if err != nil {
		return Waited{}, err
	}
	reply, err := w.js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+w.stream, req)
	if err != nil {
		return Waited{}, fmt.Errorf("get %s from the queue's leader: %w", ucsID, err)
	}
	var resp struct {
		Message *struct {
			Data []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return Waited{}, fmt.Errorf("get %s from the queue's leader: %w", ucsID, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return Waited{}, ErrNotWaiting
	case resp.Error != nil:
		return Waited{}, fmt.Errorf("get %s from the queue's leader: %w", ucsID, resp.Error)
	case resp.Message == nil:
		return Waited{}, fmt.Errorf("get %s from the queue's leader: empty answer", ucsID)
	}
	m, err := push.DecodeMessage(resp.Message.Data)
	if err != nil {
		return Waited{}, err
	}
	// Just stored, behind what the workers were handed: no attempt to report yet.
	return Waited{Message: m}, nil
}

// maxSubjectsPerGet bounds the subjects of one batch direct get, below the server's limit.
const maxSubjectsPerGet = 1000

// GetMany returns those of client's pushes ids that wait in the stream, by ucsId: one batch
// direct get for up to a thousand ids, whatever their number found.
func (w *Waiting) GetMany(ctx context.Context, client string, ids []string) (map[string]Waited, error) {
	out := make(map[string]Waited)
	var handed *handedOut
	for from := 0; from < len(ids); from += maxSubjectsPerGet {
		part := ids[from:min(from+maxSubjectsPerGet, len(ids))]
		subjects := make([]string, len(part))
		for i, id := range part {
			subjects[i] = Subject(client, id)
		}
		msgs, err := jetstreamext.GetLastMsgsFor(ctx, w.js, w.stream, subjects)
		if err != nil {
			return nil, fmt.Errorf("get %d pushes from the queue: %w", len(part), err)
		}
		for raw, err := range msgs {
			if errors.Is(err, jetstreamext.ErrNoMessages) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("get %d pushes from the queue: %w", len(part), err)
			}
			m, err := push.DecodeMessage(raw.Data)
			if err != nil {
				continue // not a push this service wrote: a worker fails it as undecodable
			}
			out[m.UcsID] = Waited{Message: m, Reached: reached(raw, func() handedOut {
				if handed == nil {
					h := w.handedOut(ctx)
					handed = &h
				}
				return *handed
			})}
		}
	}
	return out, nil
}

// handedOut is how far the workers' consumer has handed out messages of the stream: every
// message up to Seq, and, from an earlier consumer of the same name (removed and made again:
// its count starts anew), any stored before Since.
type handedOut struct {
	Seq   uint64
	Since time.Time
}

// reached reports whether a worker may have received the push raw: it is behind what the
// workers' consumer has handed out (handed), or it was moved by Migrate, and so may have a
// history from before it was moved, whatever its place in the stream.
func reached(raw *jetstream.RawStreamMsg, handed func() handedOut) bool {
	if raw.Header.Get(HeaderMigrated) != "" {
		return true
	}
	h := handed()
	return raw.Sequence <= h.Seq || raw.Time.Before(h.Since)
}

// handedOutEvery is how often Waiting reads how far the workers got: a push looked up may have
// reached a worker this long before the lookup says so.
const handedOutEvery = 250 * time.Millisecond

// handedOut is how far the workers' consumer has handed out messages of the stream, read at
// most every handedOutEvery (one consumer info for all lookups). A consumer made again (an
// operator removed it; the workers make it anew) counts from its making, so a message stored
// before it may have reached the earlier one. When it cannot be read, or it is missing (an
// operator removed it; the front end makes it at start), every message counts as reached: the
// store tells.
func (w *Waiting) handedOut(ctx context.Context) handedOut {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.checked) < handedOutEvery {
		return w.handed
	}
	c, err := w.st.Consumer(ctx, w.consumer)
	var info *jetstream.ConsumerInfo
	if err == nil {
		info, err = c.Info(ctx)
	}
	switch {
	case err == nil:
		w.handed = handedOut{Seq: info.Delivered.Stream, Since: info.Created}
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		w.handed = handedOut{Seq: ^uint64(0)}
	default:
		return handedOut{Seq: ^uint64(0)}
	}
	w.checked = time.Now()
	return w.handed
}

// Find returns the push ucsID while it waits in the stream, whoever sent it: a read of the
// subjects ending in ucsID, for an operator looking at one push.
func (w *Waiting) Find(ctx context.Context, ucsID string) (push.Message, error) {
	msgs, err := jetstreamext.GetBatch(ctx, w.js, w.stream, 1, jetstreamext.GetBatchSubject(SubjectPrefix+"*."+ucsID))
	if err != nil {
		return push.Message{}, fmt.Errorf("find %s in the queue: %w", ucsID, err)
	}
	for raw, err := range msgs {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			return push.Message{}, ErrNotWaiting
		}
		if err != nil {
			return push.Message{}, fmt.Errorf("find %s in the queue: %w", ucsID, err)
		}
		return push.DecodeMessage(raw.Data)
	}
	// Neither a message nor the stream's "none": the answer did not come in time (the batch
	// request ends its wait without an error).
	return push.Message{}, fmt.Errorf("find %s in the queue: %w", ucsID, errNoAnswer)
}

// errNoAnswer is a batch read of the stream that ended with no answer at all: the stream said
// neither what it holds nor that it holds nothing.
var errNoAnswer = errors.New("the stream did not answer")
