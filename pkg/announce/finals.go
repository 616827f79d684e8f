package announce

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/campus-it/ucs/pkg/push"
)

// FinalsSubject carries final results from whoever records them (the front end for a delivery
// receipt, a worker for a failure) to every front end, which keep them in memory for lookups.
// It is plain NATS, not the stream: a result missed here is still read from the store.
const FinalsSubject = "ucs.results.final"

// Finals announces final results on FinalsSubject.
type Finals struct {
	nc *nats.Conn
}

// NewFinals returns an announcer on nc.
func NewFinals(nc *nats.Conn) *Finals { return &Finals{nc: nc} }

// Announce tells every front end that r is final. It is best effort: the store has r already.
func (f *Finals) Announce(r push.Result) {
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	_ = f.nc.Publish(FinalsSubject, b)
}

// SentSubject carries, from the worker that recorded it, each message the platform accepted:
// its sent result and the follower it went to, so that the front end that receives the
// platform's delivery receipt finds the message by its msgid in memory rather than in the
// store. Plain NATS as well: a receipt whose announcement was missed reads the store.
const SentSubject = "ucs.results.sent"

// sentAnnouncement is a message of SentSubject.
type sentAnnouncement struct {
	Result push.Result `json:"result"`
	OpenID string      `json:"openid"`
}

// AnnounceSent tells every front end that the platform accepted r for openID. Best effort:
// the store has the sent record already.
func (f *Finals) AnnounceSent(r push.Result, openID string) {
	b, err := json.Marshal(sentAnnouncement{Result: r, OpenID: openID})
	if err != nil {
		return
	}
	_ = f.nc.Publish(SentSubject, b)
}

// SubscribeSent calls keep with every sent message announced.
func SubscribeSent(nc *nats.Conn, keep func(r push.Result, openID string)) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(SentSubject, func(m *nats.Msg) {
		var a sentAnnouncement
		if err := json.Unmarshal(m.Data, &a); err == nil && a.Result.UcsID != "" && a.Result.MsgID != 0 &&
			a.Result.State == push.StateSent && a.OpenID != "" {
			keep(a.Result, a.OpenID)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", SentSubject, err)
	}
	return sub, nil
}

// SubscribeFinals calls keep with every final result announced.
func SubscribeFinals(nc *nats.Conn, keep func(push.Result)) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(FinalsSubject, func(m *nats.Msg) {
		var r push.Result
		if err := json.Unmarshal(m.Data, &r); err == nil && r.UcsID != "" && r.State.Final() {
			keep(r)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", FinalsSubject, err)
	}
	return sub, nil
}
