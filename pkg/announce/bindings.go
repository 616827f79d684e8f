package announce

import (
	"fmt"

	"github.com/nats-io/nats.go"
)

// BindingsSubject carries the user numbers whose binding a student changed on the binding
// page, from the front end to every worker, which forget what they cached of them: an unbind
// stops messages at once rather than after the cache's lifetime. Plain NATS: a worker that
// missed one reads the store again when its cached entry expires.
const BindingsSubject = "ucs.bindings.changed"

// BindingChanged tells every worker that the binding of userID changed. Best effort: the
// store has the change already. The announcement is flushed, so that a push accepted after it
// returns reaches the workers after it.
func BindingChanged(nc *nats.Conn, userID string) {
	if err := nc.Publish(BindingsSubject, []byte(userID)); err == nil {
		_ = nc.Flush()
	}
}

// SubscribeBindings calls forget with every user number announced.
func SubscribeBindings(nc *nats.Conn, forget func(userID string)) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(BindingsSubject, func(m *nats.Msg) {
		if len(m.Data) > 0 && len(m.Data) <= 64 {
			forget(string(m.Data))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", BindingsSubject, err)
	}
	return sub, nil
}
