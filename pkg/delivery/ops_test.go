package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/sending"
	"github.com/campus-it/ucs/pkg/store"
)

// startWorkerWith runs a worker built from the rig's parts changed by mod, until the test ends.
func (r *rig) startWorkerWith(policy delivery.RetryPolicy, mod func(*delivery.Config)) (stop func()) {
	r.t.Helper()
	_, stop = r.runWorker(policy, mod)
	return stop
}

// runWorker is startWorkerWith, and returns the worker too, to be told of binding changes as
// the front ends tell it.
func (r *rig) runWorker(policy delivery.RetryPolicy, mod func(*delivery.Config)) (w *delivery.Worker, stop func()) {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cons, err := queue.EnsureConsumer(ctx, r.js, r.qcfg)
	if err != nil {
		r.t.Fatal(err)
	}
	wr := r.st.NewWriter(store.WriterOptions{})
	cfg := delivery.Config{Consumer: cons, Store: r.st, Events: wr, Platform: r.pc, Templates: templates, Policy: policy, Concurrency: 8}
	mod(&cfg)
	w, err = delivery.New(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	r.t.Cleanup(func() { cancel(); <-done; wr.Close() })
	return w, cancel
}

var jml = map[string]string{"class": "高等数学", "info": "第三章作业"}

// TestDeadLetters exhausts a message's attempts: it ends failed with its last error, a copy
// with the reason is in the dead-letter stream, and the metrics count the attempts, the
// failure and the dead letter.
func TestDeadLetters(t *testing.T) {
	r := newRig(t)
	r.sim.SetFaults(simulator.Faults{ServerErrorRate: 1})
	ctx := context.Background()
	dl, err := queue.EnsureDeadLetters(ctx, r.js, r.qcfg)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(prometheus.NewRegistry())
	r.countCalls(m)
	r.startWorkerWith(delivery.RetryPolicy{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 2, MaxAttempts: 2},
		func(c *delivery.Config) { c.DeadLetter = dl.Copy; c.Metrics = m })
	id := r.publish("u-follows", "JML", jml)
	res := r.waitState(id, push.StateFailed)
	if res.Attempts != 2 || !strings.HasPrefix(res.Reason, "gave up after 2 attempts: send template: HTTP status 502") {
		t.Fatalf("result %+v", res)
	}
	waitCounted(t, "the failure", m.Deliveries.WithLabelValues("failed"), 1)
	waitCounted(t, "the dead letter", m.DeadLetters, 1) // the last counted of the failure
	dlq, err := r.js.Stream(ctx, queue.DeadLetterStream(r.qcfg.Stream))
	if err != nil {
		t.Fatal(err)
	}
	dead, err := dlq.GetLastMsgForSubject(ctx, queue.DeadLetterSubject("c1", id))
	if err != nil {
		t.Fatalf("no dead letter for %s: %v", id, err)
	}
	if dead.Header.Get(queue.HeaderReason) != res.Reason || dead.Header.Get(queue.HeaderAttempts) != "2" || !strings.Contains(string(dead.Data), id) {
		t.Errorf("dead letter %v %s", dead.Header, dead.Data)
	}
	for name, c := range map[string]struct {
		got  float64
		want float64
	}{
		"dead letters":           {testutil.ToFloat64(m.DeadLetters), 1},
		"retries":                {testutil.ToFloat64(m.Deliveries.WithLabelValues("retry")), 1},
		"failed":                 {testutil.ToFloat64(m.Deliveries.WithLabelValues("failed")), 1},
		"failures{max_attempts}": {testutil.ToFloat64(m.DeliveryFailures.WithLabelValues("max_attempts")), 1},
		"platform errors{http}":  {testutil.ToFloat64(m.PlatformErrors.WithLabelValues("http")), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", name, c.got, c.want)
		}
	}
	var ph dto.Metric
	if err := m.PlatformSeconds.Write(&ph); err != nil || ph.GetHistogram().GetSampleCount() != 2 {
		t.Errorf("platform request seconds: %d observations (%v), want the 2 attempts", ph.GetHistogram().GetSampleCount(), err)
	}

	// A message the platform takes counts as sent, with its delivery time; a refusal by
	// errcode is counted under it.
	r.sim.SetFaults(simulator.Faults{})
	r.waitState(r.publish("u-follows", "JML", jml), push.StateSent)
	r.waitState(r.publish("u-unknown-openid", "JML", jml), push.StateFailed)
	waitCounted(t, "the send", m.Deliveries.WithLabelValues("sent"), 1)
	waitCounted(t, "the refusal", m.Deliveries.WithLabelValues("failed"), 2)
	if got := testutil.ToFloat64(m.Deliveries.WithLabelValues("sent")); got != 1 {
		t.Errorf("sent: %v", got)
	}
	if got := testutil.ToFloat64(m.PlatformErrors.WithLabelValues("40003")); got != 1 {
		t.Errorf("platform errors{40003}: %v", got)
	}
	if got := testutil.ToFloat64(m.DeliveryFailures.WithLabelValues("40003")); got != 1 {
		t.Errorf("failures{40003}: %v", got)
	}
	var h dto.Metric
	if err := m.DeliverySeconds.Write(&h); err != nil || h.GetHistogram().GetSampleCount() != 3 {
		t.Errorf("delivery seconds: %d observations (%v), want 3: each message ended by a platform answer", h.GetHistogram().GetSampleCount(), err)
	}
}

// TestQuotaPause answers every send 45009: sending pauses for every worker until the quota's
// reset, the messages stay queued with the reason, and once an operator resumes it each is
// sent exactly once.
func TestQuotaPause(t *testing.T) {
	r := newRig(t)
	r.sim.SetFaults(simulator.Faults{QuotaUsedUp: true})
	ctx := context.Background()
	reset := time.Now().Add(time.Hour).Truncate(time.Second)
	var pauses []*sending.Pause
	var ms []*metrics.Metrics
	for range 2 {
		p := r.openPause()
		m := metrics.New(prometheus.NewRegistry())
		pauses, ms = append(pauses, p), append(ms, m)
		r.startWorkerWith(quick, func(c *delivery.Config) {
			c.Pause, c.Metrics = p, m
			c.QuotaReset = func(time.Time) time.Time { return reset }
		})
	}
	var ids []string
	for i := range 6 {
		ids = append(ids, r.publish("u-follows", "JML", map[string]string{"class": "课程", "info": fmt.Sprintf("作业%d", i)}))
	}
	embeddedtest.Eventually(t, 10*time.Second, "both workers see the pause", func() bool {
		_, a := pauses[0].Paused()
		_, b := pauses[1].Paused()
		return a && b && testutil.ToFloat64(ms[0].SendingPaused) == 1 && testutil.ToFloat64(ms[1].SendingPaused) == 1
	})
	st, _ := pauses[0].Paused()
	if !st.Until.Equal(reset) || !strings.HasPrefix(st.Reason, "45009") {
		t.Fatalf("pause %+v, want until %s", st, reset)
	}
	// A send that passed the gate before its worker saw the pause may still be on its way;
	// once every message is recorded as held at the gate, none is.
	embeddedtest.Eventually(t, 10*time.Second, "every message held at the gate", func() bool {
		for _, id := range ids {
			res, err := r.st.Current(ctx, id)
			if err != nil || res.State != push.StateQueued || !strings.Contains(res.LastError, "45009") {
				return false
			}
		}
		return true
	})
	sends := r.sim.Stats().Sends
	// Held messages are not retried against the platform while paused.
	time.Sleep(time.Second) // a span in which nothing may happen; nothing is waited for
	if now := r.sim.Stats().Sends; now != sends {
		t.Errorf("the platform got %d more sends while sending was paused", now-sends)
	}
	for _, id := range ids {
		res, err := r.st.Current(ctx, id)
		if err == nil && (res.State != push.StateQueued || !strings.Contains(res.LastError, "45009")) {
			t.Errorf("%s while paused: %+v", id, res)
		}
	}
	r.sim.SetFaults(simulator.Faults{})
	if err := pauses[1].Resume(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		r.waitState(id, push.StateSent)
	}
	sent := r.sim.Sent()
	var got []string
	for _, s := range sent {
		got = append(got, s.ClientMsgID)
	}
	slices.Sort(got)
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the platform accepted %v, want each of %v once", got, want)
	}
	if testutil.ToFloat64(ms[0].SendingPaused) != 0 && testutil.ToFloat64(ms[1].SendingPaused) != 0 {
		t.Errorf("paused gauge still 1 after resuming")
	}
}

// TestSharedSendBudget runs three workers, each with its own handle on the budget (as three
// processes would have), under max_rate 100/s: together they send no faster than that.
func TestSharedSendBudget(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	const rate = 100.0
	for range 3 {
		b, err := sending.OpenBudget(ctx, r.js, rate, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.startWorkerWith(quick, func(c *delivery.Config) { c.Budget = b; c.Concurrency = 32 })
	}
	const n = 400
	for i := range n {
		r.publish("u-follows", "JML", map[string]string{"class": "课程", "info": fmt.Sprintf("作业%d", i)})
	}
	embeddedtest.Eventually(t, 60*time.Second, "every message sent", func() bool { return len(r.sim.Sent()) >= n })
	sent := r.sim.Sent()
	at := make([]time.Time, len(sent))
	for i, s := range sent {
		at[i] = s.At
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	span := at[len(at)-1].Sub(at[0]).Seconds()
	got := float64(len(at)-1) / span
	t.Logf("%d sends in %.2fs: %.1f/s (max_rate %.0f)", len(at), span, got, rate)
	if got > rate*1.10 {
		t.Errorf("three workers sent %.1f/s together, more than 10%% over max_rate %.0f", got, rate)
	}
	// No second of the run holds more than the rate and one lease per worker.
	for i := range at {
		j := i
		for j < len(at) && at[j].Sub(at[i]) < time.Second {
			j++
		}
		if j-i > int(rate)+3*5 {
			t.Fatalf("%d sends within one second from %s", j-i, at[i])
		}
	}
}

// brokenPause is a pause that cannot be set: the bucket behind it is unreachable.
type brokenPause struct{}

func (brokenPause) Paused() (sending.PauseState, bool) { return sending.PauseState{}, false }
func (brokenPause) Set(context.Context, sending.PauseState) error {
	return errors.New("nats: no responders available for request")
}

// TestBindingChangedDuringAPause: messages held at the gate by the quota's pause (which lasts
// until midnight) follow the bindings as they are when sending resumes: a student who moved to
// another follower meanwhile gets theirs there, and one who unbound gets nothing.
func TestBindingChangedDuringAPause(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.sim.AddFollower("oNewPhone")
	r.sim.AddFollower("oOther")
	if err := r.st.PutBinding(ctx, store.Binding{UserID: "u-other", OpenID: "oOther", Following: true}); err != nil {
		t.Fatal(err)
	}
	r.sim.SetFaults(simulator.Faults{QuotaUsedUp: true})
	p := r.openPause()
	w, _ := r.runWorker(quick, func(c *delivery.Config) {
		c.Pause = p
		c.QuotaReset = func(n time.Time) time.Time { return n.Add(time.Hour) }
	})
	moved, unbound := r.publish("u-follows", "JML", jml), r.publish("u-other", "JML", jml)
	embeddedtest.Eventually(t, 10*time.Second, "both messages held at the gate by the quota's pause", func() bool {
		for _, id := range []string{moved, unbound} {
			res, err := r.st.Current(ctx, id)
			if err != nil || res.State != push.StateQueued || !strings.Contains(res.LastError, "45009") {
				return false
			}
		}
		_, paused := p.Paused()
		return paused
	})
	// The students change their bindings on the binding page, which tells the workers.
	if _, err := r.st.Bind(ctx, "u-follows", "oNewPhone"); err != nil {
		t.Fatal(err)
	}
	if err := r.st.Unbind(ctx, "u-other", "oOther"); err != nil {
		t.Fatal(err)
	}
	w.Forget("u-follows")
	w.Forget("u-other")

	r.sim.SetFaults(simulator.Faults{})
	if err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	r.waitState(moved, push.StateSent)
	if res := r.waitState(unbound, push.StateFailed); !strings.Contains(res.Reason, "no binding") {
		t.Errorf("the message of the student who unbound during the pause: %+v, want failed for no binding", res)
	}
	for _, s := range r.sim.Sent() {
		switch {
		case s.ClientMsgID == moved && s.ToUser != "oNewPhone":
			t.Errorf("the message of the student who moved during the pause went to %s, the follower they left", s.ToUser)
		case s.ClientMsgID == unbound:
			t.Errorf("the message of the student who unbound during the pause went to %s", s.ToUser)
		}
	}
}

// TestQuotaWithoutPause: when 45009 comes and the pause cannot be set, the message is retried
// with backoff like any other busy answer, never sent again at once: one platform call per
// attempt.
func TestQuotaWithoutPause(t *testing.T) {
	r := newRig(t)
	r.sim.SetFaults(simulator.Faults{QuotaUsedUp: true})
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Pause = brokenPause{}
		c.QuotaReset = quotaInAnHour
	})
	id := r.publish("u-follows", "JML", jml)
	res := r.waitState(id, push.StateFailed)
	if res.Attempts != quick.MaxAttempts || !strings.Contains(res.Reason, "45009") {
		t.Fatalf("result %+v", res)
	}
	if n := r.sim.Stats().Sends; n != int64(quick.MaxAttempts) {
		t.Fatalf("the platform got %d sends for %d attempts", n, quick.MaxAttempts)
	}
}

// refusingSender answers every call with the platform's error code (40164 when code is 0: the
// worker's address is not on the IP whitelist) while refuse is set.
type refusingSender struct {
	delivery.Sender
	code    int
	msg     string
	notSent bool // the refusal came from the token endpoint: nothing was sent
	mu      sync.Mutex
	refuse  bool
	calls   int
}

func (s *refusingSender) SendTemplate(ctx context.Context, m platform.TemplateMessage) (int64, error) {
	s.mu.Lock()
	s.calls++
	refuse := s.refuse
	s.mu.Unlock()
	if refuse && s.notSent {
		return 0, fmt.Errorf("send template: %w", &platform.NotSentError{Err: &platform.Error{Code: s.code, Msg: s.msg + " rid: 6f0c"}})
	}
	if refuse && s.code != 0 {
		return 0, fmt.Errorf("send template: %w", &platform.Error{Code: s.code, Msg: s.msg + " rid: 6f0c"})
	}
	if refuse {
		return 0, fmt.Errorf("send template: %w", &platform.Error{Code: platform.CodeIPNotWhitelisted,
			Msg: "invalid ip 10.0.0.7 ipv6 ::ffff:10.0.0.7, not in whitelist rid: 6f0c"})
	}
	return s.Sender.SendTemplate(ctx, m)
}

// TestAccountRefusalPauses: the platform refusing the account itself (the interface banned,
// the account restricted, the per-minute limit, a wrong AppSecret) pauses sending for every
// worker, with the cause and what the operator must do, instead of retrying each message; the
// messages wait without spending attempts, and once an operator resumes, each is sent with its
// first attempt.
func TestAccountRefusalPauses(t *testing.T) {
	for _, c := range []struct {
		code         int
		msg, action  string
		endsByItself bool
		notSent      bool
	}{
		{code: platform.CodeAPIForbidden, msg: "api forbidden for irregularities", action: "banned"},
		// A template the account no longer has fails every push of its type alike: the
		// backlog waits for the operator rather than failing.
		{code: platform.CodeInvalidTemplateID, msg: "invalid template_id", action: "template ids"},
		// So does one that is no template id at all (a truncated copy in the configuration).
		{code: platform.CodeTemplateIDSize, msg: "invalid template_id size", action: "template ids"},
		{code: platform.CodeAccountLimited, msg: "user limited", action: "restricted"},
		{code: platform.CodeMinuteQuota, msg: "api minute-quota reach limit  mush slower  retry next minute", endsByItself: true},
		// The token endpoint refusing the account pauses as the send endpoint would.
		{code: platform.CodeInvalidAppSecret, msg: "invalid appsecret", action: "AppSecret", notSent: true},
		// A frozen AppSecret needs an operator to unfreeze it: not a passing token outage.
		{code: platform.CodeAppSecretFrozen, msg: "AppSecret is frozen, please unfreeze it on mp", action: "unfreeze", notSent: true},
	} {
		t.Run(fmt.Sprintf("%d from the %s endpoint", c.code, map[bool]string{false: "send", true: "token"}[c.notSent]), func(t *testing.T) {
			r := newRig(t)
			ctx := context.Background()
			p := r.openPause()
			m := metrics.New(prometheus.NewRegistry())
			sender := &refusingSender{Sender: r.pc, refuse: true, code: c.code, msg: c.msg, notSent: c.notSent}
			r.startWorkerWith(quick, func(cfg *delivery.Config) {
				cfg.Pause, cfg.Metrics, cfg.Platform = p, m, sender
				cfg.QuotaReset = quotaInAnHour
			})
			code := strconv.Itoa(c.code)
			var ids []string
			for i := range 4 {
				ids = append(ids, r.publish("u-follows", "JML", map[string]string{"class": "课程", "info": fmt.Sprintf("作业%d", i)}))
			}
			embeddedtest.Eventually(t, 10*time.Second, "sending paused, every message held at the gate", func() bool {
				if _, paused := p.Paused(); !paused || testutil.ToFloat64(m.SendingPaused) != 1 {
					return false
				}
				for _, id := range ids {
					res, err := r.st.Current(ctx, id)
					if err != nil || res.State != push.StateQueued || !strings.Contains(res.LastError, code) {
						return false
					}
				}
				return true
			})
			st, _ := p.Paused()
			switch {
			case !strings.HasPrefix(st.Reason, code):
				t.Fatalf("pause %+v", st)
			case c.endsByItself && (st.Action != "" || time.Until(st.Until) > time.Minute):
				t.Fatalf("pause %+v: the per-minute limit ends by the next minute", st)
			case !c.endsByItself && (!strings.Contains(st.Action, c.action) || !strings.Contains(st.Explain(nil), "worker -resume")):
				t.Fatalf("pause %+v", st)
			}
			sender.mu.Lock()
			calls := sender.calls
			sender.refuse = false
			sender.mu.Unlock()
			if calls > len(ids) {
				t.Fatalf("%d calls for %d messages: the account's refusal was retried per message", calls, len(ids))
			}
			for _, id := range ids {
				if res, _ := r.st.Current(ctx, id); res.Attempts != 0 {
					t.Fatalf("%s spent %d attempts on the account's refusal", id, res.Attempts)
				}
			}
			if err := p.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				if res := r.waitState(id, push.StateSent); res.Attempts != 1 {
					t.Errorf("%s sent after %d attempts, want 1", id, res.Attempts)
				}
			}
		})
	}
}

// TestAddressRefusalPausesOnlyThatWorker: 40164 refuses the address of the worker that
// called, not the account. That worker alone stops sending and hands its messages back to
// the queue, without counting the refused call; the other workers deliver them, the shared
// pause is never set, and the refused worker tries again by itself after AddressPauseFor.
func TestAddressRefusalPausesOnlyThatWorker(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	p := r.openPause()
	mA := metrics.New(prometheus.NewRegistry())
	refused := &refusingSender{Sender: r.pc, refuse: true} // 40164 for every call
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Pause, c.Metrics, c.Platform, c.AddressPauseFor = p, mA, refused, 3*time.Second
		c.QuotaReset = quotaInAnHour
	})
	first := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 10*time.Second, "the refused worker paused itself and handed the message back", func() bool {
		res, err := r.st.Current(ctx, first)
		return err == nil && res.State == push.StateQueued && res.Attempts == 0 &&
			strings.Contains(res.LastError, "40164") && strings.Contains(res.LastError, "IP whitelist") &&
			testutil.ToFloat64(mA.SendingPaused) == 1
	})
	stopB := r.othersDeliver(t, p, first, "refused address")

	// The other worker stops, the address is added to the whitelist: the refused worker
	// sends again by itself once its pause ends, with no operator's resume.
	stopB()
	refused.mu.Lock()
	refused.refuse = false
	refused.mu.Unlock()
	last := r.publish("u-follows", "JML", jml)
	if res := r.waitState(last, push.StateSent); res.Attempts != 1 {
		t.Errorf("%s sent after %d attempts, want 1", last, res.Attempts)
	}
	embeddedtest.Eventually(t, 5*time.Second, "the worker's pause shown ended", func() bool {
		return testutil.ToFloat64(mA.SendingPaused) == 0
	})
}

// TestTokenEndpointAddressRefusal: the token endpoint refuses an address not on the IP
// whitelist with 61004 (where the send endpoint answers 40164): the worker says so, with what
// to do, and pauses itself for AddressPauseFor, not as for a passing token outage.
func TestTokenEndpointAddressRefusal(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	p := r.openPause()
	sender := &refusingSender{Sender: r.pc, refuse: true, notSent: true, code: platform.CodeClientIPNotRegistered,
		msg: "access clientip is not registered"}
	w, _ := r.runWorker(quick, func(cfg *delivery.Config) {
		cfg.Pause, cfg.Platform, cfg.AddressPauseFor = p, sender, time.Minute
		cfg.QuotaReset = quotaInAnHour
	})
	id := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 10*time.Second, "the refusal met and shown", func() bool {
		res, err := r.st.Current(ctx, id)
		return err == nil && res.State == push.StateQueued && res.Attempts == 0 && strings.Contains(res.LastError, "61004")
	})
	why, own := w.OwnPause()
	if res, _ := r.st.Current(ctx, id); !own || !strings.Contains(why, "whitelist") || !strings.Contains(res.LastError, "whitelist") {
		t.Fatalf("61004 from the token endpoint: own pause %v %q, the push shows %q; want the worker paused, naming the IP whitelist", own, why, res.LastError)
	}
	if st, paused := p.Paused(); paused {
		t.Fatalf("one worker's address refusal paused every worker: %+v", st)
	}
}

// TestBlacklistedRecipientFailsAtOnce: 43019, the recipient on the account's blacklist, is
// failed with its first call, as 43101 is: no retry can change it.
func TestBlacklistedRecipientFailsAtOnce(t *testing.T) {
	r := newRig(t)
	sender := &refusingSender{Sender: r.pc, refuse: true, code: platform.CodeBlacklisted, msg: "require remove blacklist"}
	r.startWorkerWith(quick, func(cfg *delivery.Config) { cfg.Platform = sender })
	res := r.waitState(r.publish("u-follows", "JML", jml), push.StateFailed)
	sender.mu.Lock()
	calls := sender.calls
	sender.mu.Unlock()
	if calls != 1 || res.Attempts != 1 || !strings.HasPrefix(res.Reason, "43019") {
		t.Fatalf("a blacklisted recipient: %d platform calls, %d attempts, reason %q; want 1, 1 and 43019", calls, res.Attempts, res.Reason)
	}
}

// TestContentRefusalsFailAtOnce: the platform's refusals of a message's content (47001 data
// format error, seen for a keyword value of the wrong format; 45002 content too large; 40039
// and 40048 a link too long or on a domain not taken) get the same answer however often the
// same body is sent: the push fails with its first call and the platform's code, rather than
// being sent max_attempts times and ending "gave up".
func TestContentRefusalsFailAtOnce(t *testing.T) {
	r := newRig(t)
	for _, tc := range []struct {
		code int
		msg  string
	}{
		{platform.CodeDataFormat, "data format error rid: 66569ae3-6fe89688-274b3e3b"},
		{platform.CodeContentSize, "content size out of limit"},
		{platform.CodeURLSize, "invalid url size"},
		{platform.CodeURLDomain, "invalid url domain"},
	} {
		sender := &refusingSender{Sender: r.pc, refuse: true, code: tc.code, msg: tc.msg}
		stop := r.startWorkerWith(quick, func(cfg *delivery.Config) { cfg.Platform = sender })
		res := r.waitState(r.publish("u-follows", "JML", jml), push.StateFailed)
		stop()
		sender.mu.Lock()
		calls := sender.calls
		sender.mu.Unlock()
		if want := strconv.Itoa(tc.code) + " "; calls != 1 || res.Attempts != 1 || !strings.HasPrefix(res.Reason, want) {
			t.Errorf("%d: %d platform calls, %d attempts, reason %q; want 1, 1 and a reason starting %q", tc.code, calls, res.Attempts, res.Reason, want)
		}
	}
}

// othersDeliver checks that one worker's own pause (for why) set no shared pause p, then starts
// another worker, which delivers first and four more pushes, each with one attempt (the paused
// worker's handing back counted none), and returns its stop.
func (r *rig) othersDeliver(t *testing.T, p *sending.Pause, first, why string) (stop func()) {
	t.Helper()
	if st, paused := p.Paused(); paused {
		t.Fatalf("one worker's %s paused every worker: %+v", why, st)
	}
	stop = r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Pause = p
		c.QuotaReset = quotaInAnHour
	})
	ids := []string{first}
	for i := range 4 {
		ids = append(ids, r.publish("u-follows", "JML", map[string]string{"class": "课程", "info": fmt.Sprintf("作业%d", i)}))
	}
	for _, id := range ids {
		if res := r.waitState(id, push.StateSent); res.Attempts != 1 {
			t.Errorf("%s sent after %d attempts, want 1: the paused worker's handing back counted", id, res.Attempts)
		}
	}
	if st, paused := p.Paused(); paused {
		t.Fatalf("one worker's %s paused every worker: %+v", why, st)
	}
	return stop
}

// TestFollowingAgainSeenAtOnce: a student who left the account fails as not following; once
// the platform's subscribe event is applied (the store says following again), the next
// message to them is sent, not failed from what the worker read a moment before.
func TestFollowingAgainSeenAtOnce(t *testing.T) {
	r := newRig(t)
	r.startWorker(quick)
	ctx := context.Background()
	if res := r.waitState(r.publish("u-left", "JML", jml), push.StateFailed); !strings.HasPrefix(res.Reason, "not following") {
		t.Fatalf("result %+v", res)
	}
	r.sim.AddFollower("oLeft")
	if err := r.st.SetFollowing(ctx, "oLeft", true, time.Now()); err != nil {
		t.Fatal(err)
	}
	if res := r.waitState(r.publish("u-left", "JML", jml), push.StateSent); res.Attempts != 1 {
		t.Fatalf("result %+v", res)
	}
}

// quotaUsedUp is a rig whose platform answers every send 45009, with the pause its workers
// share.
func quotaUsedUp(t *testing.T) (*rig, *sending.Pause) {
	t.Helper()
	r := newRig(t)
	r.sim.SetFaults(simulator.Faults{QuotaUsedUp: true})
	p := r.openPause()
	return r, p
}

// A 45009 read just after the daily quota renewed, by the worker's clock (a send made before
// the renewal, or a platform whose clock runs behind), pauses sending for a minute, not for
// the day until the next renewal.
func TestQuotaAnswerJustAfterRenewal(t *testing.T) {
	r, p := quotaUsedUp(t)
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Pause = p
		// The quota renewed a second ago: the next renewal is a day less a second away.
		c.QuotaReset = func(n time.Time) time.Time { return n.Add(24*time.Hour - time.Second) }
	})
	r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 10*time.Second, "paused", func() bool { _, ok := p.Paused(); return ok })
	st, _ := p.Paused()
	if left := time.Until(st.Until); left > 2*time.Minute {
		t.Fatalf("a 45009 a second after the renewal paused sending for %s", left.Round(time.Second))
	}
}

// Messages waiting for the send budget when a pause begins are held by it too: none calls the
// platform during the pause.
func TestBudgetWaitersHeldByAPause(t *testing.T) {
	r, p := quotaUsedUp(t)
	ctx := context.Background()
	b, err := sending.OpenBudget(ctx, r.js, 2, 1, nil) // two sends a second
	if err != nil {
		t.Fatal(err)
	}
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Pause, c.Budget = p, b
		c.QuotaReset = func(n time.Time) time.Time { return n.Add(time.Hour) }
	})
	var ids []string
	for range 8 {
		ids = append(ids, r.publish("u-follows", "JML", jml))
	}
	embeddedtest.Eventually(t, 10*time.Second, "every message held at the gate", func() bool {
		for _, id := range ids {
			res, err := r.st.Current(ctx, id)
			if err != nil || res.State != push.StateQueued || !strings.Contains(res.LastError, "45009") {
				return false
			}
		}
		return true
	})
	// The first send met the 45009 and paused sending; the budget let the next one through
	// half a second later, by which time the pause held it.
	if sends := r.sim.Stats().Sends; sends > 2 {
		t.Fatalf("the platform got %d sends, %d of them while sending was paused", sends, sends-1)
	}
}

// TestTokenOutageCountsNoAttempt: while the platform's token endpoint fails, no message
// reaches the send endpoint, so none may spend an attempt: each is handed back, shown queued
// with the cause and its attempts unchanged, and sent with its first attempt once a token can
// be had.
func TestTokenOutageCountsNoAttempt(t *testing.T) {
	r := newRig(t)
	var tokenDown atomic.Bool
	tokenDown.Store(true)
	var refused atomic.Int64
	pc := r.tokenRefused(&tokenDown, func() {
		if tokenDown.Load() {
			refused.Add(1)
		}
	})
	r.startWorkerWith(delivery.RetryPolicy{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 2, MaxAttempts: 3},
		func(c *delivery.Config) {
			c.Platform, c.StoreRetry, c.TokenPauseFor = pc, 20*time.Millisecond, 20*time.Millisecond
		})
	id := r.publish("u-follows", "JML", jml)
	// More refusals than the message may have attempts: it is still waiting, with none. (Each
	// try records its attempt before the call and takes it back after: the record is read
	// between two tries.)
	var res push.Result
	embeddedtest.Eventually(t, 10*time.Second, "more token refusals than the message may have attempts, the message queued with none", func() bool {
		var err error
		res, err = r.st.Current(t.Context(), id)
		return refused.Load() > 5 && err == nil && res.State == push.StateQueued && strings.Contains(res.LastError, "502")
	})
	if res.Attempts != 0 || r.sim.Stats().Sends != 0 {
		t.Fatalf("after %d token refusals and no send: %s with %d attempts (%q)", refused.Load(), res.State, res.Attempts, res.Reason)
	}
	tokenDown.Store(false)
	if res := r.waitState(id, push.StateSent); res.Attempts != 1 || r.sim.Stats().Sends != 1 {
		t.Fatalf("sent with %d attempts after %d sends, want 1 and 1", res.Attempts, r.sim.Stats().Sends)
	}
}

// TestGivenUpMessageCallsNoMoreAfterStop: a message whose last allowed attempt was spent
// (max_attempts 1) is handed back to the queue when its worker stops while its dead-letter copy
// still fails. The worker that gets it next reads its attempts used up, and fails it without
// calling the platform again.
func TestGivenUpMessageCallsNoMoreAfterStop(t *testing.T) {
	r := newRig(t)
	r.sim.SetFaults(simulator.Faults{ServerErrorRate: 1})
	policy := lastOnly
	tried := make(chan struct{})
	var once sync.Once
	stop := r.startWorkerWith(policy, func(c *delivery.Config) {
		c.StoreRetry = 20 * time.Millisecond
		c.DeadLetter = func(context.Context, jetstream.Msg, string, int) error {
			once.Do(func() { close(tried) })
			return errors.New("the dead letters are unavailable")
		}
	})
	id := r.publish("u-follows", "JML", jml)
	select {
	case <-tried:
	case <-time.After(15 * time.Second):
		t.Fatal("the message never exhausted its attempt")
	}
	if calls := r.sim.Stats().Sends; calls != 1 {
		t.Fatalf("before the stop: %d platform calls, want 1", calls)
	}
	stop() // a rolling restart while the dead-letter stream is unavailable

	var mu sync.Mutex
	var copies []int
	r.startWorkerWith(policy, func(c *delivery.Config) {
		c.DeadLetter = func(_ context.Context, _ jetstream.Msg, _ string, attempts int) error {
			mu.Lock()
			defer mu.Unlock()
			copies = append(copies, attempts)
			return nil
		}
	})
	res := r.waitState(id, push.StateFailed)
	calls := r.sim.Stats().Sends
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 || res.Attempts != 1 {
		t.Fatalf("max_attempts 1: platform calls %d, attempts %d (dead letter reported attempts %v): %+v", calls, res.Attempts, copies, res)
	}
}

// TestKilledLastAttemptAskedAgain: a worker dies during a message's only allowed attempt
// (max_attempts 1), its outcome unknown. The next worker calls again with the same
// client_msg_id (the platform answers a message it took with its msgid, sending nothing twice),
// and again while the platform's refusals (502) tell nothing of that first call, and counts
// each call: the attempts are the calls made.
func TestKilledLastAttemptAskedAgain(t *testing.T) {
	r := newRig(t)
	r.sim.SetFaults(simulator.Faults{ServerErrorRate: 1})
	id := r.killedDuringCall(lastOnly)
	r.startWorker(lastOnly)
	embeddedtest.Eventually(t, 20*time.Second, "asked again after the kill, twice", func() bool {
		return r.sim.Stats().Sends >= 3
	})
	r.sim.SetFaults(simulator.Faults{})
	res := r.waitState(id, push.StateSent)
	if calls := r.sim.Stats().Sends; int64(res.Attempts) != calls {
		t.Fatalf("platform calls %d, attempts %d: %+v", calls, res.Attempts, res)
	}
}

// TestTokenOutagePausesOnlyThatWorker: a worker that can get no access token (the platform's
// token endpoint failing, or this worker's way to it) stops sending by itself and hands its
// messages back to the queue, each without an attempt; the other workers deliver them, the
// shared pause is never set, and the worker sends again by itself once a token can be had.
func TestTokenOutagePausesOnlyThatWorker(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	tokenDown, p, _ := r.tokenOutage(t, nil, 2*time.Second)
	first := r.publish("u-follows", "JML", jml)
	embeddedtest.Eventually(t, 10*time.Second, "the worker without a token paused itself and handed the message back", func() bool {
		res, err := r.st.Current(ctx, first)
		return err == nil && res.State == push.StateQueued && res.Attempts == 0 &&
			strings.Contains(res.LastError, "no access token")
	})
	stopB := r.othersDeliver(t, p, first, "token outage")

	// The other worker stops and the token endpoint answers again: the first worker sends by
	// itself once its pause ends, with no operator's resume.
	stopB()
	tokenDown.Store(false)
	last := r.publish("u-follows", "JML", jml)
	if res := r.waitState(last, push.StateSent); res.Attempts != 1 {
		t.Errorf("%s sent after %d attempts, want 1", last, res.Attempts)
	}
	if sends := r.sim.Stats().Sends; sends != 6 {
		t.Errorf("6 pushes sent with %d template sends", sends)
	}
}

// tokenOutage starts a worker with the shared pause on a platform whose token endpoint fails
// until the flag it returns is cleared, pausing itself for pauseFor at each failure; m, if not
// nil, counts what the worker does. tokenCalls counts the calls of the token endpoint.
func (r *rig) tokenOutage(t *testing.T, m *metrics.Metrics, pauseFor time.Duration) (tokenDown *atomic.Bool, p *sending.Pause, tokenCalls *atomic.Int64) {
	t.Helper()
	tokenDown, tokenCalls = &atomic.Bool{}, &atomic.Int64{}
	tokenDown.Store(true)
	pc := r.tokenRefused(tokenDown, func() { tokenCalls.Add(1) })
	p = r.openPause()
	r.countCalls(m)
	r.startWorkerWith(quick, func(c *delivery.Config) {
		c.Platform, c.Pause, c.Metrics, c.TokenPauseFor = pc, p, m, pauseFor
		c.QuotaReset = quotaInAnHour
	})
	return tokenDown, p, tokenCalls
}

// TestAttemptTakenBackWhileTheStoreIsDown: a send that never went out for want of an access
// token counts no attempt. The attempt was recorded before the call; taking it back is written
// until the store takes it, even when the store went down meanwhile, so the push ends sent with
// as many attempts as platform sends.
func TestAttemptTakenBackWhileTheStoreIsDown(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	cs := newCutStore(t)
	id, _, tokenDown := r.takeBackFailing(cs, quick)
	if p, err := cs.direct.InProgress(ctx, id); err == nil {
		t.Logf("record while the store is down: %s, %d attempts, platform sends so far %d", p.State, p.Attempts, r.sim.Stats().Sends)
	}
	cs.proxy.SetDown(false)
	tokenDown.Store(false)
	var res push.Result
	embeddedtest.Eventually(t, 30*time.Second, id+" sent", func() bool {
		var err error
		res, err = cs.direct.Current(ctx, id)
		return err == nil && res.State == push.StateSent
	})
	if sends := r.sim.Stats().Sends; res.Attempts != int(sends) {
		t.Fatalf("sent with %d attempts after %d platform send call(s): an attempt no call made is counted", res.Attempts, sends)
	}
}

// TestConsumerGoneIsMadeAgain: the workers' consumer is deleted (an operator's `nats consumer
// rm`, NATS restarted without its data). A pull from it just waits, as if nothing were queued:
// the worker asks whether it exists once it fetches nothing, makes it again, and delivers the
// pushes queued meanwhile. Without a way to make it, the worker says why it fetches nothing.
func TestConsumerGoneIsMadeAgain(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.startWorkerWith(quick, func(cfg *delivery.Config) {
		cfg.ConsumerCheck = 100 * time.Millisecond
		cfg.Reconsume = func(ctx context.Context) (jetstream.Consumer, error) { return queue.EnsureConsumer(ctx, r.js, r.qcfg) }
	})
	r.waitState(r.publish("u-follows", "JML", jml), push.StateSent)
	if err := r.js.DeleteConsumer(ctx, r.qcfg.Stream, r.qcfg.Consumer); err != nil {
		t.Fatal(err)
	}
	if res := r.waitState(r.publish("u-follows", "JML", jml), push.StateSent); res.Attempts != 1 {
		t.Fatalf("the push queued while the consumer was gone: %+v", res)
	}

	// A worker that cannot make it again says so.
	r2 := newRig(t)
	w, _ := r2.runWorker(quick, func(cfg *delivery.Config) { cfg.ConsumerCheck = 100 * time.Millisecond })
	if err := r2.js.DeleteConsumer(ctx, r2.qcfg.Stream, r2.qcfg.Consumer); err != nil {
		t.Fatal(err)
	}
	embeddedtest.Eventually(t, 10*time.Second, "the worker saying its consumer is gone", func() bool {
		why, gone := w.ConsumerGone()
		return gone && strings.Contains(why, "consumer")
	})
}
