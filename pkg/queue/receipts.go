package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ReceiptPrefix starts the subject of a kept delivery receipt; the platform's msgid follows.
const ReceiptPrefix = "ucs.receipts.mp."

// ReceiptStream is the name of the stream of kept receipts beside the push stream named stream.
func ReceiptStream(stream string) string { return stream + "_RECEIPTS" }

// receiptConsumer is the durable consumer every front end shares to apply kept receipts.
const receiptConsumer = "apply"

// ReceiptMaxAge is how long a kept receipt is tried: a receipt whose message the service
// cannot find after a day is for no message it sent.
const ReceiptMaxAge = 24 * time.Hour

// Receipts keeps the platform's delivery receipts that the front end could not apply when
// they came (the store unreachable, or the message's sent record not yet written), until they
// can be. The platform pushes a receipt three times within seconds and then drops it; a
// receipt kept here is answered "success" and is not lost to a store outage.
type Receipts struct {
	js     jetstream.JetStream
	stream string
	cons   jetstream.Consumer
}

// OpenReceipts creates or updates the stream of kept receipts beside the push stream of c,
// with its replicas, and the consumer that applies them.
func OpenReceipts(ctx context.Context, js jetstream.JetStream, c Config) (*Receipts, error) {
	name := ReceiptStream(c.Stream)
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Description: "delivery receipts of the platform waiting to be applied",
		Subjects:    []string{ReceiptPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxAge:      ReceiptMaxAge,
		MaxBytes:    c.MaxBytes / 8,
		Discard:     jetstream.DiscardNew,
	}); err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", name, err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
		Durable:     receiptConsumer,
		Description: "front ends applying kept receipts",
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     30 * time.Second,
		MaxDeliver:  -1,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure consumer %s: %w", receiptConsumer, err)
	}
	return &Receipts{js: js, stream: name, cons: cons}, nil
}

// Keep stores a receipt (the event as the front end encodes it) and returns once the stream
// acknowledged it.
func (r *Receipts) Keep(ctx context.Context, msgID int64, event []byte) error {
	if _, err := r.js.Publish(ctx, ReceiptPrefix+strconv.FormatInt(msgID, 10), event); err != nil {
		return fmt.Errorf("keep receipt %d: %w", msgID, err)
	}
	return nil
}

// Run applies kept receipts until ctx ends. apply, given the receipt and when it was kept,
// reports whether it is done with (applied, or refused for good); a receipt that is not is
// tried again after retry.
func (r *Receipts) Run(ctx context.Context, retry time.Duration, apply func(ctx context.Context, event []byte, kept time.Time) bool) error {
	it, err := r.cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		return fmt.Errorf("consume %s: %w", r.stream, err)
	}
	go func() { <-ctx.Done(); it.Stop() }()
	// After an outage thousands wait; each costs a store write, which the writer batches when
	// many come at once.
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, receiptAppliers)
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

// receiptAppliers bounds the kept receipts one front end applies at once.
const receiptAppliers = 32
