package queue

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// NewPublisherWaiting is NewPublisher waiting wait for a PubAck rather than ackWait.
func NewPublisherWaiting(js jetstream.JetStream, wait time.Duration) (*Publisher, error) {
	return newPublisher(js, wait)
}
