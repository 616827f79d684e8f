package server_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/service"
)

// platformPush pushes an event as the platform does: it waits 5 s for an answer and pushes the
// same request again only when it got none, three more times at most; any answer ends it. It
// returns the answers' statuses (0 for a push left unanswered).
func platformPush(t *testing.T, u, body string) []int {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	var statuses []int
	for range 4 {
		resp, err := client.Post(u, "text/xml", strings.NewReader(body))
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() || errors.Is(err, io.EOF) {
			statuses = append(statuses, 0)
			continue
		}
		if err != nil {
			t.Fatalf("push: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return append(statuses, resp.StatusCode)
	}
	return statuses
}

// TestCallbackEventStoredAfterABriefOutage: the stream of platform events is gone for a
// second when an unsubscribe comes. The callback tries again within the platform's wait, and
// answers success once the stream is back: the platform takes any answer as final, so a quick
// 503 would have lost the event.
func TestCallbackEventStoredAfterABriefOutage(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.js.DeleteStream(ctx, queue.PlatformEventStream(e.cfg.NATS.Stream)); err != nil {
		t.Fatal(err)
	}
	back := make(chan error, 1)
	go func() {
		time.Sleep(time.Second) // the outage
		_, err := queue.OpenPlatformEvents(ctx, e.js, service.QueueConfig(e.cfg))
		back <- err
	}()
	statuses := platformPush(t, e.url+callbackPath+"?"+e.plainQuery(cbToken, "brief"), followEvent("oA", "unsubscribe", e.clock.Now().Unix()))
	if err := <-back; err != nil {
		t.Fatal(err)
	}
	if len(statuses) != 1 || statuses[0] != http.StatusOK {
		t.Fatalf("the platform's pushes were answered %v; want one, success", statuses)
	}
	embeddedtest.Eventually(t, 20*time.Second, "the unsubscribe applied", func() bool { return !e.following("2020000001") })
}

// TestCallbackUnansweredWhileNATSSlow: with every answer of NATS held back 2.6 s, recording
// the callback's pair and keeping its event take longer than the platform waits. The push gets
// no answer at all (not a 503, which the platform would take as final), so the platform pushes
// it again, and once NATS is quick again its repeat is stored and answered success.
func TestCallbackUnansweredWhileNATSSlow(t *testing.T) {
	e, proxy := newEnvBehindProxy(t)
	proxy.SetDelay(2600 * time.Millisecond)
	u := e.url + callbackPath + "?" + e.plainQuery(cbToken, "slow")
	body := followEvent("oA", "unsubscribe", e.clock.Now().Unix())
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Post(u, "text/xml", strings.NewReader(body))
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("NATS answers held back 2.6 s: the callback was answered %d within the platform's 5 s; want no answer", resp.StatusCode)
	}
	if ne := net.Error(nil); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("NATS answers held back 2.6 s: %v; want the platform's time-out", err)
	}
	proxy.SetDelay(0)
	if statuses := platformPush(t, u, body); len(statuses) != 1 || statuses[0] != http.StatusOK {
		t.Fatalf("the platform's repeat, NATS quick again: %v; want success", statuses)
	}
	embeddedtest.Eventually(t, 20*time.Second, "the unsubscribe applied", func() bool { return !e.following("2020000001") })
}
