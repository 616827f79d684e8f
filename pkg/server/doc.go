// Package server is the HTTP front end (echo): the token endpoint and the OpenID Connect
// endpoints and pages, the bearer-token check of every data interface, push and result lookup,
// the platform's callback, the binding page, the account and operations pages, the
// metadata dictionary, the OpenAPI description and its page, and health. The OAuth 2.0 and
// OpenID Connect protocol lives in package oauth; this package adapts requests and pages to it.
// Every GET route also answers HEAD, but those that use up a one-time value or end a session
// (getOnce), where HEAD is 405.
//
// # Push and lookup
//
// A push is validated (package push, with the account's keyword kinds) and handed to package
// notification, which publishes it on its own subject and answers once the stream stored it; a
// batch's good items go as one atomic batch, all of them or none (503, to be sent again).
// Lookups, the Idempotency-Key protocol and the memory of final results live there too
// (go doc ./pkg/notification); this package reads the requests and writes the answers.
//
// # The platform's callback
//
// Each event is authenticated (package platform: signature, or msg_signature and decryption in
// safe mode), its (timestamp, nonce) pair taken for all front ends by its body alone (Nonces:
// the platform's repeat of the same push is taken again, another body under the pair is not: in
// plain mode it is left unanswered, a replay or another push of the platform's whose nonce met
// the first's, which the platform then pushes again under a pair of its own),
// and it is kept in the platform events stream (notification.Service.KeepEvent) and answered
// success at once, whatever the store is doing. An event the stream cannot take within 4 s gets
// no answer at all: the platform repeats only a push it got none for, and takes any answer,
// a 503 too, as final. One front end at a time applies the events in order
// (notification.Service.ApplyEvents).
package server
