// Package natskv holds the NATS key-value helpers the front ends and workers share state
// with:
//
//   - Mirror: a whole bucket in every replica's memory, for small state read on hot paths
//     (the pause of sending).
//   - Cache: a bucket read through a bounded cache that a watch keeps current, for state
//     callers can grow (revoked token families and sessions, failed sign-ins): memory stays
//     within a stated bound whatever the callers do.
//   - Counters: values changed atomically and kept only in the bucket.
//   - Records: small records read and written straight in the bucket, created at most once
//     across replicas (Idempotency-Key records, the nonces of the platform's callbacks).
//   - TokenBuckets: the one token bucket type, shared by every replica, behind the token
//     endpoint's rate limits, the slowing of addresses that fail to authenticate, and the
//     workers' send budget.
//
// Every value is written with a compare-and-set, so concurrent writers in any replica never
// lose an update.
//
// Should NATS lose a bucket (a server restarted without its files, a stream deleted by hand),
// each helper makes it again, empty, at its next call; a Mirror or a Cache also looks every
// 15 s, and follows the new bucket from its start.
package natskv
