// Package queue carries accepted pushes from the front end to the workers on a NATS JetStream
// stream, and holds the other NATS streams and subjects the programs share.
//
// # The push stream
//
// The stream (nats.stream, UCS_PUSH) is a work queue on disk, replicated in a cluster: a push
// stays in it until a worker acknowledges it, which a worker does only once the push's outcome
// is recorded in the store. When the stream is full, new pushes are refused (503), never old
// ones dropped. Every worker pulls from one durable consumer (nats.consumer, delivery).
//
// Every push is one stream message on a subject of its own, ucs.push.mp.<client>.<ucsId>
// (Subject): the sender's client id first, so that a lookup reads only the caller's own
// subject and a later per-sender scheduler can filter by client, then the push's ucsId, a
// plain ULID. A single push is one publish, answered after its own PubAck. A batch is one
// atomic batch publish (the stream allows atomic publishing, NATS server 2.12 and later): all
// of its pushes are stored, or none are. A push published under an Idempotency-Key carries a
// message id the stream remembers as long as the key is kept (DedupeWindow), so a retry never
// stores it twice. Nothing of our own stands between the front end and the stream: no
// grouping of pushes, no chunks, no expansion.
//
// Batches are atomic rather than fast-ingest (the stream's allow_batched, server 2.14 and
// later), although fast ingest stores batches about two and a half times faster (the bench's
// fast-ingest row). A fast-ingest batch is stored message by message: when it fails, the
// messages before the failure are kept, and the server's reports of which ones may be lost on
// the way. The front end could then neither answer that nothing was accepted nor say what was;
// a caller told 503 would get some of the pushes delivered, and delivered twice after its retry.
// An atomic batch has one answer for all of its pushes. On a stream with a byte bound, the
// server checks each staged message of an atomic batch against everything staged before it,
// so a batch of 1,000 costs it more per message than a batch of 10 does.
//
// While a push waits, the queue answers for it: Waiting reads it by a direct get of its
// subject (a batch lookup reads all of its ids in one batch direct get) and says whether a
// worker has received it yet. A stream written in the earlier layout (pushes on
// ucs.push.mp.<ucsId>, chunks on ucs.push.batch.<block>) is converted at start by Migrate,
// without losing a push; KeepStream, which every front end runs, converts and configures it
// again should a program of the earlier version, started during an upgrade, configure it as
// that version did.
//
// # Beside it
//
// The package holds JetStream streams only: the push stream, its migration from earlier
// layouts (Migrate), the dead letters (DeadLetters: the stream <stream>_DLQ,
// ucs.dead.mp.<client>.<ucsId>, kept 30 days, of messages that exhausted their attempts or that
// no worker can decode), and the stream of the platform's callback events (PlatformEvents:
// <stream>_EVENTS; the callback answers the platform once its event is stored there, and the
// durable consumer apply, pinned to one front end at a time, hands the events out in order).
// What is shared through NATS key-value lives in package natskv (Idempotency-Key and nonce
// records, mirrors, counters, the token bucket) and package sending (the pause every worker
// obeys and the send budget); announcements over plain NATS (sent messages, final results,
// changed bindings) live in package announce.
package queue
