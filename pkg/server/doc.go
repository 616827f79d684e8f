// Package server is the HTTP front end (echo): the token endpoint and the OpenID Connect
// endpoints and pages, the bearer-token check of every data interface, push and result lookup,
// the platform's callback, the binding page, the account, operations and sandbox pages, the
// metadata dictionary, the OpenAPI description and its page, and health. The OAuth 2.0 and
// OpenID Connect protocol lives in package oauth; this package adapts requests and pages to it.
// Every GET route also answers HEAD.
//
// # Push
//
// A push is validated (package push, with the account's keyword kinds), given a ucsId and
// published on its own subject; the answer waits for the stream's PubAck and nothing else, so
// pushes are accepted while the store is slow or down. A batch's good items are published as
// one atomic batch: all of them or none (503, to be sent again). An Idempotency-Key is claimed
// in a NATS key-value record before publishing, so the same key from the same client, on any
// front end, answers the first request's ucsIds and stores nothing twice.
//
// # Lookup in at most three steps
//
// Each a read by key: the final results in memory (every front end keeps the last 100,000
// that ucs.results.final announces; the first final result of a push wins, a later different
// one never replaces it); the push's own subject in the queue (with the store's progress of
// its attempts once a worker has received it, the queue answering alone if the store does not
// within StoreWait); for a push that left the queue, the store's records by key (one read for
// a ucsId it has no record of). A batch
// lookup reads the queue once for all its ids. Another client's push reads as unknown.
//
// # The platform's callback
//
// Each event is authenticated (signature, or msg_signature and decryption in safe mode; a
// (timestamp, nonce) pair taken once by all front ends), stored in the platform events stream
// and answered success at once, whatever the store is doing; 503 only if the stream cannot take
// it. One front end at a time applies the events in order (ApplyEvents): follows by CreateTime,
// receipts by msgid (from the workers' announcements in memory, else one store read), a receipt
// whose msgid is not known yet held up to two minutes, then dropped and counted.
package server
