// Package notification is the push pipeline's front half as the interfaces describe it,
// whatever the transport: accepting pushes, answering their results, and the Idempotency-Key
// protocol. pkg/server adapts it to HTTP (reading and checking requests, the answers' JSON,
// the envelope codes and statuses), as it adapts pkg/oauth for sign-in.
//
// # Accepting
//
// A push is accepted once the queue has stored it: Push publishes one message and returns its
// ucsId after the stream's PubAck; PushBatch publishes the good items of a batch as one atomic
// batch, all of them or none (then the answer says the queue did not take them, and no item
// has a ucsId). The store is not needed to accept a push: the queue answers lookups of a push
// until a worker has recorded its outcome. A push the queue refuses is ErrQueueFull (the
// stream is at its limits) or ErrQueueUnavailable. The one exception is a retry under an
// Idempotency-Key of a request the queue did not take: it reads the store to tell whether that
// request went through after all (its PubAck lost, the push delivered since), and while the
// store cannot answer it is ErrKeyUnchecked, nothing published.
//
// # Lookup, in at most three steps
//
// Result finds the current result of a push by reads by key only:
//
//  1. the final results in memory (the first final result of a push wins, here as in the
//     store: a later, different one never replaces it);
//  2. the queue: one direct get of the push's own subject, which holds only the caller's own
//     pushes. A push no worker has reached is queued (with the pause of sending, if one holds
//     it back); one a worker received answers with the store's progress record of its
//     attempts, or from the queue alone when the store is slow (Config.StoreWait) or down;
//  3. the store, for a push no longer in the queue: its receipt's final result, else its
//     outcome record (sent, or failed by a worker). A delivered push costs one read; one
//     still waiting for its receipt, a failed one and a ucsId the service never gave out
//     cost two. A final result is kept in memory.
//
// Results does the same for up to a thousand ucsIds in a bounded number of round trips: the
// memory, one batch direct get of the queue for all the others, then the store by key, a few
// at a time, reading a push's outcome record before its receipt's final result, so that a
// ucsId never given out costs one read (a delivered push two). A push of another client does not exist for the caller: ErrNotFound, as an
// unknown one.
//
// # Idempotency-Key
//
// A request may carry a key (Key); its record lives in a NATS key-value bucket (Records) for
// KeyTTL, the stream's dedupe window. The first request with the key takes it (an atomic
// create) with the ucsIds it gave its items, publishes under the record's key as message id,
// and records which items the queue did not take. A later request with the same key and body
// answers the recorded ucsIds, publishing again only the items the queue did not take, under
// their recorded ucsIds and the same message id, so that the stream stores each push once.
// The same key with another body is ErrKeyReused; a key whose first request is still under way
// is ErrKeyInUse, until KeyStale has passed, after which a retry takes it over and publishes
// every item again, which the stream's dedupe makes harmless.
//
// # Memory and the platform's events
//
// Every front end keeps the last final results (Remember: its own lookups, and what workers and
// other front ends announce) and the messages the platform accepted, by msgid, until their
// receipt (RememberSent). The callback keeps each platform event in a stream (KeepEvent); one
// front end at a time applies them in order (ApplyEvents): follows by CreateTime, receipts by
// msgid (from memory, else one store read). A receipt whose msgid no message has yet is held up
// to Config.ReceiptWait, then dropped and counted. The first final result of a push wins, in
// the store and in every front end's memory.
package notification
