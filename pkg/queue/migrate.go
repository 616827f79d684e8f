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

// migrateIDPrefix starts the message id of every copy Migrate publishes, and of nothing else:
// the earlier version gave a push sent under an Idempotency-Key its ucsId as message id, which
// the stream may still remember, and the front end's ids are hashes.
const migrateIDPrefix = "migrate:"

// Migrate converts a stream written in the earlier layout to the present one before
// EnsureStream configures it: every push waiting on a legacy subject, alone or in a chunk, is
// published on its own subject (Subject), marked HeaderMigrated, and only once it is known to
// be there is the legacy message deleted, so that nothing is lost if this stops half way.
//
// A copy's message id is "migrate:<ucsId>", never the ucsId itself: the earlier version
// published a push sent under an Idempotency-Key with its ucsId as message id, and within the
// dedupe window the stream would take a copy under that id for a duplicate and store nothing.
// Run again within the window, Migrate's own copy is answered as a duplicate and stored once;
// run again later, the copy is refused because its subject already holds its one message, and
// when that message is the same push, the push counts as moved.
//
// While it copies, Migrate lifts the stream's byte bound: a copy is stored before its legacy
// message is deleted, and a stream left full by an outage (when pushes are most likely still
// waiting) would refuse every copy, and every program would fail to start. EnsureStream, which
// runs next, puts the configured bound back; a failed migration puts back the one it found; a
// program killed half way leaves it lifted until the next start migrates the rest.
//
// A single that holds no push of this service is left where it is, for a worker to fail as
// undecodable, as it would have. An item of a chunk that holds no push (or a chunk that is no
// JSON array) is copied to the dead letters, as a worker does with a message it cannot decode:
// once the stream is converted nothing reads the chunks' subjects, and the chunk's other
// pushes are moved. The chunks' consumer is deleted at the end. A stream that does not exist,
// or holds nothing of the earlier layout, is left as it is. It reports how many pushes it moved.
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
	if !cfg.AllowDirect {
		// Every version of this service made the stream with direct gets; a stream without
		// them is not one of ours to convert.
		return 0, nil
	}
	// Chunks are looked for in what the stream holds, not in its subjects: a chunk an earlier
	// front end published in the moment before a start took the chunks' subject away stays.
	legacy := slices.Contains(cfg.Subjects, legacyChunks)
	if !legacy {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(legacyChunks))
		if err != nil {
			return 0, fmt.Errorf("migrate stream %s: %w", c.Stream, err)
		}
		legacy = len(info.State.Subjects) > 0
	}
	// From now on the stream takes no push of the earlier layout: a front end of the earlier
	// version still running answers 503, not a ucsId a push left on a legacy subject after the
	// moves below would carry, which no lookup finds. What the legacy subjects hold stays
	// readable, and is moved.
	if present := streamConfig(c).Subjects; !slices.Equal(cfg.Subjects, present) {
		cfg.Subjects = present
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return 0, fmt.Errorf("migrate stream %s: take the earlier layout's subjects away: %w", c.Stream, err)
		}
	}
	mg := &migration{js: js, st: st, c: c, log: log}
	moved, err := mg.run(ctx, legacy)
	if err != nil {
		// EnsureStream does not run after a failure: the stream keeps its bound meanwhile.
		mg.restoreBound(context.WithoutCancel(ctx))
		return moved, err
	}
	if moved > 0 {
		log.Info("pushes moved from the earlier layout of the stream", "stream", c.Stream, "pushes", moved)
	}
	return moved, nil
}

// migration is one run of Migrate.
type migration struct {
	js  jetstream.JetStream
	st  jetstream.Stream
	c   Config
	log *slog.Logger

	lifted bool  // the stream's byte bound is lifted
	bound  int64 // the byte bound it had before
	dead   bool  // the dead-letter stream is there
}

// run moves the chunks, then the singles, then deletes the chunks' consumer.
func (mg *migration) run(ctx context.Context, legacy bool) (int, error) {
	moved := 0
	for _, filter := range []string{legacyChunks, legacySingles} {
		if filter == legacyChunks && !legacy {
			continue
		}
		n, err := mg.subjects(ctx, filter)
		moved += n
		if err != nil {
			return moved, err
		}
	}
	if legacy {
		err := mg.js.DeleteConsumer(ctx, mg.c.Stream, mg.c.Consumer+"_expand")
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return moved, fmt.Errorf("migrate stream %s: delete the chunks' consumer: %w", mg.c.Stream, err)
		}
	}
	return moved, nil
}

// subjects moves every message on the legacy subjects filter matches.
func (mg *migration) subjects(ctx context.Context, filter string) (int, error) {
	stream := mg.c.Stream
	moved, unreadable := 0, 0
	defer func() {
		if unreadable > 0 {
			mg.log.Warn("legacy messages that hold no readable push were left in the stream", "stream", stream, "subjects", filter, "messages", unreadable)
		}
	}()
	seq := uint64(1)
	for {
		msgs, err := jetstreamext.GetBatch(ctx, mg.js, stream, migratePage,
			jetstreamext.GetBatchSubject(filter), jetstreamext.GetBatchSeq(seq))
		if err != nil {
			return moved, fmt.Errorf("migrate stream %s: %w", stream, err)
		}
		read, none := 0, false
		for raw, err := range msgs {
			if errors.Is(err, jetstreamext.ErrNoMessages) {
				none = true
				break
			}
			if err != nil {
				return moved, fmt.Errorf("migrate stream %s: %w", stream, err)
			}
			read++
			seq = raw.Sequence + 1
			n, ok, err := mg.move(ctx, raw)
			moved += n
			if err != nil {
				return moved, fmt.Errorf("migrate stream %s: message %d on %s: %w", stream, raw.Sequence, raw.Subject, err)
			}
			if !ok {
				unreadable++
				continue
			}
			if err := mg.st.DeleteMsg(ctx, raw.Sequence); err != nil && !mg.gone(ctx, raw.Sequence) {
				return moved, fmt.Errorf("migrate stream %s: delete message %d: %w", stream, raw.Sequence, err)
			}
		}
		switch {
		case none:
			return moved, nil
		case read == 0:
			// No answer in time is not the end of the legacy messages.
			return moved, fmt.Errorf("migrate stream %s: %w", stream, errNoAnswer)
		}
	}
}

// gone reports whether the stream no longer holds message seq: another program starting at the
// same time moved and deleted it first.
func (mg *migration) gone(ctx context.Context, seq uint64) bool {
	_, err := mg.st.GetMsg(ctx, seq)
	return errors.Is(err, jetstream.ErrMsgNotFound)
}

// move puts the pushes of one legacy message on their own subjects and returns how many, and
// whether the legacy message may go: only once every push it holds is on its subject (and
// every item of a chunk that holds none is in the dead letters). A single that holds no push
// of this service is left where it is: a worker fails it as undecodable, as it would have.
func (mg *migration) move(ctx context.Context, raw *jetstream.RawStreamMsg) (int, bool, error) {
	if strings.HasPrefix(raw.Subject, SubjectPrefix) {
		m, err := decodeLegacy(raw.Data)
		if err != nil {
			return 0, false, nil //nolint:nilerr // not a push of this service: left where it is, as the doc says
		}
		if err := mg.copyPush(ctx, m, raw.Data); err != nil {
			return 0, false, err
		}
		return 1, true, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw.Data, &items); err != nil {
		if err := mg.deadLetter(ctx, raw, -1, raw.Data, fmt.Errorf("not a chunk of pushes: %w", err)); err != nil {
			return 0, false, err
		}
		return 0, true, nil
	}
	moved := 0
	for i, item := range items {
		m, err := decodeLegacy(item)
		if err != nil {
			if err := mg.deadLetter(ctx, raw, i, item, err); err != nil {
				return moved, false, err
			}
			continue
		}
		if err := mg.copyPush(ctx, m, item); err != nil {
			return moved, false, err
		}
		moved++
	}
	return moved, true, nil
}

// decodeLegacy decodes a push of the earlier layout; one without a valid ucsId is none of
// this service's.
func decodeLegacy(b []byte) (push.Message, error) {
	m, err := push.DecodeMessage(b)
	if err == nil && !push.ValidID(m.UcsID) {
		err = errors.New("push: decode message: not a valid ucsId")
	}
	return m, err
}

// copyPush publishes m, encoded as data, on its own subject, and returns nil once the push is
// known to be there: stored now, stored by an earlier run within the dedupe window (the
// stream answers a duplicate, and only Migrate uses its ids), or found on its subject, which
// refuses a second message.
func (mg *migration) copyPush(ctx context.Context, m push.Message, data []byte) error {
	if err := mg.liftBound(ctx); err != nil {
		return err
	}
	subject := Subject(m.ClientID, m.UcsID)
	out := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{HeaderMigrated: {"1"}}}
	publish := func() (refused bool, err error) {
		_, err = mg.js.PublishMsg(ctx, out, jetstream.WithMsgID(migrateIDPrefix+m.UcsID))
		var apiErr *jetstream.APIError
		return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStoreFailed, err
	}
	refused, err := publish()
	if !refused {
		return err
	}
	// Refused, the byte bound lifted: most likely the subject already holds its one message, a
	// copy an earlier run stored before it stopped, longer ago than the dedupe window. The
	// subject names the push, so its message must be that push.
	held, gerr := mg.st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(gerr, jetstream.ErrMsgNotFound) {
		// The subject is empty: another program that started at the same time finished its
		// migration and put the bound back. It is lifted again for one more try, and this
		// program's EnsureStream puts it back.
		mg.lifted = false
		if err := mg.liftBound(ctx); err != nil {
			return err
		}
		if refused, err = publish(); !refused {
			return err
		}
		held, gerr = mg.st.GetLastMsgForSubject(ctx, subject)
	}
	if gerr != nil {
		// A worker finished the copy meanwhile, or another limit refused it: the refusal
		// stands, and the legacy message stays for the next start.
		return fmt.Errorf("%w (and reading %s: %w)", err, subject, gerr)
	}
	if h, derr := push.DecodeMessage(held.Data); derr != nil || h.UcsID != m.UcsID {
		return fmt.Errorf("%w: %s holds another message (sequence %d)", err, subject, held.Sequence)
	}
	return nil
}

// liftBound lifts the stream's byte bound, once a migration, before its first copy: see
// Migrate.
func (mg *migration) liftBound(ctx context.Context) error {
	if mg.lifted {
		return nil
	}
	info, err := mg.st.Info(ctx)
	if err != nil {
		return fmt.Errorf("read the stream's configuration: %w", err)
	}
	cfg := info.Config
	mg.bound = cfg.MaxBytes
	if cfg.MaxBytes > 0 {
		cfg.MaxBytes = -1
		if _, err := mg.js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("lift the stream's byte bound for the migration: %w", err)
		}
		mg.log.Info("the stream's byte bound is lifted while its pushes are moved", "stream", mg.c.Stream, "bound", mg.bound)
	}
	mg.lifted = true
	return nil
}

// restoreBound puts back the byte bound liftBound lifted, after a failed migration: no
// EnsureStream follows it, and programs of the earlier version may still publish. Should that
// fail too, the bound stays lifted until a start migrates the stream.
func (mg *migration) restoreBound(ctx context.Context) {
	if !mg.lifted || mg.bound <= 0 {
		return
	}
	info, err := mg.st.Info(ctx)
	if err == nil {
		cfg := info.Config
		cfg.MaxBytes = mg.bound
		_, err = mg.js.UpdateStream(ctx, cfg)
	}
	if err != nil {
		mg.log.Warn("the stream's byte bound stays lifted after a failed migration", "stream", mg.c.Stream, "err", err)
	}
}

// deadLetter copies data, item i of the chunk raw (the whole chunk when i < 0), which holds no
// push, to the dead letters with why, as a worker does with a message it cannot decode, on
// ucs.dead.mp.batch.<block>[.<i>].
func (mg *migration) deadLetter(ctx context.Context, raw *jetstream.RawStreamMsg, i int, data []byte, why error) error {
	if !mg.dead {
		if _, err := EnsureDeadLetters(ctx, mg.js, mg.c); err != nil {
			return err
		}
		mg.dead = true
	}
	rest := strings.TrimPrefix(raw.Subject, "ucs.push.")
	id := migrateIDPrefix + strconv.FormatUint(raw.Sequence, 10)
	if i >= 0 {
		rest += "." + strconv.Itoa(i)
		id += ":" + strconv.Itoa(i)
	}
	out := nats.NewMsg(DeadLetterPrefix + rest)
	out.Data = data
	out.Header.Set(HeaderReason, "undecodable message: "+why.Error())
	out.Header.Set(HeaderAttempts, "0")
	if _, err := mg.js.PublishMsg(ctx, out, jetstream.WithMsgID(id)); err != nil {
		return fmt.Errorf("dead-letter %s: %w", rest, err)
	}
	mg.log.Warn("a legacy chunk's item that holds no push is moved to the dead letters", "subject", out.Subject, "err", why)
	return nil
}
