package queue

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// NewPublisherWaiting is NewPublisher waiting wait for a PubAck rather than ackWait.
func NewPublisherWaiting(js jetstream.JetStream, wait time.Duration) (*Publisher, error) {
	return newPublisher(js, wait)
}

// BeforeConfirm sets what is called as a publish without its acknowledgement begins asking the
// stream whether it stored the push, and returns a function that puts the default back.
func BeforeConfirm(f func()) (restore func()) {
	beforeConfirm = f
	return func() { beforeConfirm = func() {} }
}

// MaxConfirms is maxConfirms.
const MaxConfirms = maxConfirms
