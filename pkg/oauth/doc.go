// Package oauth is the token service: client authentication, the token endpoint's grants,
// access token claims, and the verification of bearer tokens on every data interface.
//
// # Sign-in limits
//
// No one can lock someone else out:
//
//   - A client is never locked. Its id is public and its secret a generated high-entropy
//     value: a correct secret is accepted whatever failed before, from any address.
//   - A user of the login form is locked temporarily, as Keycloak's brute-force detection
//     does (oauth.brute_force): after 30 failures a wait of 60 s per 30 failures, at most
//     15 min; two failures less than 1 s apart, at least 60 s; failures forgotten after 12 h
//     without one. Only that user is locked, and only while the wait lasts: a locked user's
//     right password gets the same answer as a wrong one. A made-up user name gets no record.
//   - An address that fails to authenticate (a wrong client secret, a wrong password, an
//     unknown user) more than DefaultAddressFailureBurst times at once, then more than
//     DefaultAddressFailures times a second, is slowed: 429 with Retry-After for its wrong
//     client secrets, and for every login form it posts before the password is checked. It
//     is never locked: under the rate again, it is served again. An IPv6 address counts as its
//     /64.
//   - The rate limits of token requests (oauth.rate_limits) are per address and, once a
//     client authenticated, per client: no one else's requests use up a client's grants.
//
// All of these are shared by every front end through NATS key-value buckets (ucs_rates for the
// token buckets, ucs_failures for the users' records).
//
// # Revocations
//
// Ended sessions, revoked token families and revoked grants are written to the ucs_revocations
// bucket and to the store. Every front end reads the bucket through a bounded cache that a
// watch keeps current, so a revocation on one front end refuses the tokens on every front end
// within milliseconds, while memory stays bounded however many families callers revoke.
package oauth
