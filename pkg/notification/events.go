package notification

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/store"
)

// The front end that applies platform events (one at a time, the stream's consumer is pinned
// to it) takes them from the stream in order and applies each batch together (ApplyEvents):
//
//   - a follow or unfollow sets the follower's state, in CreateTime order (the store ignores an
//     older event that comes late);
//   - a delivery receipt finds its message by msgid, in memory (the workers announce each
//     message the platform accepted) or by one store read, and records its final result. The
//     first final result of a push wins, in the store and in every front end's memory: a second,
//     different receipt changes nothing;
//   - a receipt whose msgid no message has yet waits, held in the stream, up to ReceiptWait for
//     it (its sent record may be written late, or the platform took an attempt whose answer the
//     worker never got and will give the worker's next attempt the same msgid); then its msgid
//     is read once more from the store, and if no message has it, it is dropped, counted
//     (ucs_callback_receipts_unknown_total) and logged at most once a minute. A receipt for a
//     message this service never sent costs two store reads;
//   - when the store fails, the batch is tried again, with backoff, until it is taken; the
//     events stay in the stream meanwhile.

// eventRetryMin and eventRetryMax bound the wait before a batch the store refused is tried
// again.
const (
	eventRetryMin = 500 * time.Millisecond
	eventRetryMax = 5 * time.Second
)

// eventTick is how often held receipts look for their msgid in memory and waiting events are
// kept from going to another front end.
const eventTick = 250 * time.Millisecond

// receiptSkew is how much later than its receipt's arrival a message may be recorded as sent
// on its first attempt (the worker's clock, the time it read the platform's answer) and still
// be the receipt's message. A receipt that came earlier than that was made before the message
// was sent, and is for another message. It allows for a platform answer that reaches the
// worker as late as a send may take (15 s) after the receipt reached the front end, and for
// clocks of the two hosts that differ by as much again.
const receiptSkew = 30 * time.Second

// receiptReaders bounds the store reads of msgids one batch makes at once.
const receiptReaders = 8

// unknownLogEvery bounds the log lines about receipts for msgids this service did not send.
const unknownLogEvery = time.Minute

// eventItem is an event being applied.
type eventItem struct {
	e  *queue.PlatformEvent
	ev platform.Event
	// at is when the callback came.
	at time.Time
	// deadline, once its msgid was not found, is until when a receipt waits for it.
	deadline time.Time
	// told is when the stream last heard that the event is being worked on (real time).
	told time.Time
}

// applier is the state of ApplyEvents.
type applier struct {
	s *Service
	// pending are events to apply (again, when the store failed).
	pending []*eventItem
	// held are receipts waiting for their msgid, by msgid, in arrival order.
	held map[int64][]*eventItem
	// failing is set while the store refuses; retry fires when pending is tried again.
	failing bool
	backoff time.Duration
	retry   *time.Timer
	// lastStoreLog is when a store failure was last logged.
	lastStoreLog time.Time
	// unknown counts the receipts dropped since the last log line about them.
	unknown        int
	lastUnknownLog time.Time
}

// ApplyEvents applies the platform events the stream hands out (queue.PlatformEvents.Run) until
// ctx ends; events not done with then are handed back to the stream, for the front end that
// applies them next.
func (s *Service) ApplyEvents(ctx context.Context, in <-chan []*queue.PlatformEvent) error {
	if s.cfg.Events == nil {
		return errors.New("notification: applying platform events needs Events")
	}
	a := &applier{s: s, held: map[int64][]*eventItem{}, retry: time.NewTimer(time.Hour)}
	a.retry.Stop()
	tick := time.NewTicker(eventTick)
	defer tick.Stop()
	defer a.release()
	defer s.receiptsWaiting.Store(0)
	for {
		var take <-chan []*queue.PlatformEvent
		if len(a.pending) == 0 {
			// A new batch only once the one before is applied: events apply in order.
			take = in
		}
		select {
		case <-ctx.Done():
			return nil
		case batch := <-take:
			a.add(batch)
			a.run(ctx)
		case <-a.retry.C:
			a.run(ctx)
		case <-tick.C:
			a.tick(ctx)
		}
		waiting := 0
		for _, its := range a.held {
			waiting += len(its)
		}
		s.receiptsWaiting.Store(int64(waiting))
	}
}

// ReceiptsWaiting is how many delivery receipts this front end holds, waiting for their msgid
// (0 at a front end that does not apply events now).
func (s *Service) ReceiptsWaiting() int { return int(s.receiptsWaiting.Load()) }

// add decodes a batch into pending.
func (a *applier) add(batch []*queue.PlatformEvent) {
	now := time.Now()
	for _, e := range batch {
		var k keptEvent
		if err := json.Unmarshal(e.Data(), &k); err != nil {
			a.s.cfg.Logger.Warn("platform event unreadable; dropped", "err", err)
			e.Done()
			continue
		}
		at := k.At
		if at.IsZero() {
			at = e.Kept()
		}
		a.pending = append(a.pending, &eventItem{e: e, ev: k.Event, at: at, told: now})
	}
}

// run applies pending; what the store refused stays pending, tried again after a backoff.
func (a *applier) run(ctx context.Context) {
	items := a.pending
	a.pending = nil
	failed, storeErr := a.apply(ctx, items)
	// Keep the order: failed ones first, then whatever came meanwhile.
	a.pending = append(failed, a.pending...)
	if ctx.Err() != nil {
		return
	}
	if len(failed) == 0 {
		a.failing, a.backoff = false, 0
		return
	}
	a.failing = true
	a.backoff = min(max(2*a.backoff, eventRetryMin), eventRetryMax)
	a.retry.Reset(a.backoff)
	if now := a.s.cfg.Now(); a.lastStoreLog.IsZero() || now.Sub(a.lastStoreLog) >= unknownLogEvery {
		a.lastStoreLog = now
		a.s.cfg.Logger.Warn("platform events wait for the store; they stay in the stream and are tried again",
			"events", len(a.pending), "err", storeErr)
	}
}

// apply applies items in order and returns those the store refused, with its error.
func (a *applier) apply(ctx context.Context, items []*eventItem) (failed []*eventItem, storeErr error) {
	var receipts []*eventItem
	for i, it := range items {
		switch {
		case it.ev.Event == platform.EventSubscribe || it.ev.Event == platform.EventUnsubscribe:
			if err := a.s.follow(ctx, it.ev); err != nil {
				// The store is down: this event and every one after it wait, in order.
				return append(receipts, items[i:]...), err
			}
			it.e.Done()
		case it.ev.Event == platform.EventTemplateFinish && it.ev.MsgID != 0:
			receipts = append(receipts, it)
		default:
			a.s.cfg.Logger.Warn("platform event of no known kind; dropped", "event", it.ev.Event)
			it.e.Done()
		}
	}
	return a.receipts(ctx, receipts)
}

// found is what a receipt's msgid leads to.
type found struct {
	sent   push.Result
	openID string
	err    error
}

// receipts applies delivery receipts and returns those to try again, with the store's error.
func (a *applier) receipts(ctx context.Context, items []*eventItem) (failed []*eventItem, storeErr error) {
	if len(items) == 0 {
		return nil, nil
	}
	// A receipt for a msgid that earlier ones wait for (held, the msgid unknown then) goes
	// after them: the receipts of one message are applied in the order the stream has them.
	if len(a.held) > 0 {
		var ordered []*eventItem
		for _, it := range items {
			if its, ok := a.held[it.ev.MsgID]; ok {
				ordered = append(ordered, its...)
				delete(a.held, it.ev.MsgID)
			}
			ordered = append(ordered, it)
		}
		items = ordered
	}
	s := a.s
	byMsgID := map[int64]*found{}
	var (
		wg  sync.WaitGroup
		sem = make(chan struct{}, receiptReaders)
	)
	for _, it := range items {
		if byMsgID[it.ev.MsgID] != nil {
			continue
		}
		f := &found{}
		byMsgID[it.ev.MsgID] = f
		if sent, openID, ok := s.sent.Get(it.ev.MsgID); ok {
			f.sent, f.openID = sent, openID
			continue
		}
		// Not announced (a missed announcement, a front end started since): the store.
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			rctx, cancel := context.WithTimeout(ctx, followWait)
			defer cancel()
			f.sent, f.openID, f.err = s.cfg.Store.SentByMsgID(rctx, it.ev.MsgID)
		}()
	}
	wg.Wait()

	now := s.cfg.Now()
	type final struct {
		it *eventItem
		r  push.Result
	}
	var finals []final
	taken := map[string]bool{}
	for _, it := range items {
		f := byMsgID[it.ev.MsgID]
		switch {
		case errors.Is(f.err, store.ErrNotFound):
			if it.deadline.IsZero() {
				// From when the callback came, so that a handover to another front end
				// does not start the wait again.
				it.deadline = it.at.Add(s.cfg.ReceiptWait)
			}
			if now.Before(it.deadline) {
				a.held[it.ev.MsgID] = append(a.held[it.ev.MsgID], it)
				continue
			}
			a.dropUnknown(it)
			continue
		case f.err != nil:
			failed = append(failed, it)
			storeErr = f.err
			continue
		case f.openID != it.ev.FromUserName:
			s.cfg.Logger.Warn("delivery receipt for another follower than the message's; ignored", "msgid", it.ev.MsgID, "ucsId", f.sent.UcsID)
			it.e.Done()
			continue
		case f.sent.Attempts <= 1 && f.sent.Sent.After(it.at.Add(receiptSkew)):
			s.cfg.Logger.Warn("delivery receipt that came before its message's only send; ignored", "msgid", it.ev.MsgID, "ucsId", f.sent.UcsID)
			it.e.Done()
			continue
		}
		id := f.sent.UcsID
		if taken[id] || s.results.Seen(id) {
			// Final already: the first final result wins, and this one changes nothing.
			s.sent.Remove(it.ev.MsgID)
			it.e.Done()
			continue
		}
		taken[id] = true
		finals = append(finals, final{it: it, r: store.Receipt(f.sent, it.ev.Status, now)})
	}

	// Written together (the writer commits them as one batch), each answered for itself.
	errs := make([]error, len(finals))
	for i, f := range finals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.cfg.Events.Write(ctx, store.FirstFinalRecord(f.r, f.r.Finished))
			if errors.Is(errs[i], store.ErrFinalExists) {
				// Another receipt came first: that one is the push's result, here and in
				// every front end.
				finals[i].r, errs[i] = s.cfg.Store.Current(ctx, f.r.UcsID)
			}
		}()
	}
	wg.Wait()
	for i, f := range finals {
		if errs[i] != nil {
			failed = append(failed, f.it)
			storeErr = errs[i]
			continue
		}
		s.sent.Remove(f.it.ev.MsgID)
		s.Remember(f.r)
		s.cfg.Announce(f.r)
		f.it.e.Done()
	}
	return failed, storeErr
}

// dropUnknown drops a receipt for a msgid no message of this service has: on an official
// account other systems send through too, most receipts may be such.
func (a *applier) dropUnknown(it *eventItem) {
	s := a.s
	s.cfg.ReceiptUnknown()
	a.unknown++
	if now := s.cfg.Now(); a.lastUnknownLog.IsZero() || now.Sub(a.lastUnknownLog) >= unknownLogEvery {
		s.cfg.Logger.Warn("delivery receipts for msgids this service did not send were dropped (another system sending through the account, or a message whose sent record was lost)",
			"receipts", a.unknown, "msgid", it.ev.MsgID, "status", it.ev.Status)
		a.unknown, a.lastUnknownLog = 0, now
	}
	it.e.Done()
}

// tick keeps waiting events from going to another front end, and sends held receipts whose
// msgid has come (or whose wait is over) to be applied.
func (a *applier) tick(ctx context.Context) {
	real := time.Now()
	tell := func(it *eventItem) {
		if real.Sub(it.told) >= queue.PlatformEventAckWait/3 {
			it.e.Hold()
			it.told = real
		}
	}
	for _, it := range a.pending {
		tell(it)
	}
	now := a.s.cfg.Now()
	var ready bool
	for msgID, its := range a.held {
		if a.s.sent.Seen(msgID) || !now.Before(its[0].deadline) {
			a.pending = append(a.pending, its...)
			delete(a.held, msgID)
			ready = true
			continue
		}
		for _, it := range its {
			tell(it)
		}
	}
	if ready && !a.failing {
		a.run(ctx)
	}
}

// release hands every event not done with back to the stream, in stream order, for the front
// end that applies events next.
func (a *applier) release() {
	var events []*queue.PlatformEvent
	for _, it := range a.pending {
		events = append(events, it.e)
	}
	for _, its := range a.held {
		for _, it := range its {
			events = append(events, it.e)
		}
	}
	queue.ReleaseInOrder(events)
	a.retry.Stop()
}

// keptEvent is a platform event as the stream keeps it.
type keptEvent struct {
	Event platform.Event `json:"event"`
	// At is when the callback came, by the front end's clock; zero in events kept by earlier
	// versions (the stream's time stands in).
	At time.Time `json:"at,omitzero"`
	// Unsent was set by earlier versions on a receipt whose msgid no message had when it came;
	// every receipt is treated alike now.
	Unsent bool `json:"unsent,omitempty"`
}

// keepWait bounds storing an event in the stream: the platform waits 5 s for the answer to its
// callback.
const keepWait = 3 * time.Second

// KeepEvent stores an authenticated event of a kind the service applies (a delivery receipt, a
// follow or unfollow) in the stream of platform events (Config.KeepEvent), for ApplyEvents to
// apply; events of other kinds are not kept. An event is kept once however often it comes (the
// platform pushes an event again, under a new timestamp and nonce, when its push got no timely
// answer): by its kind, follower, creation time and msgid, which the platform's documentation
// names as what tells a repeat. An error means the stream did not take it.
func (s *Service) KeepEvent(ctx context.Context, ev platform.Event) error {
	key, ok := eventKey(ev)
	if !ok {
		return nil
	}
	b, err := json.Marshal(keptEvent{Event: ev, At: s.cfg.Now()})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, keepWait)
	defer cancel()
	id := ev.Event + "|" + ev.FromUserName + "|" + strconv.FormatInt(ev.CreateTime, 10) + "|" + strconv.FormatInt(ev.MsgID, 10)
	return s.cfg.KeepEvent(ctx, key, id, b)
}

// eventKey is the subject key an event is kept under, and whether it is of a kind the service
// applies.
func eventKey(ev platform.Event) (string, bool) {
	if ev.MsgType != "event" {
		return "", false
	}
	switch ev.Event {
	case platform.EventTemplateFinish:
		return strconv.FormatInt(ev.MsgID, 10), true
	case platform.EventSubscribe, platform.EventUnsubscribe:
		return "follow", true
	}
	return "", false
}

// followWait bounds the store's answer to one follow event, or to one receipt's read of its
// msgid, when events are applied.
const followWait = 5 * time.Second

// follow applies a follow or unfollow; events apply in CreateTime order, whenever they come.
func (s *Service) follow(ctx context.Context, ev platform.Event) error {
	ctx, cancel := context.WithTimeout(ctx, followWait)
	defer cancel()
	return s.cfg.Store.SetFollowing(ctx, ev.FromUserName, ev.Event == platform.EventSubscribe, time.Unix(ev.CreateTime, 0))
}
