package push

import "time"

// State is the delivery state of a push, as a lookup reports it.
type State string

// The delivery states. queued → sending → sent → delivered or failed; a failed attempt that
// will be retried goes back to queued with the attempt counted and its error kept.
const (
	StateQueued    State = "queued"
	StateSending   State = "sending"
	StateSent      State = "sent"
	StateDelivered State = "delivered"
	StateFailed    State = "failed"
)

// Final reports whether no further change can happen.
func (s State) Final() bool { return s == StateDelivered || s == StateFailed }

// Result is the state of a push as of one stage of its delivery: what a lookup answers. Every
// record the store keeps of a push is a whole Result, so that any one of them answers a lookup
// by itself; the bson names are those of the store's documents.
type Result struct {
	UcsID     string    `bson:"ucs"`
	ClientID  string    `bson:"client"`
	State     State     `bson:"state"`
	Type      string    `bson:"type,omitempty"`
	UserID    string    `bson:"user,omitempty"`
	Attempts  int       `bson:"attempts,omitempty"`
	LastError string    `bson:"last_error,omitempty"`
	Reason    string    `bson:"reason,omitempty"`
	MsgID     int64     `bson:"msgid,omitempty"`
	Accepted  time.Time `bson:"accepted"`
	Updated   time.Time `bson:"updated"`
	Sent      time.Time `bson:"sent,omitempty"`
	Finished  time.Time `bson:"finished,omitempty"`
	RetryAt   time.Time `bson:"retry_at,omitempty"`
	// To is the follower (openid) the last call of the push went to, kept while that call's
	// outcome is unknown: the platform tells a repeat of a call by its client_msg_id to the
	// same follower, so a call in doubt is asked again of that follower, whatever the user
	// number is bound to since. Not in sent or final results; no lookup shows it.
	To string `bson:"to,omitempty"`
	// Rev is the key of the progress entry this result is, or will be written as (see
	// store.ProgressRecord); "" in every other result. Not stored in the entry; no lookup
	// shows it.
	Rev string `bson:"-" json:"-"`
}
