package queue_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
)

// TestPushDeliveredBeforeItsLostAckIsNotCalledRefused: the stream stores a push (or a batch)
// but its PubAck is lost, and meanwhile a delivery worker takes the push and acknowledges it:
// the stream is a work queue, so the push leaves it before the publisher reads it back. Not
// finding it there, the publisher must not call it refused (the caller would send it again,
// and the user get it twice): it is ErrUnconfirmed, which names the push as maybe stored.
func TestPushDeliveredBeforeItsLostAckIsNotCalledRefused(t *testing.T) {
	url := embeddedtest.NATS(t)
	proxy := embeddedtest.NewProxy(t, strings.TrimPrefix(url, "nats://"))
	_, js := embeddedtest.JetStreamAt(t, "nats://"+proxy.Addr())
	_, direct := embeddedtest.JetStreamAt(t, url)
	c := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 1 << 20, MaxAge: time.Hour, AckWait: 5 * time.Second}
	st, err := queue.EnsureStream(context.Background(), js, c)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := queue.EnsureConsumer(context.Background(), direct, c)
	if err != nil {
		t.Fatal(err)
	}
	p, err := queue.NewPublisherWaiting(js, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, trigger string
		ms            []push.Message
		publish       func(ms []push.Message) error
	}{
		{"a push", "PUB " + queue.SubjectPrefix, []push.Message{msg(push.NewID(time.Now()))},
			func(ms []push.Message) error { return p.Publish(context.Background(), ms[0], queue.PublishOptions{}) }},
		{"a batch", "Nats-Batch-Commit", []push.Message{msg(push.NewID(time.Now())), msg(push.NewID(time.Now())), msg(push.NewID(time.Now()))},
			func(ms []push.Message) error { return p.PublishBatch(context.Background(), ms, queue.PublishOptions{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy.HoldAnswersAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte(tc.trigger)) })
			delivered := 0
			defer queue.BeforeConfirm(func() {
				// The worker took the pushes and acknowledged them while the PubAck was on its way.
				b, err := cons.Fetch(len(tc.ms), jetstream.FetchMaxWait(2*time.Second))
				if err == nil {
					for jm := range b.Messages() {
						if err := jm.DoubleAck(context.Background()); err == nil {
							delivered++
						}
					}
				}
				proxy.Release()
			})()
			err := tc.publish(tc.ms)
			if delivered != len(tc.ms) {
				t.Fatalf("setup: the worker took %d of %d", delivered, len(tc.ms))
			}
			if n := msgs(t, st); n != 0 {
				t.Logf("stream holds %d", n)
			}
			if err != nil && !errors.Is(err, queue.ErrUnconfirmed) {
				t.Fatalf("stored (and already delivered), its PubAck lost: %v, want nil or ErrUnconfirmed; the caller is told it was refused and sends it again: the users get it twice", err)
			}
		})
	}
}

// TestPublishCutBeforeItsAckIsNotRefused: the front end's connection to NATS drops after
// the stream stored a push and before its PubAck came back (a NATS node restarted, a network
// blip). The push is in the stream and will be delivered, so Publish must answer nil or
// ErrUnconfirmed (which makes the front end name the ucsId and say "look it up before sending
// it again"); a plain error makes the front end answer "the push queue is unavailable; try again
// later" with no ucsId, and the caller's retry sends the user the message twice.
func TestPublishCutBeforeItsAckIsNotRefused(t *testing.T) {
	url := embeddedtest.NATS(t)
	proxy := embeddedtest.NewProxy(t, strings.TrimPrefix(url, "nats://"))
	_, js := embeddedtest.JetStreamAt(t, "nats://"+proxy.Addr())
	_, direct := embeddedtest.JetStreamAt(t, url)
	ctx := context.Background()
	c := queue.Config{Stream: "S", Consumer: "d", Replicas: 1, MaxBytes: 1 << 20, MaxAge: time.Hour, AckWait: 5 * time.Second}
	st, err := queue.EnsureStream(ctx, direct, c)
	if err != nil {
		t.Fatal(err)
	}
	p, err := queue.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	m := msg(push.NewID(time.Now()))
	proxy.HoldAnswersAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte("PUB "+queue.SubjectPrefix)) })
	errc := make(chan error, 1)
	go func() { errc <- p.Publish(ctx, m, queue.PublishOptions{}) }()
	embeddedtest.Eventually(t, 10*time.Second, "the push stored by the stream", func() bool {
		_, err := st.GetLastMsgForSubject(ctx, queue.Subject(m.ClientID, m.UcsID))
		return err == nil
	})
	// The connection drops with the PubAck on its way: it never reaches the front end.
	proxy.SetDown(true)
	proxy.Release()
	proxy.SetDown(false)
	select {
	case err = <-errc:
	case <-time.After(30 * time.Second):
		t.Fatal("Publish never returned")
	}
	if _, gerr := st.GetLastMsgForSubject(ctx, queue.Subject(m.ClientID, m.UcsID)); gerr != nil {
		t.Fatalf("the push is no longer in the stream: %v", gerr)
	}
	if err != nil && !errors.Is(err, queue.ErrUnconfirmed) {
		t.Fatalf("push %s is stored in the stream (it will be delivered), but Publish answered %q:\n"+
			"  not nil, not ErrUnconfirmed: the front end answers \"queue unavailable; try again later\" without the ucsId,\n"+
			"  and the caller's retry is a second message to the user", m.UcsID, err)
	}
}
