package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DeadLetterPrefix starts the subject of a dead letter; the push's client token and ucsId
// follow it, as on the push's own subject. It lies outside the push stream's subjects, so a
// dead letter is never delivered again by itself.
const DeadLetterPrefix = "ucs.dead.mp."

// DeadLetterSubject is the subject of the dead letter of client's push ucsID.
func DeadLetterSubject(client, ucsID string) string {
	return DeadLetterPrefix + ClientToken(client) + "." + ucsID
}

// DeadLetterStream is the name of the dead-letter stream of the push stream named stream.
func DeadLetterStream(stream string) string { return stream + "_DLQ" }

// DeadLetterMaxAge is how long a dead letter is kept for an operator to look at or replay.
const DeadLetterMaxAge = 30 * 24 * time.Hour

// Headers of a dead letter: why it died and after how many attempts.
const (
	HeaderReason   = "Ucs-Reason"
	HeaderAttempts = "Ucs-Attempts"
)

// EnsureDeadLetters creates or updates the dead-letter stream of c.Stream: a copy of every
// message that exhausted its attempts, kept DeadLetterMaxAge (an ordinary limits stream, which
// nothing consumes by itself), with the push stream's replicas. It holds at most an eighth of
// the push stream's bytes, and past that drops its oldest copies rather than refuse new ones:
// a refused copy would keep its push in the queue, retried without end. What came of each
// push (failed, the reason, the attempts) stays in the store whatever the stream dropped.
// It returns the publisher of dead letters to the stream.
func EnsureDeadLetters(ctx context.Context, js jetstream.JetStream, c Config) (*DeadLetters, error) {
	sc := deadLetterConfig(c)
	if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", sc.Name, err)
	}
	return &DeadLetters{js: js, stream: sc}, nil
}

// deadLetterConfig is the configuration of the dead-letter stream of c.Stream.
func deadLetterConfig(c Config) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        DeadLetterStream(c.Stream),
		Description: "pushes that exhausted their delivery attempts, with the last error",
		Subjects:    []string{DeadLetterPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxAge:      DeadLetterMaxAge,
		MaxBytes:    c.MaxBytes / 8,
		Discard:     jetstream.DiscardOld,
		// A redelivered dead message is copied once: the copy's id is its ucsId.
		Duplicates: 10 * time.Minute,
	}
}

// DeadLetters copies dead messages to the dead-letter stream.
type DeadLetters struct {
	js     jetstream.JetStream
	stream jetstream.StreamConfig
}

// Copy stores msg (a message of the push stream) in the dead-letter stream with reason and
// the platform calls made for it, and returns once the stream acknowledged it (making the
// stream again should NATS have lost it: publishMaking).
func (d *DeadLetters) Copy(ctx context.Context, msg jetstream.Msg, reason string, attempts int) error {
	rest := strings.TrimPrefix(msg.Subject(), SubjectPrefix)
	out := nats.NewMsg(DeadLetterPrefix + rest)
	out.Data = msg.Data()
	out.Header.Set(HeaderReason, reason)
	out.Header.Set(HeaderAttempts, strconv.Itoa(attempts))
	if err := publishMaking(ctx, d.js, d.stream, out, jetstream.WithMsgID(rest)); err != nil {
		return fmt.Errorf("dead-letter %s: %w", rest, err)
	}
	return nil
}

// publishMaking publishes out to the stream sc and returns once it acknowledged it. When no
// stream answers (NATS lost it: a server restarted without its files, a stream deleted by
// hand), it makes the stream again, empty, and publishes once more.
func publishMaking(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, out *nats.Msg, opts ...jetstream.PublishOpt) error {
	_, err := js.PublishMsg(ctx, out, opts...)
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		if _, err = js.CreateOrUpdateStream(ctx, sc); err == nil {
			_, err = js.PublishMsg(ctx, out, opts...)
		}
	}
	return err
}
