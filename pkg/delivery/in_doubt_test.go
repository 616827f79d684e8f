package delivery_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/sending"
	"github.com/campus-it/ucs/pkg/store"
	"github.com/nats-io/nats.go/jetstream"
)

// TestLastAttemptAnswerLostIsAskedAgain: the platform takes a push's last allowed call
// (max_attempts 1) but its answer never reaches the worker (the connection drops: a proxy
// dropping the response). The call's outcome is unknown, as after a worker killed
// mid-call: the push is asked again with the same client_msg_id, past max_attempts, and the
// platform answers with the first call's msgid: the push ends sent, with that msgid, not failed
// and dead-lettered while the user has the message.
func TestLastAttemptAnswerLostIsAskedAgain(t *testing.T) {
	r := newRig(t)
	id, calls := r.answerLostThen(t, lastOnly, nil)
	res := r.waitState(id, push.StateSent)
	if accepted := r.msgIDOf(id); accepted == 0 || res.MsgID != accepted || calls.Load() != 2 || res.Attempts != 2 {
		t.Fatalf("%s: %s with msgid %d after %d calls and %d attempts; the platform took it as msgid %d",
			id, res.State, res.MsgID, calls.Load(), res.Attempts, accepted)
	}
}

// answerLostThen publishes a push for u-follows to a worker whose platform takes the push's
// first call and loses its answer (the connection drops); change, if not nil, runs while that
// call is under way. It returns the push's id and the count of template calls.
func (r *rig) answerLostThen(t *testing.T, policy delivery.RetryPolicy, change func(w *delivery.Worker)) (string, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	var worker atomic.Pointer[delivery.Worker]
	pc := r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if !strings.Contains(req.URL.Path, "template/send") || calls.Add(1) > 1 {
			return false // a later call is answered as usual
		}
		// The platform takes the message; its answer is lost with the connection.
		r.sim.Handler().ServeHTTP(httptest.NewRecorder(), req)
		if change != nil {
			change(worker.Load())
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return true
		}
		_ = conn.Close()
		return true
	})
	w, _ := r.runWorker(policy, func(c *delivery.Config) {
		c.Platform = pc
		c.StoreRetry = 100 * time.Millisecond
	})
	worker.Store(w)
	return r.publish("u-follows", "JML", jml), &calls
}

// TestCallInDoubtAskedAgainOfItsFollower: the platform took a push's call but its answer was
// lost, and meanwhile the student moved to another follower, or unbound. The platform tells a
// repeat by client_msg_id per follower: the call is asked again of the follower it went to,
// whose msgid the platform answers, and the push ends sent once, not sent a second time to
// the new follower nor failed for no binding while the platform has it.
func TestCallInDoubtAskedAgainOfItsFollower(t *testing.T) {
	for name, change := range map[string]func(ctx context.Context, r *rig) error{
		"moved": func(ctx context.Context, r *rig) error {
			_, err := r.st.Bind(ctx, "u-follows", "oNewPhone")
			return err
		},
		"unbound": func(ctx context.Context, r *rig) error { return r.st.Unbind(ctx, "u-follows", "oFollower") },
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t)
			ctx := context.Background()
			r.sim.AddFollower("oNewPhone")
			id, calls := r.answerLostThen(t, quick, func(w *delivery.Worker) {
				if err := change(ctx, r); err != nil {
					t.Error(err)
				}
				w.Forget("u-follows")
			})
			res := r.waitState(id, push.StateSent)
			to := r.sentTo(id)
			if accepted := r.msgIDOf(id); len(to) != 1 || to[0] != "oFollower" || res.MsgID != accepted || calls.Load() != 2 {
				t.Fatalf("%s after %d calls: sent to %v, msgid %d; the platform took the first call as msgid %d",
					id, calls.Load(), to, res.MsgID, accepted)
			}
		})
	}
}

// TestKilledCallThenPlatformErrorStaysInDoubt: a worker is killed during a push's call, after
// the platform took the message. The next worker calls again with the same client_msg_id, but
// the platform answers HTTP 502, which says nothing of the first call: the push stays in doubt
// (its record says sending), is asked again past max_attempts while the platform's duplicate
// check lasts, and ends sent with the first call's msgid once the platform answers.
func TestKilledCallThenPlatformErrorStaysInDoubt(t *testing.T) {
	r := newRig(t)
	policy := delivery.RetryPolicy{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 2, MaxAttempts: 2}
	id := r.killedDuringCall(policy)
	accepted := r.msgIDOf(id)
	if accepted == 0 {
		t.Fatal("the platform did not take the first call")
	}
	r.sim.SetFaults(simulator.Faults{ServerErrorRate: 1})
	r.startWorker(policy)
	embeddedtest.Eventually(t, 20*time.Second, "asked again past max_attempts, still in doubt", func() bool {
		res, err := r.st.Current(context.Background(), id)
		if err == nil && res.State.Final() {
			t.Fatalf("the platform took %s as msgid %d before the kill, yet after 502s it ends %s after %d attempts: %q",
				id, accepted, res.State, res.Attempts, res.Reason)
		}
		return err == nil && res.State == push.StateSending && res.Attempts > policy.MaxAttempts+2
	})
	r.sim.SetFaults(simulator.Faults{})
	if res := r.waitState(id, push.StateSent); res.MsgID != accepted {
		t.Fatalf("sent with msgid %d, want the first call's %d", res.MsgID, accepted)
	}
}

// TestInDoubtFailsAfterTheDuplicateCheck: every call of a push times out (the platform may have
// taken each). It is asked again past max_attempts while the platform's duplicate check of the
// first lasts; once that is over, a repeat could reach the user twice: it fails, its reason
// saying that the platform may have sent it.
func TestInDoubtFailsAfterTheDuplicateCheck(t *testing.T) {
	r := newRig(t)
	clk := clocktest.New(time.Now())
	var calls atomic.Int64
	pc := r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if !strings.Contains(req.URL.Path, "template/send") {
			return false
		}
		calls.Add(1)
		_, _ = io.Copy(io.Discard, req.Body) // read, so that the server notices the caller giving up
		<-req.Context().Done()               // no answer
		return true
	})
	r.startWorkerWith(lastOnly, func(c *delivery.Config) {
		c.Platform, c.Now = pc, clk.Now
		// Long enough for every call to reach the platform on a loaded machine: an attempt
		// is counted for each call made, and the test counts the calls the platform got.
		c.SendTimeout = 2 * time.Second
	})
	id := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 20*time.Second, "asked again past max_attempts", func() bool {
		res, err := r.st.Current(context.Background(), id)
		return calls.Load() >= 3 && err == nil && res.State == push.StateSending
	})
	clk.Advance(platform.DuplicateWindow)
	res := r.waitState(id, push.StateFailed)
	if !strings.Contains(res.Reason, "the platform may have sent the message") || int64(res.Attempts) != calls.Load() {
		t.Fatalf("failed after %d attempts (%d calls): %q", res.Attempts, calls.Load(), res.Reason)
	}
}

// TestEarlierCopysCallInDoubtAskedOfItsFollower: a copy of a push that the queue gives out as
// a first delivery (its history not read) meets, at its first attempt's record, the history of
// an earlier copy whose call is in doubt (sending, to oFollower). The student has moved to
// another phone since: the call is asked again of oFollower, as the earlier copy's, and counts
// as the second attempt.
func TestEarlierCopysCallInDoubtAskedOfItsFollower(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.sim.AddFollower("oNewPhone")
	id := r.publish("u-follows", "JML", jml) // no worker yet
	now := time.Now()
	wr := r.st.NewWriter(store.WriterOptions{})
	t.Cleanup(wr.Close)
	earlier := push.Result{UcsID: id, ClientID: "c1", UserID: "u-follows", Type: "JML", State: push.StateSending,
		Attempts: 1, Accepted: now.Add(-time.Second), Updated: now, To: "oFollower"}
	if err := wr.Write(ctx, store.ProgressRecord(earlier, now)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.Bind(ctx, "u-follows", "oNewPhone"); err != nil {
		t.Fatal(err)
	}
	r.startWorker(quick)
	res := r.waitState(id, push.StateSent)
	to := r.sentTo(id)
	if len(to) != 1 || to[0] != "oFollower" || res.Attempts != 2 {
		t.Fatalf("%s, whose earlier copy's call to oFollower is in doubt: sent to %v, %d attempts; want oFollower, 2 attempts", id, to, res.Attempts)
	}
}

// earlierCopyInDoubt puts a push on the queue as a first delivery (no worker yet) whose
// earlier copy called the platform, which took it for oFollower, and whose record says that
// call is in doubt (sending, attempt 1, to oFollower). It returns the push and the msgid the
// platform gave the earlier call.
func (r *rig) earlierCopyInDoubt(t *testing.T, accepted, called time.Time) (string, int64) {
	t.Helper()
	return r.earlierCopyInDoubtVia(t, r.pc, r.st, accepted, called)
}

// earlierCopyInDoubtVia is earlierCopyInDoubt with the platform reached through pc and the
// record written to st.
func (r *rig) earlierCopyInDoubtVia(t *testing.T, pc *platform.Client, st *store.Store, accepted, called time.Time) (string, int64) {
	t.Helper()
	ctx := context.Background()
	id := push.NewID(time.Now())
	m := push.Message{UcsID: id, ClientID: "c1", UserID: "u-follows", Type: "JML", Data: jml, Accepted: accepted.UnixMilli()}
	if err := r.pub.Publish(ctx, m, queue.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	// The earlier copy's call: the platform took it, its answer was lost.
	msgID, err := pc.SendTemplate(ctx, platform.TemplateMessage{ToUser: "oFollower", TemplateID: "tpl-JML",
		ClientMsgID: id, Data: map[string]string{"thing1": jml["class"], "thing2": jml["info"]}})
	if err != nil || msgID == 0 {
		t.Fatalf("the earlier copy's call: %d %v", msgID, err)
	}
	wr := st.NewWriter(store.WriterOptions{})
	t.Cleanup(wr.Close)
	earlier := push.Result{UcsID: id, ClientID: "c1", UserID: "u-follows", Type: "JML", State: push.StateSending,
		Attempts: 1, Accepted: accepted, Updated: called, To: "oFollower"}
	if err := wr.Write(ctx, store.ProgressRecord(earlier, called)); err != nil {
		t.Fatal(err)
	}
	return id, msgID
}

// TestPauseKeepsAnEarlierCopysCallInDoubt: a first delivery of a push meets a pause of sending
// (the daily quota) at the gate, while an earlier copy's call to oFollower is in doubt (the
// platform took it). The student has moved to another phone meanwhile. The record of the call
// in doubt stays while the push is held (a first delivery, which has not read the history,
// replaces no record), and after the pause the copy asks the platform again of oFollower as
// the earlier copy's call: sent once, under the first call's msgid, two attempts.
func TestPauseKeepsAnEarlierCopysCallInDoubt(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.sim.AddFollower("oNewPhone")
	now := time.Now()
	id, msgID := r.earlierCopyInDoubt(t, now.Add(-time.Second), now)
	if _, err := r.st.Bind(ctx, "u-follows", "oNewPhone"); err != nil {
		t.Fatal(err)
	}
	p := r.openPause()
	b := &heldBudget{at: make(chan struct{}), release: make(chan struct{})}
	r.startWorkerWith(quick, func(c *delivery.Config) { c.Pause, c.QuotaReset, c.Budget = p, quotaInAnHour, b })
	select {
	case <-b.at:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker never got the push to the gate")
	}
	// The daily quota runs out (another worker's send met 45009) while the push waits for the
	// send budget.
	if err := p.Set(ctx, sending.PauseState{Until: time.Now().Add(time.Hour), Reason: "45009: the platform's daily quota is used up"}); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the pause seen", func() bool { _, paused := p.Paused(); return paused })
	close(b.release) // the budget lets it through, into the pause
	// The worker holds the push at the gate; were it to show it held, within a few seconds.
	var held push.Result
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		res, err := r.st.Current(ctx, id)
		if err == nil && res.State != push.StateSending {
			held = res
			break
		}
		time.Sleep(50 * time.Millisecond) // a span in which the record must not change
	}
	if held.State != "" {
		t.Errorf("while paused, the record of the earlier copy's call in doubt (sending, attempt 1, to oFollower) was replaced by: state=%s attempts=%d to=%q lastError=%q",
			held.State, held.Attempts, held.To, held.LastError)
	}
	if err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	res := r.waitState(id, push.StateSent)
	to := r.sentTo(id)
	if len(to) != 1 || res.MsgID != msgID || res.Attempts != 2 {
		t.Fatalf("push %s, whose earlier copy's call to oFollower the platform took (msgid %d): the platform sent it to %v; "+
			"result msgId=%d attempts=%d; want only oFollower, msgid %d, 2 attempts", id, msgID, to, res.MsgID, res.Attempts, msgID)
	}
}

// TestFirstCopyPastItsAgeAsksAnEarlierCopysCallAgain: an earlier copy of a push called the
// platform at 58 minutes of its age, which took it (the answer was lost). A copy given out as a
// first delivery at 61 minutes, past max_age (an hour), reads the history before failing the
// push as expired, and asks the call in doubt again, as a redelivered copy does
// (TestExpiryOfAnAttemptInDoubt): sent, under the platform's msgid.
func TestFirstCopyPastItsAgeAsksAnEarlierCopysCallAgain(t *testing.T) {
	r := newRig(t)
	now := time.Now()
	id, msgID := r.earlierCopyInDoubt(t, now.Add(-61*time.Minute), now.Add(-3*time.Minute))
	r.startWorkerWith(quick, func(c *delivery.Config) { c.MaxAge = time.Hour })
	var res push.Result
	embeddedtest.Eventually(t, 20*time.Second, "the push leaves the queue with an outcome", func() bool {
		var err error
		res, err = r.st.Current(context.Background(), id)
		return err == nil && (res.State == push.StateSent || res.State.Final())
	})
	if res.State != push.StateSent || res.MsgID != msgID {
		t.Fatalf("push %s, whose earlier copy's call in doubt the platform took (msgid %d): state=%s reason=%q msgId=%d attempts=%d (expired: %v)",
			id, msgID, res.State, res.Reason, res.MsgID, res.Attempts, strings.HasPrefix(res.Reason, "expired"))
	}
}

// sentTo lists the followers the rig's platform sent push id to.
func (r *rig) sentTo(id string) []string { return sentOn(r.sim, id) }

// sentOn lists the followers sim sent push id to.
func sentOn(sim *simulator.Simulator, id string) []string {
	var to []string
	for _, s := range sim.Sent() {
		if s.ClientMsgID == id {
			to = append(to, s.ToUser)
		}
	}
	return to
}

// sentOrFinal waits for id's record to be sent or final, and returns it.
func (r *rig) sentOrFinal(t *testing.T, id string) push.Result {
	t.Helper()
	var res push.Result
	embeddedtest.Eventually(t, 30*time.Second, id+" sent or final", func() bool {
		var err error
		res, err = r.st.Current(context.Background(), id)
		return err == nil && (res.State == push.StateSent || res.State.Final())
	})
	return res
}

// TestCallInDoubtOfAnEarlierVersionAfterAnUnfollow: during the rolling update of the workers, a
// worker of the previous release takes a push, records its attempt (sending, attempt 1, and no
// follower: that release has no "to") and calls the platform, which takes the message for
// oFollower; the answer is lost and the message goes back to the queue. The student unfollows
// right after reading it. A new worker gets the redelivery and asks the call in doubt again of
// the follower bound, left or not (the platform answers the repeat with the first msgid), as
// for a record of this release: sent, not failed "not following" while the platform delivered
// it.
func TestCallInDoubtOfAnEarlierVersionAfterAnUnfollow(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	id := r.publish("u-follows", "JML", jml)

	// The old worker: fetches the push, records its attempt as ea51ac9 does, calls the platform.
	cons, err := queue.EnsureConsumer(ctx, r.js, r.qcfg)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for msg := range batch.Messages() {
		n++
		called := time.Now()
		wr := r.st.NewWriter(store.WriterOptions{})
		t.Cleanup(wr.Close)
		legacy := push.Result{UcsID: id, ClientID: "c1", UserID: "u-follows", Type: "JML", State: push.StateSending,
			Attempts: 1, Accepted: called.Add(-time.Second), Updated: called} // no To: the old layout
		if err := wr.Write(ctx, store.ProgressRecord(legacy, called)); err != nil {
			t.Fatal(err)
		}
		msgID, err := r.pc.SendTemplate(ctx, platform.TemplateMessage{ToUser: "oFollower", TemplateID: "tpl-JML",
			ClientMsgID: id, Data: map[string]string{"thing1": jml["class"], "thing2": jml["info"]}})
		if err != nil || msgID == 0 {
			t.Fatalf("the old worker's call: %d %v", msgID, err)
		}
		// Its answer lost: the old worker hands the message back, the record saying sending.
		if err := msg.Nak(); err != nil {
			t.Fatal(err)
		}
		// The student unfollows after reading the message.
		if err := r.st.SetFollowing(ctx, "oFollower", false, time.Now()); err != nil {
			t.Fatal(err)
		}
		r.startWorker(quick)
		res := r.sentOrFinal(t, id)
		if res.State != push.StateSent || res.MsgID != msgID {
			t.Fatalf("push %s, whose call by an old worker the platform took (msgid %d, delivered to oFollower): "+
				"a new worker recorded state=%s msgId=%d reason=%q attempts=%d; want sent under msgid %d",
				id, msgID, res.State, res.MsgID, res.Reason, res.Attempts, msgID)
		}
	}
	if n != 1 {
		t.Fatalf("fetched %d messages", n)
	}
}

// TestFirstCopyReadsTheHistoryBeforeFailingForTheBinding: a copy of a push given out as a first
// delivery meets an earlier copy's call in doubt (sending, to oFollower), which the platform
// took. The student unfollowed since. The copy reads the history before failing the push for
// its binding, and asks the call again of oFollower as the earlier copy's: sent under the
// first msgid, not failed "not following" while the platform delivered it.
func TestFirstCopyReadsTheHistoryBeforeFailingForTheBinding(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	now := time.Now()
	id, msgID := r.earlierCopyInDoubt(t, now.Add(-time.Second), now)
	if err := r.st.SetFollowing(ctx, "oFollower", false, time.Now()); err != nil {
		t.Fatal(err)
	}
	r.startWorker(quick)
	res := r.sentOrFinal(t, id)
	if res.State != push.StateSent || res.MsgID != msgID {
		t.Fatalf("push %s, whose earlier copy's call to oFollower the platform took (msgid %d): recorded state=%s msgId=%d reason=%q attempts=%d; want sent under msgid %d",
			id, msgID, res.State, res.MsgID, res.Reason, res.Attempts, msgID)
	}
}

// TestInDoubtPastTheDuplicateCheckIsNotCalledAgain: a push's first call is taken by the
// platform but its answer is lost (in doubt). Later calls meet -1 (busy), which says nothing of
// the first. Once the platform's duplicate check of the first call is over, a repeat is a new
// message: the push fails, attempts left or not, its reason saying the platform may have sent
// it, and the user gets it once.
func TestInDoubtPastTheDuplicateCheckIsNotCalledAgain(t *testing.T) {
	r := newRig(t)
	clk := clocktest.New(time.Now())
	sim := simulator.New(simulator.Config{AppID: "wxapp", Secret: "wxsecret", Now: clk.Now})
	t.Cleanup(sim.Close)
	sim.AddTemplate("tpl-JML", []string{"thing1", "thing2"})
	sim.AddFollower("oFollower")
	var calls atomic.Int64
	var busyUntil atomic.Int64 // calls up to this one answer -1
	busyUntil.Store(1 << 62)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !strings.Contains(req.URL.Path, "template/send") {
			sim.Handler().ServeHTTP(w, req)
			return
		}
		switch n := calls.Add(1); {
		case n == 1:
			// Taken; the answer lost with the connection.
			sim.Handler().ServeHTTP(httptest.NewRecorder(), req)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		case n <= busyUntil.Load():
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"errcode":-1,"errmsg":"system error"}`))
		default:
			sim.Handler().ServeHTTP(w, req)
		}
	}))
	t.Cleanup(front.Close)
	policy := delivery.RetryPolicy{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2, MaxAttempts: 30}
	r.startWorkerWith(policy, func(c *delivery.Config) {
		c.Platform, c.Now = r.platformAt(front.URL), clk.Now
	})
	id := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 20*time.Second, "asked again while busy", func() bool {
		res, err := r.st.Current(context.Background(), id)
		return calls.Load() >= 3 && err == nil && res.State == push.StateSending
	})
	// The platform's duplicate check of the first call is over. A call already on its way
	// (scheduled before) still meets -1; then the platform is not busy any more.
	clk.Advance(platform.DuplicateWindow)
	busyUntil.Store(calls.Load() + 1)
	res := r.sentOrFinal(t, id)
	to := sentOn(sim, id) // this test's simulator, on its clock
	if len(to) != 1 {
		t.Fatalf("push %s, whose first call the platform took (answer lost), was called again past the platform's "+
			"duplicate check and sent %d times to %v; record: state=%s attempts=%d reason=%q",
			id, len(to), to, res.State, res.Attempts, res.Reason)
	}
	if res.State != push.StateFailed || !strings.Contains(res.Reason, "may have sent") {
		t.Fatalf("push %s: state=%s reason=%q; want failed, the platform may have sent it", id, res.State, res.Reason)
	}
}

// TestTakeBackKeepsTheTimeOfTheCallInDoubt: an earlier copy's call of a push is in doubt
// (sending, made at called). A worker asks it again five minutes later, and the platform
// refuses this worker's address (40164): the call does not count and the push is handed back,
// still in doubt. The record keeps the time of the call in doubt, which the next worker takes
// for it and by which it ends asking again (the platform's duplicate check), not the time of
// the refusal, which would stretch that window by five minutes.
func TestTakeBackKeepsTheTimeOfTheCallInDoubt(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	called := time.Now().Truncate(time.Millisecond)
	id, _ := r.earlierCopyInDoubt(t, called.Add(-time.Second), called)
	clk := clocktest.New(called.Add(5 * time.Minute))
	pc := r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if !strings.Contains(req.URL.Path, "template/send") {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"errcode":40164,"errmsg":"invalid ip 10.0.0.9 ipv6 ::ffff:10.0.0.9, not in whitelist"}`))
		return true
	})
	r.startWorkerWith(quick, func(c *delivery.Config) { c.Platform, c.Now = pc, clk.Now })
	var res push.Result
	embeddedtest.Eventually(t, 20*time.Second, "the refused call taken back", func() bool {
		var err error
		res, err = r.st.Current(ctx, id)
		return err == nil && res.LastError != ""
	})
	if res.State != push.StateSending || !res.Updated.Equal(called) {
		t.Fatalf("push %s, whose call in doubt was made at %s: after a refused repeat the record says %s since %s "+
			"(%s later), attempts=%d lastError=%q", id, called.Format(time.TimeOnly), res.State,
			res.Updated.Format(time.TimeOnly), res.Updated.Sub(called), res.Attempts, res.LastError)
	}
}

// TestRepeatOfACallInDoubtKeepsItsTime: a push's call is taken by the platform at T0, its
// answer lost (record: sending since T0, to oFollower). At T0+5m a worker asks it again and is
// killed during that repeat (the platform answers the repeat with the first msgid, unheard).
// The next worker's repeats meet -1 (busy). The platform's duplicate check runs from T0, the
// call it took, and the killed repeat's record keeps T0: at T0+10m the check is over and the
// push fails ("may have sent"), as TestInDoubtPastTheDuplicateCheckIsNotCalledAgain has it,
// rather than being called on until T0+14m, when the platform takes a repeat for a second
// message.
func TestRepeatOfACallInDoubtKeepsItsTime(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	t0 := time.Now().Truncate(time.Millisecond)
	clk := clocktest.New(t0)
	sim := simulator.New(simulator.Config{AppID: "wxapp", Secret: "wxsecret", Now: clk.Now})
	t.Cleanup(sim.Close)
	sim.AddTemplate("tpl-JML", []string{"thing1", "thing2"})
	sim.AddFollower("oFollower")
	var busy atomic.Bool
	var busyCalls, busyUntil atomic.Int64 // while busy, calls up to busyUntil answer -1
	busyUntil.Store(1 << 62)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.Contains(req.URL.Path, "template/send") && busy.Load() && busyCalls.Add(1) <= busyUntil.Load() {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"errcode":-1,"errmsg":"system error"}`))
			return
		}
		sim.Handler().ServeHTTP(w, req)
	}))
	t.Cleanup(front.Close)
	pc := r.platformAt(front.URL)

	// The earlier copy's call at T0: taken, its answer lost; its record says sending since T0.
	id, msgID := r.earlierCopyInDoubtVia(t, pc, r.st, t0.Add(-time.Second), t0)

	// Five minutes later a worker asks again, and is killed during the repeat.
	clk.Advance(5 * time.Minute)
	dying := &dyingSender{Sender: pc, called: make(chan struct{})}
	stop := r.startWorkerWith(quick, func(c *delivery.Config) { c.Platform, c.Concurrency, c.Now = dying, 1, clk.Now })
	select {
	case <-dying.called:
	case <-time.After(20 * time.Second):
		t.Fatal("the worker never asked again")
	}
	stop()
	rec, err := r.st.Current(ctx, id)
	if err != nil {
		t.Fatal(err)
	}

	// The next worker's repeats meet -1 while the platform's duplicate check of T0 lasts.
	busy.Store(true)
	r.startWorkerWith(quick, func(c *delivery.Config) { c.Platform, c.Now = pc, clk.Now })
	embeddedtest.Eventually(t, 30*time.Second, "asked again while busy", func() bool {
		res, err := r.st.Current(ctx, id)
		return busyCalls.Load() >= 2 && err == nil && res.State == push.StateSending
	})
	// T0+10m: the platform's check of the first call is over. A call already on its way
	// (scheduled before) still meets -1; then the platform is not busy any more.
	clk.Advance(5*time.Minute + time.Second)
	busyUntil.Store(busyCalls.Load() + 1)
	res := r.sentOrFinal(t, id)
	to := sentOn(sim, id) // this test's simulator, on its clock
	if len(to) != 1 || res.State != push.StateFailed {
		t.Fatalf("push %s, taken by the platform at T0 (msgid %d), was called again past the platform's duplicate check "+
			"of that call and sent %d times to %v; record: state=%s msgid=%d attempts=%d reason=%q "+
			"(the killed repeat's record said sending since T0+%s)",
			id, msgID, len(to), to, res.State, res.MsgID, res.Attempts, res.Reason, rec.Updated.Sub(t0))
	}
}

// TestStoppedFirstCopyKeepsAnEarlierCallInDoubt: an earlier copy's call of a push is in
// doubt (sending, attempt 1, to oFollower; the platform took it). A copy given out as a first
// delivery cannot record its attempt (the store is away for its writes) and the worker stops
// while it waits to write again. Putting back the record of the attempt not made, it leaves
// the earlier copy's record alone (it is not its own): the next worker asks the call in doubt
// again of oFollower, though the student moved to another phone, and the platform answers with
// the first msgid.
func TestStoppedFirstCopyKeepsAnEarlierCallInDoubt(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	cs := newCutStore(t)
	r.sim.AddFollower("oNewPhone")

	// The earlier copy's call: taken by the platform, its record in the store says in doubt.
	now := time.Now()
	id, msgID := r.earlierCopyInDoubtVia(t, r.pc, cs.direct, now.Add(-time.Second), now)

	// A worker whose writes go through the cut proxy (its binding read is served: a cached one).
	cs.proxy.SetDown(true)
	logs := &embeddedtest.SyncBuffer{}
	wr := cs.ws.NewWriter(store.WriterOptions{Timeout: 500 * time.Millisecond})
	t.Cleanup(wr.Close)
	stop := r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Store, c.Events, c.StoreRetry = cs.direct, wr, 10*time.Second
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	embeddedtest.Eventually(t, 20*time.Second, "the attempt's record cannot be written", func() bool {
		return strings.Contains(logs.String(), "recording an attempt failed")
	})
	// The store comes back while the worker waits to write again; the worker stops.
	cs.proxy.SetDown(false)
	embeddedtest.Eventually(t, 8*time.Second, "the store reachable again", func() bool {
		_, err := cs.ws.Current(ctx, id)
		return err == nil
	})
	stop()
	embeddedtest.Eventually(t, 10*time.Second, "the worker gave up the attempt (after unmark)", func() bool {
		return strings.Contains(logs.String(), "message handed back without an attempt")
	})
	var rec push.Result
	embeddedtest.Eventually(t, 5*time.Second, "the record read", func() bool {
		var err error
		rec, err = cs.direct.Current(ctx, id)
		return err == nil
	})

	// The student moves to another phone; the next worker gets the push.
	if _, err := cs.direct.Bind(ctx, "u-follows", "oNewPhone"); err != nil {
		t.Fatal(err)
	}
	r.restartOn(cs, quick)
	var res push.Result
	embeddedtest.Eventually(t, 40*time.Second, id+" sent or final", func() bool {
		var err error
		res, err = cs.direct.Current(ctx, id)
		return err == nil && (res.State == push.StateSent || res.State.Final())
	})
	if to := r.sentTo(id); len(to) != 1 || res.MsgID != msgID {
		t.Fatalf("push %s, whose earlier copy's call to oFollower the platform took (msgid %d): sent to %v; result %s msgid=%d attempts=%d "+
			"(after the stopped first copy the record said %s, %d attempts, to %q)",
			id, msgID, to, res.State, res.MsgID, res.Attempts, rec.State, rec.Attempts, rec.To)
	}
}
