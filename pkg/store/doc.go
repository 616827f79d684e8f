// Package store keeps the service's state in MongoDB (FerretDB in standalone mode): the results
// of pushes, campus user bindings and followers, registered clients, signing keys and the
// sign-in flow's records.
//
// Every read and write of a hot path is a single-key equality on a string _id: the one filter
// that the embedded FerretDB (SQLite) answers from an index; any other filter reads the whole
// table. Records are keyed by what their reader already holds (a ucsId, a msgid, a user number,
// an openid), and the delivery path writes through a Writer, which gathers the records of many
// goroutines into few batched writes (a lone record waits for nothing).
//
// A push's records in push_results are <ucsId> (what came of it once a worker was done: sent,
// with the platform's msgid, or failed), <ucsId>/f (the final result of a sent push, from its
// delivery receipt, or a worker's failure of a push that called the platform, which competes
// with such a receipt there) and <ucsId>/p (the progress of its attempts: the attempt number the
// workers count platform calls with); push_msgids maps a msgid to the sent push and the
// follower it went to, so a receipt applies only to a message this service sent. The lookup
// of one push reads <ucsId>/f first (a delivered push costs one read), a batch lookup <ucsId>
// (a ucsId the service never gave out costs one read; see Order). Records are inserted,
// never replaced: the
// first final result of a push wins, whoever writes a later one (FirstFinalRecord tells the
// writer so). Progress changes, but by entries added to its record's log, never by replacing
// it: each entry's key names the delivery of the message that wrote it and the write's number,
// and the greatest key is the progress, so that a write reaching a slow store after its worker
// gave up waiting for it (and wrote again, or stopped and put the progress back) changes
// nothing (ProgressRecord). A queued push no worker has reached has no record:
// the queue answers for it. Records an earlier version wrote (sent at <ucsId>/s) are read
// until they expire.
//
// Retention (mongodb.retention) is a TTL index on MongoDB; on FerretDB, which has none, Sweep
// reads the head of each table of delivery records once and deletes the expired ones in bounded
// batches by _id. Expired sign-in records (token families among them) are swept on both, a day
// after their expiry (a refresh token, its use and its family a day after its session ends, if
// later: RefreshToken.Kept), a minute after a process starts and every hour after, found by a
// query on their expiry (up to 50,000 at a time) and deleted by _id: on MongoDB through an
// index, while FerretDB reads the whole table for the query (9 to 11 s for 100,000 live
// sessions, BenchmarkSignInSweep100k; lookups by _id go on meanwhile).
//
// An update or replace command holds at most 50 statements (bulkWrite): for each statement
// that meets an existing document the embedded FerretDB holds one of its 100 SQLite
// connections until the command ends, and a command of 100 such statements stops it for good.
package store
