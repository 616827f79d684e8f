// Package oauth is the token service: client authentication, the token endpoint's grants,
// access token claims, and the verification of bearer tokens on every data interface.
//
// # Sign-in flows
//
// An authorization request travels sealed with the browser and records its kind (a client's
// request, the account page's sign-in, the binding page's sign-in) and the steps it has passed.
// The consent step takes only a client's request that has passed the sign-in, in the session
// that passed it: a request asking for a new sign-in (prompt=login, an exceeded max_age) gets
// the login form and nothing else, and the account and binding pages' sign-ins never reach a
// client's consent.
//
// # Codes and refresh tokens
//
// An authorization request is not stored while the user signs in: it travels sealed
// (AES-256-GCM, with a key the replicas share through the store), so unauthenticated requests
// cost no storage; only its answer is recorded, so it is answered once. Codes are single use,
// valid CodeTTL (60 s), bound to the client, redirect_uri, nonce and PKCE challenge, which are
// checked before the code is consumed (atomically): another client's code or a wrong
// verifier uses nothing up. A code used twice revokes what its first use issued, as Keycloak
// does. Refresh tokens rotate on every use; a rotated one used again revokes its whole family;
// they end with the sign-in session.
//
// # Refresh
//
// A refresh may ask for less than the grant (RFC 6749 §6): that answer's access and ID tokens
// carry the narrower scope, and the refresh token issued with them keeps the grant's, so the
// next refresh may ask for all of it again.
//
// # Logout
//
// An id_token_hint must be an ID token of this issuer (ParseIDToken tells it apart from access
// tokens and logout tokens: RFC 8725 §3.11). At logout, a hint whose sid and sub are the
// browser's session signs it out at once; a hint of another session or user asks for the
// confirmation; a hint without a session cookie ends the session the hint names, as Keycloak
// does. A client's back end ends a session with POST logout, its credentials and a refresh
// token of that session (LogoutClient, Keycloak's server-side logout): 204, and the session's
// refresh tokens, access tokens and browser sign-in end with it.
//
// # Back-channel logout
//
// A client may register backchannel_logout_uri (OpenID Connect Back-Channel Logout 1.0). A
// session records each client that received tokens in it; when it ends (logout, the account
// page, a client's logout, the oldest of a user's sessions beyond MaxSessionsPerUser) each of
// them that registered an address is sent a logout token by POST (form field logout_token),
// signed with the keys of its ID tokens: header typ logout+jwt; claims iss, aud, iat, exp (5
// minutes), jti, sub, sid and events {"http://schemas.openid.net/event/backchannel-logout":
// {}}; never a nonce. Backchannel sends from a bounded queue (1024 tokens; one more is
// dropped and logged) with 4 senders; a failed post (no answer, 5xx, 429) is retried with
// exponential backoff from 500 ms up to 30 s apart for at most 2 minutes; a 4xx answer is the
// client's refusal and is not retried. The user's logout never waits for it.
//
// # Sign-in limits
//
// No one can lock a client out, nor an address; a user only for a while, as Keycloak does:
//
//   - A client is never locked. Its id is public and its secret a generated high-entropy
//     value: a correct secret is accepted whatever failed before, from any address.
//   - A user of the login form is locked temporarily, as Keycloak's brute-force detection
//     does (oauth.brute_force): after 30 failures a wait of 60 s per 30 failures, at most
//     15 min; two failures less than 1 s apart, at least 60 s; failures forgotten after 12 h
//     without one. Only that user is locked, and only while the wait lasts: a locked user's
//     right password gets the same answer as a wrong one. A made-up user name gets no record.
//     So someone who knows a user number can keep that user waiting (two wrong passwords a
//     minute do it, from any address), as with Keycloak; the campus single sign-on, where most
//     users sign in, is not affected.
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
//
// A single access token revoked by its client (RFC 7009, as Keycloak does) is written to the
// bucket alone, by its jti, for longer than any access token lives; its session and refresh
// token stay. Every bearer check reads it from memory, a client credentials token's too.
// Should NATS be unreachable, such a revocation cannot be read and the token is accepted: the
// store records revoked sessions, families and grants, not single access tokens.
package oauth
