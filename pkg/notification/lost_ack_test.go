package notification_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/queue"
)

// TestPushCutBeforeItsAckNamesItsUcsID: a push without an Idempotency-Key whose PubAck is
// lost because the front end's NATS connection drops (the stream stored the push) must be
// answered ErrUnconfirmed with its ucsId, as for a PubAck that came late: the caller is told to
// look it up before sending it again. It is answered ErrQueueUnavailable alone, no ucsId: the
// caller takes it for refused and sends it again, and the user gets the message twice.
func TestPushCutBeforeItsAckNamesItsUcsID(t *testing.T) {
	ctx := context.Background()
	url := embeddedtest.NATS(t)
	proxy := embeddedtest.NewProxy(t, strings.TrimPrefix(url, "nats://"))
	_, js := embeddedtest.JetStreamAt(t, "nats://"+proxy.Addr())
	r := newRigOn(t, js, false)
	_, direct := embeddedtest.JetStreamAt(t, url)
	st, err := direct.Stream(ctx, r.qc.Stream)
	if err != nil {
		t.Fatal(err)
	}
	proxy.HoldAnswersAfter(func(sent []byte) bool { return bytes.Contains(sent, []byte("PUB "+queue.SubjectPrefix)) })
	type answer struct {
		id  string
		err error
	}
	got := make(chan answer, 1)
	go func() {
		id, err := r.svc.Push(ctx, "pusher", request(t, body), notification.Key{})
		got <- answer{id, err}
	}()
	embeddedtest.Eventually(t, 10*time.Second, "the push stored by the stream", func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
	proxy.SetDown(true) // the PubAck is on its way when the connection drops
	proxy.Release()
	proxy.SetDown(false)
	var a answer
	select {
	case a = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("Push never returned")
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("stream: %+v %v", info, err)
	}
	if a.err != nil && (!errors.Is(a.err, notification.ErrUnconfirmed) || a.id == "") {
		t.Fatalf("the push is stored in the queue (it will be delivered), but Push answered ucsId %q, %v:\n"+
			"  want ErrUnconfirmed with its ucsId; the caller is told \"queue unavailable; try again later\" and sends it twice", a.id, a.err)
	}
}
