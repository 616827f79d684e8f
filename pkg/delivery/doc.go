// Package delivery is the workers' side of the pipeline: it takes accepted pushes from the
// shared durable consumer, finds the recipient's follower id, maps the data onto the type's
// template, sends it through the platform and records the outcome before answering the queue.
//
// # Outcomes
//
// Each delivery of a message from the queue ends in one explicit Outcome: Sent (the platform
// took it; its msgid is recorded and announced, and the receipt makes it delivered or failed),
// Retry after a backoff (a busy platform, HTTP 5xx, a time-out), Failed for good (no binding,
// not following, an error the platform documents as permanent, or worker.max_attempts spent:
// then a copy goes to the dead letters first), or Snooze: handed back to the queue after a
// delay without counting an attempt, because nothing was asked of the platform or what was
// asked is not the message's doing.
//
// # Attempts are the platform's calls
//
// The attempt number lives in the push's progress record in the store, not in the queue's
// delivery count. Before each call the worker records attempt n+1, and calls only once the
// store surely has it (a write in doubt is written again), so an attempt counts even when the
// worker dies before the platform answers, and is counted once. A redelivered message reads its
// history there and goes on from it; a copy whose push was sent or finished already sends
// nothing. A store outage, a pause, a wait for the send budget, a worker stopping, a failed
// record write or an access token that could not be had snoozes the message: no call, no
// attempt. Backoff (RetryPolicy, exponential with jitter) is computed from these attempts.
//
// Each write of the progress is an entry of the push's progress record whose key names the
// delivery of the message (the queue's count, under an epoch that grows should the count start
// again) and is above every entry of earlier deliveries and every one the delivery wrote
// before (store.ProgressRecord): a worker that stops while its attempt's record is on the way
// to a slow store puts the progress back with the next entry, and the late record, below it,
// is read by no one; a write that lands after the next delivery's own entries is below them
// too, and undoes none of its calls.
//
// That record costs one more insert for every message, which the store waits for before the
// call. On the embedded store (FerretDB over SQLite, two cores) it is the end-to-end row's
// largest cost: 100,000 messages through two workers to a platform answering in 50 ms reach
// 2,157 delivered/s with it and 2,757/s when the first attempt's record is left out. On
// MongoDB an insert by _id is far cheaper; the count is worth it either way, as a worker
// killed during a call would otherwise leave that call uncounted.
//
// # Pauses
//
// A refusal of the account rather than the message pauses sending for every worker (the
// shared pause of package sending) instead of retrying each message: 45009 (the daily quota)
// until platform.quota_reset, 45011 (the per-minute limit) until the next minute, and 48001
// (no permission for the interface), 48004 and 50002 (the interface banned, the account
// restricted), 40125, 40013 and 41004 (wrong or missing appid or secret), 40243 (the AppSecret
// frozen) and 40037 and 40036 (a template id the account does not have, or no template id at
// all: every push of its type would fail alike) until an operator runs `worker -resume` (at
// most 24 h, then sending is tried again).
//
// 40164 (61004 at the token endpoint) refuses the calling worker's address (not on the
// account's IP whitelist), not the account: workers on other hosts may still send. That worker alone pauses, for
// Config.AddressPauseFor (a minute), hands the messages it holds back to the queue for the
// others (the call does not count), reports not ready, and then tries again by itself, so a
// node added without its address on the whitelist stops nobody else, and needs no resume. A
// worker that can get no access token for another cause than the account's (the platform's
// token endpoint failing, or this worker's way to it) pauses itself alike, for
// Config.TokenPauseFor (30 s): one worker cut off from the token endpoint stops nobody else. So
// does a worker that an HTTP 429, or a 503 with Retry-After, asks to wait, for as long as it
// asks (a minute for a 429 that says nothing): the platform's own limits are errcodes, so such
// an answer is a gateway's on that worker's way.
// The call that met a refusal does not count as an attempt (taking it back is written until
// the store has it); the messages wait at the gate, or in the queue for another worker, shown
// queued with the cause and the operator's action.
//
// The gate (pause, then send budget) comes before the attempt's record, and the call after it:
// a message whose record was written while a pause began, or which held its budget token more
// than 100 ms (a slow or unreachable store), is taken back and goes through the gate again, so
// that neither a pause nor platform.max_rate is passed when the store answers again.
//
// A redelivered message whose history shows its attempts used up, the last one failed (its
// worker stopped before the final record), fails and is dead-lettered without another call;
// one whose history shows a retry time ahead (its worker died, or its delayed nak was lost,
// between the retry's record and the nak) waits for that time, up to the longest backoff. A
// history whose last attempt was under way leaves that call's outcome unknown: the call is made
// again, with the same client_msg_id and to the same follower (the record of an attempt names
// it), and counts. The platform tells a repeat by client_msg_id per follower: a student who moved
// to another follower or unbound meanwhile is not followed by a call in doubt, which would be a
// second message; every other delivery reads the binding as it is when the call is made (after
// any wait at the gate). The platform answers a repeat within 10
// minutes of a call it took with that call's msgid, sending nothing twice; backoff_max (at most
// 9 minutes) keeps a retry after a lost answer inside that window. A pause or a store outage
// longer than the window between the two calls is not bounded, though: the platform then takes
// the repeat for a new message, and the user may get it twice. The platform offers no way to ask
// whether it took the first call, so the choice is between calling again and giving the message
// up, and a duplicate is chosen over a loss.
//
// A call whose answer was lost in the same worker (a time-out, the connection lost, a gateway's
// 504, a success without a msgid) leaves its outcome unknown as well, and a refusal of a later
// call (an errcode, a 502) says nothing of it. Such a message is asked again even past
// worker.max_attempts, its record saying sending, while the platform's duplicate check of that
// call lasts; only then does it fail, its reason saying that the platform may have sent it.
//
// # Timeouts
//
// One attempt (which may fetch a token, send, and on a rejected token fetch again and send
// once more) is bounded by Config.SendTimeout, 15 s; each HTTP request to the platform by the
// platform client's 10 s.
//
// # The consumer
//
// A pull from a consumer that is gone (an operator's `nats consumer rm`, NATS restarted
// without its data) just waits, as if nothing were queued. A worker that fetched nothing asks
// every Config.ConsumerCheck (15 s) whether its consumer exists, and makes it again, with the
// stream when that is gone too (Config.Reconsume); while it cannot, ConsumerGone says why, and
// the worker's readiness fails with it.
package delivery
