package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/push"
)

// Expander turns the chunks of batch requests into the single pushes the workers deliver: each
// push of a chunk is published on its own subject, and the chunk is acknowledged once the
// stream holds them all. A chunk is never lost on the way: until its acknowledgement it stays
// in the stream and is given to another expander after the ack wait. A push published twice
// (a chunk expanded again after an expander died) is not stored twice while the first copy
// waits (one message per subject), and a copy stored after the first was delivered carries
// HeaderAgain, so that its worker finds the first copy's outcome and sends nothing.
type Expander struct {
	js   jetstream.JetStream
	cons jetstream.Consumer
	// Retry is the delay before a chunk that could not be expanded is tried again.
	Retry time.Duration
	// DeadLetter, when set, keeps a copy of a chunk that cannot be read.
	DeadLetter func(ctx context.Context, msg jetstream.Msg, reason string) error
	Logger     *slog.Logger
}

// NewExpander returns an expander of the chunks cons (EnsureExpandConsumer) hands out,
// publishing on js.
func NewExpander(js jetstream.JetStream, cons jetstream.Consumer) *Expander {
	return &Expander{js: js, cons: cons, Retry: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)}
}

// expandFetch is how many chunks an expander holds at once.
const expandFetch = 4

// Run expands chunks until ctx ends, then expands the ones it already fetched and returns.
func (e *Expander) Run(ctx context.Context) error {
	it, err := e.cons.Messages(jetstream.PullMaxMessages(expandFetch))
	if err != nil {
		return fmt.Errorf("consume chunks: %w", err)
	}
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
			it.Drain()
		case <-stopped:
			it.Stop()
		}
	}()
	work := context.WithoutCancel(ctx)
	for {
		msg, err := it.Next()
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return nil
		}
		if err != nil {
			e.Logger.Warn("fetching chunks failed", "err", err)
			continue
		}
		e.Expand(work, msg)
	}
}

// Expand publishes every push of the chunk msg on its own subject and acknowledges the chunk,
// or hands it back for a later try.
func (e *Expander) Expand(ctx context.Context, msg jetstream.Msg) {
	block := strings.TrimPrefix(msg.Subject(), ChunkPrefix)
	again := msg.Headers().Get(HeaderAgain) != ""
	if meta, err := msg.Metadata(); err == nil && meta.NumDelivered > 1 {
		again = true
	}
	ctx, cancel := context.WithTimeout(ctx, batchAckWait)
	defer cancel()
	var ids []string
	var pubErr error
	acks := ackWindow{ctx: ctx, answer: func(k int, err error) {
		// A copy of the push already waiting on its subject leaves nothing to add.
		if err != nil && !alreadyStored(err) && pubErr == nil {
			pubErr = publishError(ids[k], err)
		}
	}}
	readErr := push.ChunkItems(msg.Data(), func(i int, item []byte) error {
		id := push.BlockID(block, i)
		if id == "" {
			return fmt.Errorf("item %d is outside the chunk's block %q", i, block)
		}
		acks.room()
		if pubErr != nil {
			return errStopExpanding
		}
		m := &nats.Msg{Subject: Subject(id), Data: item}
		if again {
			m.Header = nats.Header{HeaderAgain: {"1"}}
		}
		f, err := e.js.PublishMsgAsync(m)
		if err != nil {
			pubErr = publishError(id, err)
			return errStopExpanding
		}
		acks.add(f)
		ids = append(ids, id)
		return nil
	})
	acks.drain()
	switch {
	case pubErr != nil:
		e.Logger.Warn("expanding a chunk failed; it will be tried again", "chunk", block, "err", pubErr)
		_ = msg.NakWithDelay(e.Retry)
		return
	case readErr != nil:
		// Nothing the front end publishes fails to read: the chunk can never be expanded
		// (whole). The pushes read before the fault are published; the rest go to the dead
		// letters with the chunk.
		reason := "unreadable chunk: " + readErr.Error()
		e.Logger.Error("unreadable chunk", "chunk", block, "pushes", len(ids), "err", readErr)
		if e.DeadLetter != nil {
			if err := e.DeadLetter(ctx, msg, reason); err != nil {
				e.Logger.Warn("dead-lettering a chunk failed; it will be tried again", "chunk", block, "err", err)
				_ = msg.NakWithDelay(e.Retry)
				return
			}
		}
		_ = msg.Term()
		return
	}
	if err := msg.Ack(); err != nil {
		// It comes back after the ack wait and is expanded again, harmlessly.
		e.Logger.Warn("acknowledging a chunk failed", "chunk", block, "err", err)
	}
}

var errStopExpanding = errors.New("publishing failed")
