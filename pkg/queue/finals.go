package queue

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/campus-it/ucs/pkg/store"
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
func (f *Finals) Announce(r store.Result) {
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	_ = f.nc.Publish(FinalsSubject, b)
}

// SubscribeFinals calls keep with every final result announced.
func SubscribeFinals(nc *nats.Conn, keep func(store.Result)) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(FinalsSubject, func(m *nats.Msg) {
		var r store.Result
		if err := json.Unmarshal(m.Data, &r); err == nil && r.UcsID != "" && r.State.Final() {
			keep(r)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", FinalsSubject, err)
	}
	return sub, nil
}
