package notification

import (
	"sync"
	"time"
	"unique"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/campus-it/ucs/pkg/push"
)

// compactResult is a result as the front end's memory keeps it. A bulk send fills these caches
// with a hundred thousand entries, all scanned by the garbage collector, so an entry holds as
// little as a lookup needs: times as Unix nanoseconds (a time.Time carries a pointer), the
// strings that repeat from one push to the next (client, type, user, state) interned, and no
// copy of the key.
type compactResult struct {
	clientID, typ, userID, state string
	lastError, reason            string
	attempts                     int
	msgID                        int64
	accepted, updated            int64
	sent, finished, retryAt      int64
	// counted: the operations page was told of the result (see resultCache.Add).
	counted bool
}

// intern returns the one shared copy of s, so that a hundred thousand results of one client
// hold its id once.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// nanos is t as Unix nanoseconds, 0 for the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromNanos is the inverse of nanos, in UTC.
func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func compact(r push.Result) compactResult {
	return compactResult{
		clientID: intern(r.ClientID), typ: intern(r.Type), userID: intern(r.UserID), state: intern(string(r.State)),
		lastError: r.LastError, reason: r.Reason, attempts: r.Attempts, msgID: r.MsgID,
		accepted: nanos(r.Accepted), updated: nanos(r.Updated),
		sent: nanos(r.Sent), finished: nanos(r.Finished), retryAt: nanos(r.RetryAt),
	}
}

func (c compactResult) result(ucsID string) push.Result {
	return push.Result{
		UcsID: ucsID, ClientID: c.clientID, State: push.State(c.state), Type: c.typ, UserID: c.userID,
		Attempts: c.attempts, LastError: c.lastError, Reason: c.reason, MsgID: c.msgID,
		Accepted: fromNanos(c.accepted), Updated: fromNanos(c.updated),
		Sent: fromNanos(c.sent), Finished: fromNanos(c.finished), RetryAt: fromNanos(c.retryAt),
	}
}

// resultCache keeps final results by ucsId, newest used first, up to its size.
type resultCache struct {
	mu sync.Mutex // orders Add's read and write of one entry
	c  *lru.Cache[string, compactResult]
}

func newResultCache(size int) (*resultCache, error) {
	c, err := lru.New[string, compactResult](size)
	return &resultCache{c: c}, err
}

// Get returns the result of ucsID and marks it used.
func (rc *resultCache) Get(ucsID string) (push.Result, bool) {
	e, ok := rc.c.Get(ucsID)
	if !ok {
		return push.Result{}, false
	}
	return e.result(ucsID), true
}

// Seen reports whether ucsID is kept, without marking it used.
func (rc *resultCache) Seen(ucsID string) bool { return rc.c.Contains(ucsID) }

// Add keeps r under ucsID, unless a result of ucsID is kept already: every result kept is
// final, and the first final result of a push wins (as in the store), so that a later,
// different one (a receipt the platform pushed twice with different statuses, an announcement
// that comes late) never replaces it. It returns the result kept.
//
// announced tells a result this front end heard of as it came about (an announcement, a
// receipt it applied) from one a lookup read from the store, which may be of any age (a push
// delivered before this front end started). count reports that the kept result is to be
// counted now: at the first announcement of it, and never for a lookup's.
func (rc *resultCache) Add(ucsID string, r push.Result, announced bool) (kept push.Result, count bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	e, ok := rc.c.Peek(ucsID)
	switch {
	case !ok:
		e = compact(r)
		e.counted = announced
		rc.c.Add(ucsID, e)
		return r, announced
	case announced && !e.counted:
		e.counted = true
		rc.c.Add(ucsID, e)
		return e.result(ucsID), true
	}
	return e.result(ucsID), false
}

// sentMessage is a message the platform accepted, and the follower it went to.
type sentMessage struct {
	ucsID  string
	result compactResult
	openID string
}

// sentCache keeps messages the platform accepted by their msgid, until their receipt comes.
type sentCache struct {
	c *lru.Cache[int64, sentMessage]
}

func newSentCache(size int) (*sentCache, error) {
	c, err := lru.New[int64, sentMessage](size)
	return &sentCache{c: c}, err
}

// Get returns the message the platform gave msgID, and the follower it went to.
func (sc *sentCache) Get(msgID int64) (push.Result, string, bool) {
	m, ok := sc.c.Get(msgID)
	if !ok {
		return push.Result{}, "", false
	}
	return m.result.result(m.ucsID), m.openID, true
}

// Seen reports whether msgID is kept, without marking it used.
func (sc *sentCache) Seen(msgID int64) bool { return sc.c.Contains(msgID) }

// Add keeps r, sent to openID, under its msgid.
func (sc *sentCache) Add(r push.Result, openID string) {
	sc.c.Add(r.MsgID, sentMessage{ucsID: r.UcsID, result: compact(r), openID: intern(openID)})
}

// Remove forgets msgID.
func (sc *sentCache) Remove(msgID int64) { sc.c.Remove(msgID) }
