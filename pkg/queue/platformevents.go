package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// PlatformEventPrefix starts the subject of a kept platform event: a delivery receipt (the
// platform's msgid follows) or a follow event ("follow" follows).
const PlatformEventPrefix = "ucs.events.mp."

// PlatformEventStream is the name of the stream of kept platform events beside the push stream
// named stream.
func PlatformEventStream(stream string) string { return stream + "_EVENTS" }

// platformEventConsumer is the durable consumer every front end shares to apply kept receipts.
const platformEventConsumer = "apply"

// PlatformEventMaxAge is how long a kept receipt is tried: a receipt whose message the service
// cannot find after a day is for no message it sent.
const PlatformEventMaxAge = 24 * time.Hour

// PlatformEvents keeps the platform's events (delivery receipts, follows and unfollows) that the
// front end could not apply when they came because the store failed, until they can be. The
// platform pushes an event three times within seconds and then drops it; an event kept here is
// answered "success" and is not lost to a store outage.
type PlatformEvents struct {
	js     jetstream.JetStream
	stream string
	cons   jetstream.Consumer
}

// OpenPlatformEvents creates or updates the stream of kept receipts beside the push stream of c,
// with its replicas, and the consumer that applies them.
func OpenPlatformEvents(ctx context.Context, js jetstream.JetStream, c Config) (*PlatformEvents, error) {
	name := PlatformEventStream(c.Stream)
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Description: "events of the platform (receipts, follows) waiting to be applied",
		Subjects:    []string{PlatformEventPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxAge:      PlatformEventMaxAge,
		MaxBytes:    c.MaxBytes / 8,
		Discard:     jetstream.DiscardNew,
	}); err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", name, err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
		Durable:     platformEventConsumer,
		Description: "front ends applying kept platform events",
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     30 * time.Second,
		MaxDeliver:  -1,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure consumer %s: %w", platformEventConsumer, err)
	}
	return &PlatformEvents{js: js, stream: name, cons: cons}, nil
}

// Keep stores an event (as the front end encodes it) under key (a receipt's msgid, or
// "follow") and returns once the stream acknowledged it.
func (r *PlatformEvents) Keep(ctx context.Context, key string, event []byte) error {
	if _, err := r.js.Publish(ctx, PlatformEventPrefix+key, event); err != nil {
		return fmt.Errorf("keep platform event %s: %w", key, err)
	}
	return nil
}

// Run applies kept receipts until ctx ends. apply, given the receipt and when it was kept,
// reports whether it is done with (applied, or refused for good); a receipt that is not is
// tried again after retry.
func (r *PlatformEvents) Run(ctx context.Context, retry time.Duration, apply func(ctx context.Context, event []byte, kept time.Time) bool) error {
	it, err := r.cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		return fmt.Errorf("consume %s: %w", r.stream, err)
	}
	go func() { <-ctx.Done(); it.Stop() }()
	// After an outage thousands wait; each costs a store write, which the writer batches when
	// many come at once.
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, platformEventAppliers)
	for {
		msg, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("consume %s: %w", r.stream, err)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			kept := time.Now()
			if meta, err := msg.Metadata(); err == nil {
				kept = meta.Timestamp
			}
			if apply(ctx, msg.Data(), kept) {
				_ = msg.Ack()
			} else {
				_ = msg.NakWithDelay(retry)
			}
		}()
	}
}

// platformEventAppliers bounds the kept receipts one front end applies at once.
const platformEventAppliers = 32
