package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/campus-it/ucs/pkg/push"
)

// The earlier layout of the push stream, which Migrate converts: single pushes on
// ucs.push.mp.<ucsId> (no client token), and the pushes of a batch gathered in chunks on
// ucs.push.batch.<block>, a JSON array of pushes each carrying its ucsId, which a second
// durable consumer (<consumer>_expand) expanded.
const (
	legacySingles = SubjectPrefix + "*"
	legacyChunks  = "ucs.push.batch.>"
)

// HeaderMigrated marks a push Migrate moved: it may have a history (attempts recorded in the
// store) although the queue delivers it for the first time, so its worker reads that first.
const HeaderMigrated = "Ucs-Migrated"

// migratePage is how many legacy messages one batch direct get reads.
const migratePage = 256

// Migrate converts a stream written in the earlier layout to the present one before
// EnsureStream configures it: every push waiting on a legacy subject, alone or in a chunk, is
// published on its own subject (Subject), marked HeaderMigrated, and only once the stream
// acknowledged it is the legacy message deleted, so that nothing is lost if this stops half
// way: run again, it publishes what is left (a push published twice within the dedupe window
// is stored once, its ucsId being its message id) and deletes the rest. The chunks' consumer
// is deleted at the end. A stream that does not exist, or holds nothing of the earlier layout,
// is left as it is. It reports how many pushes it moved.
//
// Workers of the earlier layout still running may deliver a legacy message while it is moved:
// the platform's idempotency key (the ucsId) keeps the user from receiving it twice.
func Migrate(ctx context.Context, js jetstream.JetStream, c Config, log *slog.Logger) (int, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st, err := js.Stream(ctx, c.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("migrate stream %s: %w", c.Stream, err)
	}
	cfg := st.CachedInfo().Config
	legacy := slices.Contains(cfg.Subjects, legacyChunks)
	if !cfg.AllowDirect {
		// Every version of this service made the stream with direct gets; a stream without
		// them is not one of ours to convert.
		return 0, nil
	}
	moved := 0
	for _, filter := range []string{legacyChunks, legacySingles} {
		if filter == legacyChunks && !legacy {
			continue
		}
		n, err := migrateSubjects(ctx, js, st, c.Stream, filter, log)
		moved += n
		if err != nil {
			return moved, err
		}
	}
	if legacy {
		err := js.DeleteConsumer(ctx, c.Stream, c.Consumer+"_expand")
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return moved, fmt.Errorf("migrate stream %s: delete the chunks' consumer: %w", c.Stream, err)
		}
	}
	if moved > 0 {
		log.Info("pushes moved from the earlier layout of the stream", "stream", c.Stream, "pushes", moved)
	}
	return moved, nil
}

// migrateSubjects moves every message on the legacy subjects filter matches.
func migrateSubjects(ctx context.Context, js jetstream.JetStream, st jetstream.Stream, stream, filter string, log *slog.Logger) (int, error) {
	moved, unreadable := 0, 0
	defer func() {
		if unreadable > 0 {
			log.Warn("legacy messages that hold no readable push were left in the stream", "stream", stream, "subjects", filter, "messages", unreadable)
		}
	}()
	seq := uint64(1)
	for {
		msgs, err := jetstreamext.GetBatch(ctx, js, stream, migratePage,
			jetstreamext.GetBatchSubject(filter), jetstreamext.GetBatchSeq(seq))
		if err != nil {
			return moved, fmt.Errorf("migrate stream %s: %w", stream, err)
		}
		read := 0
		for raw, err := range msgs {
			if errors.Is(err, jetstreamext.ErrNoMessages) {
				break
			}
			if err != nil {
				return moved, fmt.Errorf("migrate stream %s: %w", stream, err)
			}
			read++
			seq = raw.Sequence + 1
			n, ok, err := moveLegacy(ctx, js, raw)
			moved += n
			if err != nil {
				return moved, fmt.Errorf("migrate stream %s: message %d on %s: %w", stream, raw.Sequence, raw.Subject, err)
			}
			if !ok {
				unreadable++
				continue
			}
			if err := st.DeleteMsg(ctx, raw.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return moved, fmt.Errorf("migrate stream %s: delete message %d: %w", stream, raw.Sequence, err)
			}
		}
		if read == 0 {
			return moved, nil
		}
	}
}

// moveLegacy publishes the pushes of one legacy message on their own subjects and returns how
// many, and whether the legacy message may go. A message that holds no push of this service is
// left where it is: on a single's subject a worker fails it as undecodable, as it would have.
func moveLegacy(ctx context.Context, js jetstream.JetStream, raw *jetstream.RawStreamMsg) (int, bool, error) {
	var items []json.RawMessage
	if strings.HasPrefix(raw.Subject, SubjectPrefix) {
		items = []json.RawMessage{raw.Data}
	} else if err := json.Unmarshal(raw.Data, &items); err != nil {
		return 0, false, nil //nolint:nilerr // not a push of this service: left where it is, as the doc says
	}
	var ms []push.Message
	for _, item := range items {
		m, err := push.DecodeMessage(item)
		if err != nil || !push.ValidID(m.UcsID) {
			return 0, false, nil //nolint:nilerr // not a push of this service: left where it is, as the doc says
		}
		ms = append(ms, m)
	}
	for i, m := range ms {
		out := &nats.Msg{Subject: Subject(m.ClientID, m.UcsID), Data: items[i], Header: nats.Header{HeaderMigrated: {"1"}}}
		if _, err := js.PublishMsg(ctx, out, jetstream.WithMsgID(m.UcsID)); err != nil {
			return i, false, err
		}
	}
	return len(ms), true, nil
}
