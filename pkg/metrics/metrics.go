// Package metrics holds the Prometheus metrics of both programs. A Metrics is built on a
// registry the program passes in (never the global one), so that every test and every process
// has its own, and it is handed to the parts that count.
//
// Each program exports what it does: NewFrontEnd registers the front end's series, NewWorker a
// worker's, and New both, for the standalone process whose front end and in-process workers
// share one registry and one /metrics. ucs_push_rejected_total counts each refused push once,
// by the kind of the first rule it broke (push.Problem.Kind).
package metrics

import (
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Outcomes of a delivery attempt, the values of ucs_deliveries_total's outcome label.
const (
	OutcomeSent   = "sent"
	OutcomeRetry  = "retry"
	OutcomeFailed = "failed"
)

// Security events, the values of ucs_security_events_total's event label. The set is closed:
// a label per client, user or address would let an attacker grow the registry without end.
const (
	// EventLoginFailed is a sign-in refused: a wrong password at the login form, a user or
	// address blocked after repeated failures, a CAS ticket the campus sign-on did not confirm.
	EventLoginFailed = "login_failed"
	// EventClientAuthFailed is a client that did not authenticate at the token, revocation or
	// introspection endpoint: unknown, wrong secret, malformed credentials or blocked.
	EventClientAuthFailed = "client_auth_failed"
	// EventCSRFRefused is a form of the sign-in or account pages refused because it did not
	// come from this browser's page.
	EventCSRFRefused = "csrf_refused"
	// EventCallbackSignatureInvalid is a platform callback that did not authenticate: a wrong
	// or missing signature, a timestamp outside the window, a body that does not decrypt or
	// was made for another appid.
	EventCallbackSignatureInvalid = "callback_signature_invalid"
	// EventCallbackReplayed is a signed callback whose (timestamp, nonce) was already taken.
	EventCallbackReplayed = "callback_replayed"
)

// SecurityEvents are every security event, each counted from 0.
var SecurityEvents = []string{EventLoginFailed, EventClientAuthFailed, EventCSRFRefused,
	EventCallbackSignatureInvalid, EventCallbackReplayed}

// Metrics are the service's metrics. A nil *Metrics counts nothing, so that parts built
// without one (in tests) need no checks.
type Metrics struct {
	reg prometheus.Gatherer

	PushAccepted     prometheus.Counter
	PushRejected     *prometheus.CounterVec
	Deliveries       *prometheus.CounterVec
	DeliveryFailures *prometheus.CounterVec
	DeliverySeconds  prometheus.Histogram
	PlatformSeconds  prometheus.Histogram
	PlatformErrors   *prometheus.CounterVec
	TokenGrants      *prometheus.CounterVec
	DeadLetters      prometheus.Counter
	SendingPaused    prometheus.Gauge
	IdempotentReplay prometheus.Counter
	SecurityEvents   *prometheus.CounterVec
	// ReceiptsUnknown counts the platform's delivery receipts for msgids this service did not
	// send (another system sending through the same official account), dropped.
	ReceiptsUnknown prometheus.Counter
}

// New registers the metrics of both programs, and Go's runtime and process collectors, on
// reg: for a process that is a front end with workers inside (the standalone stack). The
// registry must be empty of them: one Metrics per registry, shared by the parts.
func New(reg *prometheus.Registry) *Metrics { return build(reg, true, true) }

// NewFrontEnd registers the front end's metrics (pushes accepted and refused, token grants,
// idempotent replays, security events) and the runtime collectors on reg.
func NewFrontEnd(reg *prometheus.Registry) *Metrics { return build(reg, true, false) }

// NewWorker registers a worker's metrics (deliveries and their failures and durations, the
// platform's answers, dead letters, the sending pause) and the runtime collectors on reg.
func NewWorker(reg *prometheus.Registry) *Metrics { return build(reg, false, true) }

// build makes every series, so that a part counting into one of another program only counts
// into a series nobody exports, and registers those of the programs asked for: each program
// exports what it does, and no series that always reads 0.
func build(reg *prometheus.Registry, frontEnd, worker bool) *Metrics {
	m := &Metrics{
		reg: reg,
		PushAccepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ucs_push_accepted_total",
			Help: "Pushes accepted: published to the queue and answered with a ucsId (single and batch items).",
		}),
		PushRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ucs_push_rejected_total",
			Help: "Pushes refused for a broken rule (single and batch items), each counted once per push, by the first rule broken (problems are ordered: body, userId, type, url, time, data).",
		}, []string{"rule"}),
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ucs_deliveries_total",
			Help: "Delivery attempts by outcome: sent (the platform took it), retry (later), failed (final).",
		}, []string{"outcome"}),
		DeliveryFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ucs_delivery_failures_total",
			Help: "Deliveries that ended failed, by reason.",
		}, []string{"reason"}),
		DeliverySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ucs_delivery_seconds",
			Help: "From the push's acceptance to the platform's answer that ended its delivery attempts (sent or failed).",
			// Up to a week: a push may wait out a day's quota pause, and retries last until
			// nats.max_age (7 days by default). A delivery past the top bound reads as it.
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
				3 * 3600, 6 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400},
		}),
		PlatformSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ucs_platform_request_seconds",
			Help:    "Duration of one call of the platform's template send endpoint.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15},
		}),
		PlatformErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ucs_platform_errors_total",
			Help: "Template sends the platform refused, by its errcode (http, timeout or network when it gave none).",
		}, []string{"errcode"}),
		TokenGrants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ucs_token_grants_total",
			Help: "Tokens issued by the token endpoint, by grant type.",
		}, []string{"grant"}),
		DeadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ucs_dead_letters_total",
			Help: "Messages copied to the dead-letter stream: those that exhausted worker.max_attempts, and those no worker can decode.",
		}),
		SendingPaused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ucs_sending_paused",
			Help: "1 while this worker sends nothing: sending paused for every worker (the platform's daily quota, 45009, or a refusal of the account such as 48001), or the platform refusing this worker's address (40164); else 0.",
		}),
		IdempotentReplay: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ucs_push_idempotent_replays_total",
			Help: "Push and batch requests answered from an earlier request with the same Idempotency-Key.",
		}),
		SecurityEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ucs_security_events_total",
			Help: "Refused authentications and forged or replayed requests, by event: login_failed, client_auth_failed, csrf_refused, callback_signature_invalid, callback_replayed.",
		}, []string{"event"}),
	}
	m.ReceiptsUnknown = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ucs_callback_receipts_unknown_total",
		Help: "Delivery receipts of the platform for a msgid no message of this service has after the wait for it (receipts of another system sending through the account), dropped.",
	})
	// Every event is exported from the start, so that an alert on its rate sees a 0 first.
	for _, e := range SecurityEvents {
		m.SecurityEvents.WithLabelValues(e)
	}
	if frontEnd {
		reg.MustRegister(m.PushAccepted, m.PushRejected, m.TokenGrants, m.IdempotentReplay, m.SecurityEvents, m.ReceiptsUnknown)
	}
	if worker {
		reg.MustRegister(m.Deliveries, m.DeliveryFailures, m.DeliverySeconds, m.PlatformSeconds, m.PlatformErrors,
			m.DeadLetters, m.SendingPaused)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Accepted counts n accepted pushes.
func (m *Metrics) Accepted(n int) {
	if m != nil && n > 0 {
		m.PushAccepted.Add(float64(n))
	}
}

// Rejected counts a push refused; rule is the kind of the first rule it broke.
func (m *Metrics) Rejected(rule string) {
	if m != nil {
		m.PushRejected.WithLabelValues(rule).Inc()
	}
}

// Grant counts a token issued with grant.
func (m *Metrics) Grant(grant string) {
	if m != nil {
		m.TokenGrants.WithLabelValues(grant).Inc()
	}
}

// Delivery counts an attempt's outcome; reason is the failure's class for failed ones.
func (m *Metrics) Delivery(outcome, reason string) {
	if m == nil {
		return
	}
	m.Deliveries.WithLabelValues(outcome).Inc()
	if outcome == OutcomeFailed {
		m.DeliveryFailures.WithLabelValues(reason).Inc()
	}
}

// Delivered observes the time from acceptance to the platform's final answer.
func (m *Metrics) Delivered(seconds float64) {
	if m != nil {
		m.DeliverySeconds.Observe(seconds)
	}
}

// PlatformCall observes one send to the platform; errcode is "" when it succeeded.
func (m *Metrics) PlatformCall(seconds float64, errcode string) {
	if m == nil {
		return
	}
	m.PlatformSeconds.Observe(seconds)
	if errcode != "" {
		m.PlatformErrors.WithLabelValues(errcode).Inc()
	}
}

// DeadLetter counts a message copied to the dead-letter stream.
func (m *Metrics) DeadLetter() {
	if m != nil {
		m.DeadLetters.Inc()
	}
}

// Paused sets whether sending is paused.
func (m *Metrics) Paused(paused bool) {
	if m == nil {
		return
	}
	v := 0.0
	if paused {
		v = 1
	}
	m.SendingPaused.Set(v)
}

// Replayed counts a request answered from its Idempotency-Key's record.
func (m *Metrics) Replayed() {
	if m != nil {
		m.IdempotentReplay.Inc()
	}
}

// SecurityEvent counts a security event, one of the Event constants.
func (m *Metrics) SecurityEvent(event string) {
	if m != nil {
		m.SecurityEvents.WithLabelValues(event).Inc()
	}
}

// ReceiptUnknown counts a delivery receipt dropped for a msgid this service did not send.
func (m *Metrics) ReceiptUnknown() {
	if m != nil {
		m.ReceiptsUnknown.Inc()
	}
}

// PendingFunc registers ucs_consumer_pending, read at every scrape from pending: the messages
// waiting in the queue that the workers' consumer has not yet handed out, plus those handed
// out and not yet answered. A failed read reports nothing rather than a wrong number. The
// parts of one process (a front end and its in-process workers) read the same queue, so a
// second registration on the same registry keeps the first.
func PendingFunc(reg prometheus.Registerer, pending func() (float64, error)) {
	err := reg.Register(&pendingCollector{read: pending, desc: prometheus.NewDesc("ucs_consumer_pending",
		"Messages in the queue not yet finished by a worker: waiting to be handed out, or handed out and unanswered.", nil, nil)})
	if are := (prometheus.AlreadyRegisteredError{}); err != nil && !errors.As(err, &are) {
		panic(err)
	}
}

type pendingCollector struct {
	read func() (float64, error)
	desc *prometheus.Desc
}

func (c *pendingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	v, err := c.read()
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v)
}
