package notification

import (
	"context"
	"errors"
	"slices"

	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
)

// Push accepts client's push req: it returns the push's ucsId once the queue has stored it.
// With a key, a retry of the request answers the ucsId of the first, publishing the push
// again only if the queue never took it. ErrUnconfirmed comes with the ucsId the push may be
// stored under.
func (s *Service) Push(ctx context.Context, client string, req push.Request, key Key) (string, error) {
	k, err := s.keyOf(ctx, client, key)
	if err != nil {
		return "", err
	}
	now := s.cfg.Now()
	msg := req.Message(push.NewID(now), client, now)
	if k != nil {
		return s.pushOnce(ctx, k, msg)
	}
	if err := s.cfg.Publisher.Publish(ctx, msg, queue.PublishOptions{}); err != nil {
		return unconfirmedID(msg.UcsID, publishError(err))
	}
	s.cfg.Accepted(1)
	return msg.UcsID, nil
}

// unconfirmedID is the answer to a push the queue did not take: the ucsId id only with
// ErrUnconfirmed, when it may be stored under it.
func unconfirmedID(id string, err error) (string, error) {
	if errors.Is(err, ErrUnconfirmed) {
		return id, err
	}
	return "", err
}

// pushOnce publishes a push that carries an Idempotency-Key: the key's first request takes it
// with the message's ucsId and publishes; a later one answers that ucsId, publishing it again
// only if the queue never took it.
func (s *Service) pushOnce(ctx context.Context, k *keyed, msg push.Message) (string, error) {
	if k.replay == nil {
		if err := k.claimOrLoad(ctx, []string{msg.UcsID}); err != nil {
			return "", err
		}
	}
	if k.owner {
		if err := s.cfg.Publisher.Publish(ctx, msg, k.publishOptions()); err != nil {
			k.refused(ctx, err, []int{0})
			return unconfirmedID(msg.UcsID, publishError(err))
		}
		k.finish(ctx, nil)
		s.cfg.Accepted(1)
		return msg.UcsID, nil
	}
	rec := k.replay
	if len(rec.IDs) != 1 || rec.IDs[0] == "" {
		return "", errors.New("the Idempotency-Key record of a push has no ucsId")
	}
	if still, err := k.republish(ctx, msg.ClientID, map[int]push.Message{0: msg}); len(still) > 0 {
		return unconfirmedID(rec.IDs[0], publishError(err))
	}
	return rec.IDs[0], nil
}

// Item is one item of a batch: the push its body gave, or the error that refused it.
type Item struct {
	Req push.Request
	Err error
}

// ErrNotTaken is the error of a batch item the queue did not take: it was not accepted, and
// sending it again is safe.
var ErrNotTaken = errors.New("queue unavailable; retry this item")

// ErrItemUnconfirmed is the error of a batch item of a batch the queue did not confirm
// (Batch.Unconfirmed): it may be stored under its ucsId.
var ErrItemUnconfirmed = errors.New("the queue did not confirm storing this item; it may be stored")

// ItemResult is what became of a batch item: its ucsId, or the error that refused it (the
// item's own, or ErrNotTaken).
type ItemResult struct {
	UcsID string
	Err   error
}

// Batch is the answer to a batch: each item's result in request order, and how many were
// accepted and not. Unavailable says the queue did not take the batch's good items (or, for a
// retry, those the first request left): none of them has a ucsId, and the batch may be sent
// again, with the same key if it had one; Full says why: the queue is full (ErrQueueFull), so
// the batch is best sent again later than after a passing fault.
type Batch struct {
	Items       []ItemResult
	Accepted    int
	Rejected    int
	Unavailable bool
	Full        bool // the queue is full (with Unavailable)
	Unchecked   bool // a retry under a key cannot be checked now: ErrKeyUnchecked (with Unavailable)
	// Unconfirmed (with Unavailable): the queue did not confirm storing the batch, which may be
	// stored, all of it (ErrUnconfirmed); each good item has its ucsId and ErrItemUnconfirmed.
	Unconfirmed bool
}

// PushBatch accepts client's batch: its good items are stored together as one atomic batch,
// all of them or none. With a key, a retry answers the first request's ucsIds, publishing
// again only the items the queue did not take.
func (s *Service) PushBatch(ctx context.Context, client string, items []Item, key Key) (Batch, error) {
	k, err := s.keyOf(ctx, client, key)
	if err != nil {
		return Batch{}, err
	}
	if k != nil {
		k.batch = true
	}
	if k != nil && k.replay != nil {
		return s.replayBatch(ctx, client, items, k), nil
	}
	now := s.cfg.Now()
	b := Batch{Items: make([]ItemResult, len(items))}
	msgs := make([]push.Message, 0, len(items))
	at := make([]int, 0, len(items)) // index of each message in items
	var refused []string             // the rule kind of each item refused for its content
	for i, it := range items {
		if it.Err != nil {
			b.Items[i].Err = it.Err
			if ve, ok := errors.AsType[*push.ValidationError](it.Err); ok {
				refused = append(refused, string(ve.Kind()))
			}
			b.Rejected++
			continue
		}
		msgs = append(msgs, it.Req.Message(push.NewID(now), client, now))
		at = append(at, i)
	}
	if len(msgs) == 0 {
		// Nothing to store, so no key is taken, as for a single push refused for its body: a
		// retry under the key is checked afresh and answered the same, and a request that
		// stores nothing leaves nothing behind for a day.
		s.countRefused(refused)
		return b, nil
	}
	o := queue.PublishOptions{}
	if k != nil {
		ids := make([]string, len(items))
		for j, m := range msgs {
			ids[at[j]] = m.UcsID
		}
		if err := k.claimOrLoad(ctx, ids); err != nil {
			return Batch{}, err
		}
		if !k.owner {
			// another request took the key first: answer as it does
			return s.replayBatch(ctx, client, items, k), nil
		}
		o = k.publishOptions()
	}
	// Counted once the request is the key's own: one that lost it to another under way is
	// answered as a replay, and counts nothing.
	s.countRefused(refused)
	if err := s.cfg.Publisher.PublishBatch(ctx, msgs, o); err != nil {
		s.cfg.Logger.Warn("batch not accepted", "pushes", len(msgs), "err", err)
		b.Unconfirmed = errors.Is(err, queue.ErrUnconfirmed)
		for j, i := range at {
			b.Items[i].Err = ErrNotTaken
			if b.Unconfirmed {
				b.Items[i] = ItemResult{UcsID: msgs[j].UcsID, Err: ErrItemUnconfirmed}
			}
		}
		if k != nil {
			k.refused(ctx, err, at)
		}
		b.Unavailable, b.Full, b.Unchecked = true, errors.Is(err, queue.ErrFull), errors.Is(err, ErrKeyUnchecked)
		b.Rejected = len(b.Items) - b.Accepted
		return b, nil
	}
	for j, m := range msgs {
		b.Items[at[j]].UcsID = m.UcsID
	}
	b.Accepted = len(msgs)
	s.cfg.Accepted(b.Accepted)
	if k != nil {
		k.finish(ctx, nil)
	}
	return b, nil
}

// countRefused tells Config.Rejected of the items of a new batch refused for their content.
func (s *Service) countRefused(kinds []string) {
	for _, k := range kinds {
		s.cfg.Rejected(k)
	}
}

// replayBatch answers a batch whose Idempotency-Key has a record, from the record: an item
// the first request gave a ucsId answers it, whatever this front end's rules say of it now
// (another version's, during a rolling update); an item refused then is refused with the
// problems found now. If the queue did not take the first request's items, they are published
// again under their recorded ucsIds, all or none; those still not taken are not accepted.
func (s *Service) replayBatch(ctx context.Context, client string, items []Item, k *keyed) Batch {
	now := s.cfg.Now()
	rec := k.replay
	b := Batch{Items: make([]ItemResult, len(items))}
	msgs := map[int]push.Message{}
	for i, it := range items {
		if i >= len(rec.IDs) || rec.IDs[i] == "" {
			b.Items[i].Err = it.Err
			if it.Err == nil {
				b.Items[i].Err = errors.New("the item has no ucsId in its Idempotency-Key record")
			}
			b.Rejected++
			continue
		}
		if it.Err == nil && slices.Contains(rec.Failed, i) {
			msgs[i] = it.Req.Message(rec.IDs[i], client, now)
		}
	}
	still, err := k.republish(ctx, client, msgs)
	// Published again and not confirmed: stored perhaps, all of them, as a first request's.
	b.Unconfirmed = errors.Is(err, queue.ErrUnconfirmed)
	for i := range b.Items {
		r := &b.Items[i]
		switch {
		case r.Err != nil:
		case slices.Contains(still, i) && items[i].Err != nil:
			r.Err = items[i].Err
		case slices.Contains(still, i) && b.Unconfirmed:
			r.UcsID, r.Err = rec.IDs[i], ErrItemUnconfirmed
		case slices.Contains(still, i):
			r.Err = ErrNotTaken
		default:
			r.UcsID = rec.IDs[i]
			b.Accepted++
		}
	}
	if len(still) > 0 {
		b.Unavailable, b.Full, b.Unchecked = true, errors.Is(err, queue.ErrFull), errors.Is(err, ErrKeyUnchecked)
		b.Rejected = len(b.Items) - b.Accepted
	}
	return b
}
