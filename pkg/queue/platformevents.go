package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PlatformEventPrefix starts the subject of a platform event: a delivery receipt (the
// platform's msgid follows) or a follow event ("follow" follows).
const PlatformEventPrefix = "ucs.events.mp."

// PlatformEventStream is the name of the stream of platform events beside the push stream
// named stream.
func PlatformEventStream(stream string) string { return stream + "_EVENTS" }

// platformEventConsumer is the durable consumer every front end shares to apply platform
// events, and platformEventGroup its priority group: the consumer is pinned to one front end at
// a time, which applies the events in the order the stream holds them.
const (
	platformEventConsumer = "apply"
	platformEventGroup    = "apply"
)

// PlatformEventMaxAge is how long an event waits in the stream to be applied.
const PlatformEventMaxAge = 24 * time.Hour

// PlatformEventRepeats is how long the stream knows an event it stored, to store it once: the
// platform repeats a push three times within about 15 s.
const PlatformEventRepeats = 2 * time.Minute

// PlatformEventAckWait is how long an event handed to a front end may go without word from it
// before it goes to another; a front end holding an event longer (a receipt waiting for its
// msgid, a batch waiting for the store) says so every PlatformEventAckWait/3.
const PlatformEventAckWait = 30 * time.Second

// platformEventPinnedTTL is how long the pinned front end may send no pull request before
// another one is pinned: a front end that died hands over after this.
const platformEventPinnedTTL = 30 * time.Second

// PlatformEventMaxHeld bounds the events handed out and not yet acknowledged (receipts waiting
// for their msgid included): beyond it the stream holds new events back until some are done.
const PlatformEventMaxHeld = 20_000

// PlatformEvents is the stream of the platform's events (delivery receipts, follows and
// unfollows): the callback answers the platform once its event is stored here, and one front
// end at a time applies them in order (Run).
type PlatformEvents struct {
	js     jetstream.JetStream
	stream jetstream.StreamConfig
	cons   jetstream.Consumer
}

// OpenPlatformEvents creates or updates the stream of platform events beside the push stream
// of c, with its replicas, and the consumer that applies them.
func OpenPlatformEvents(ctx context.Context, js jetstream.JetStream, c Config) (*PlatformEvents, error) {
	name := PlatformEventStream(c.Stream)
	sc := jetstream.StreamConfig{
		Name:        name,
		Description: "events of the platform (receipts, follows) waiting to be applied",
		Subjects:    []string{PlatformEventPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxAge:      PlatformEventMaxAge,
		MaxBytes:    c.MaxBytes / 8,
		Discard:     jetstream.DiscardNew,
		Duplicates:  PlatformEventRepeats,
	}
	if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", name, err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
		Durable:        platformEventConsumer,
		Description:    "the front end applying platform events, one at a time (pinned)",
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        PlatformEventAckWait,
		MaxDeliver:     -1,
		MaxAckPending:  PlatformEventMaxHeld,
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{platformEventGroup},
		PinnedTTL:      platformEventPinnedTTL,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure consumer %s: %w", platformEventConsumer, err)
	}
	return &PlatformEvents{js: js, stream: sc, cons: cons}, nil
}

// HandOutAgain makes every event handed out and not done with (applied, or handed back) due
// at once, rather than after PlatformEventAckWait: for a front end that knows no other one
// holds any, because its NATS server started with it (the standalone stack). A NATS server
// that restarts forgets the events handed back just before its stop, and hands them out again
// only once their ack wait has passed.
func (r *PlatformEvents) HandOutAgain(ctx context.Context) error {
	if _, err := r.js.ResetConsumer(ctx, r.stream.Name, platformEventConsumer); err != nil {
		return fmt.Errorf("reset consumer %s: %w", platformEventConsumer, err)
	}
	return nil
}

// Keep stores an event (as the front end encodes it) under key (a receipt's msgid, or
// "follow") and returns once the stream acknowledged it. id, unless "", names the event: the
// stream stores it once however often it is kept within PlatformEventRepeats (the platform
// repeats a push it got no timely answer for, and a keep whose acknowledgement was lost is
// tried again). Should NATS have lost the stream, it is made again (publishMaking); the front
// end applying events makes the consumer again (its Run fails meanwhile).
func (r *PlatformEvents) Keep(ctx context.Context, key, id string, event []byte) error {
	var opts []jetstream.PublishOpt
	if id != "" {
		opts = append(opts, jetstream.WithMsgID(id))
	}
	out := nats.NewMsg(PlatformEventPrefix + key)
	out.Data = event
	if err := publishMaking(ctx, r.js, r.stream, out, opts...); err != nil {
		return fmt.Errorf("keep platform event %s: %w", key, err)
	}
	return nil
}

// PlatformEvent is an event as the stream hands it to the front end applying events. Exactly
// one of Done or Release, after any number of Hold, is called for it.
type PlatformEvent struct {
	msg  jetstream.Msg
	kept time.Time
	seq  uint64
	// Redelivered is set when the stream handed the event out before (to a front end that
	// stopped, or whose hold lapsed).
	Redelivered bool
}

// Data is the event as the front end encoded it.
func (e *PlatformEvent) Data() []byte { return e.msg.Data() }

// Kept is when the stream stored the event.
func (e *PlatformEvent) Kept() time.Time { return e.kept }

// Done removes the event from the stream: it was applied, or will never apply.
func (e *PlatformEvent) Done() { _ = e.msg.Ack() }

// Hold tells the stream the event is still being worked on, so that it is not handed to
// another front end; call it at least every PlatformEventAckWait/3.
func (e *PlatformEvent) Hold() { _ = e.msg.InProgress() }

// Release hands the event back to the stream at once, for whichever front end applies events
// next (this one is stopping).
func (e *PlatformEvent) Release() { _ = e.msg.Nak() }

// NewPlatformEvent wraps a message of the stream of platform events.
func NewPlatformEvent(msg jetstream.Msg) *PlatformEvent {
	e := &PlatformEvent{msg: msg, kept: time.Now()}
	if meta, err := msg.Metadata(); err == nil {
		e.kept, e.seq = meta.Timestamp, meta.Sequence.Stream
		e.Redelivered = meta.NumDelivered > 1
	}
	return e
}

// ReleaseInOrder hands events back to the stream at once (Release), in stream order: the
// stream hands events handed back out again in the order it got them.
func ReleaseInOrder(events []*PlatformEvent) {
	slices.SortFunc(events, func(a, b *PlatformEvent) int { return cmp.Compare(a.seq, b.seq) })
	for _, e := range events {
		e.Release()
	}
}

// platformEventBatch bounds the events handed to the applier at once.
const platformEventBatch = 256

// Run hands the events to out, in stream order, in batches of those that are there at once,
// until ctx ends; it is the one reader of the stream in this front end. Another front end's
// Run waits while this one is pinned, and takes over when this one stops. When Run returns,
// this front end reads no more and the consumer is unpinned, so that what it hands back goes to
// the front end that applies events next, not to its own pull still open at the server; left
// are the events it read and did not hand to out, in stream order, for the caller to hand back
// (ReleaseInOrder) after those it handed out and were not applied.
func (r *PlatformEvents) Run(ctx context.Context, out chan<- []*PlatformEvent) (left []*PlatformEvent, err error) {
	it, err := r.cons.Messages(jetstream.PullPriorityGroup(platformEventGroup),
		jetstream.PullMaxMessages(platformEventBatch), jetstream.PullExpiry(platformEventPinnedTTL/3))
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", r.stream.Name, err)
	}
	var pin string
	defer func() {
		// What the pull had fetched beyond the batch: Drain keeps it readable.
		it.Drain()
		for {
			m, err := it.Next(jetstream.NextMaxWait(time.Second))
			if err != nil {
				break
			}
			left = append(left, NewPlatformEvent(m))
		}
		r.unpin(pin)
	}()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil, nil
			}
			if errors.Is(err, jetstream.ErrPinIDMismatch) || errors.Is(err, nats.ErrTimeout) {
				continue
			}
			return nil, fmt.Errorf("consume %s: %w", r.stream.Name, err)
		}
		if p := msg.Headers().Get("Nats-Pin-Id"); p != "" {
			pin = p
		}
		batch := []*PlatformEvent{NewPlatformEvent(msg)}
		// Whatever is already here goes with it: one store write for many receipts.
		for len(batch) < platformEventBatch {
			m, err := it.Next(jetstream.NextMaxWait(time.Millisecond))
			if err != nil {
				break
			}
			batch = append(batch, NewPlatformEvent(m))
		}
		select {
		case out <- batch:
		case <-ctx.Done():
			return batch, nil // the deferred drain appends what follows it
		}
	}
}

// unpin hands the consumer over at once when this front end stops, rather than after the
// pinned TTL; only if it is still the pinned one (pin, from the events it got).
func (r *PlatformEvents) unpin(pin string) {
	if pin == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := r.cons.Info(ctx)
	if err != nil {
		return
	}
	for _, g := range info.PriorityGroups {
		if g.Group == platformEventGroup && g.PinnedClientID == pin {
			if st, err := r.js.Stream(ctx, r.stream.Name); err == nil {
				_ = st.UnpinConsumer(ctx, platformEventConsumer, platformEventGroup)
			}
		}
	}
}
