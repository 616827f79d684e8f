package simulator

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/campus-it/ucs/pkg/platform/safemode"
)

// AccountID is the account's original id ("gh_…"), the ToUserName of every
// event the simulator pushes.
const AccountID = "gh_5ca1ab1ec0de"

// Status values of the TEMPLATESENDJOBFINISH event, as the platform sends
// them (note the space in the last one).
const (
	StatusSuccess      = "success"
	StatusUserBlock    = "failed:user block"
	StatusSystemFailed = "failed: system failed"
)

const (
	// callbackRetries is how often a push is retried after a failure: the
	// platform retries three times in total.
	callbackRetries = 3
	// callbackRetryPause is the pause before the first retry, doubled for
	// each further one. The platform waits for its 5 s timeout instead; a
	// simulator has no reason to be as slow.
	callbackRetryPause = 50 * time.Millisecond
)

// Sign returns the signature the platform puts on a push: the hex SHA-1 of
// token, timestamp and nonce sorted and concatenated. A receiver recomputes
// it from the query's timestamp and nonce and its own token.
func Sign(token, timestamp, nonce string) string {
	return safemode.Signature(token, timestamp, nonce)
}

// event is one push to the callback URL.
type event struct {
	due     time.Time // zero: at once
	openid  string
	created int64
	name    string // TEMPLATESENDJOBFINISH, subscribe, unsubscribe
	msgID   int64
	status  string
}

// xml renders the push body as the platform does in plain mode, text in
// CDATA sections; safe mode encrypts it.
func (e *event) xml() []byte {
	b := make([]byte, 0, 320)
	b = append(b, "<xml><ToUserName>"...)
	b = appendCDATA(b, AccountID)
	b = append(b, "</ToUserName><FromUserName>"...)
	b = appendCDATA(b, e.openid)
	b = append(b, "</FromUserName><CreateTime>"...)
	b = strconv.AppendInt(b, e.created, 10)
	b = append(b, "</CreateTime><MsgType>"...)
	b = appendCDATA(b, "event")
	b = append(b, "</MsgType><Event>"...)
	b = appendCDATA(b, e.name)
	b = append(b, "</Event>"...)
	if e.name == eventTemplateFinish {
		b = append(b, "<MsgID>"...)
		b = strconv.AppendInt(b, e.msgID, 10)
		b = append(b, "</MsgID><Status>"...)
		b = appendCDATA(b, e.status)
		b = append(b, "</Status>"...)
	}
	return append(b, "</xml>"...)
}

const (
	eventTemplateFinish = "TEMPLATESENDJOBFINISH"
	eventSubscribe      = "subscribe"
	eventUnsubscribe    = "unsubscribe"
)

// appendCDATA wraps s in a CDATA section, splitting any "]]>" inside it.
func appendCDATA(b []byte, s string) []byte {
	b = append(b, "<![CDATA["...)
	b = append(b, strings.ReplaceAll(s, "]]>", "]]]]><![CDATA[>")...)
	return append(b, "]]>"...)
}

// pusher delivers events to the callback URL on a fixed pool of goroutines,
// so that a burst of sends queues events instead of starting a goroutine
// each. The queue itself is unbounded: a send is never held up by a slow
// receiver, as on the platform.
type pusher struct {
	sim *Simulator

	mu     sync.Mutex
	queue  []event
	head   int
	closed bool

	wake    chan struct{} // one token: "the queue may have work"
	closing chan struct{} // closed by close: stop waiting for due times
	wg      sync.WaitGroup
}

func newPusher(sim *Simulator, workers int) *pusher {
	p := &pusher{sim: sim, wake: make(chan struct{}, 1), closing: make(chan struct{})}
	p.wg.Add(workers)
	for range workers {
		go p.work()
	}
	return p
}

// push queues e; it reports false once the pusher is closed.
func (p *pusher) push(e event) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.queue = append(p.queue, e)
	p.mu.Unlock()
	p.signal()
	return true
}

func (p *pusher) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// pending is the number of queued events not yet taken by a worker.
func (p *pusher) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) - p.head
}

// pop takes the oldest event; ok is false when the queue is empty.
func (p *pusher) pop() (e event, ok, closed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.head == len(p.queue) {
		return event{}, false, p.closed
	}
	e = p.queue[p.head]
	p.queue[p.head] = event{}
	p.head++
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
		if cap(p.queue) > 4096 {
			p.queue = nil // a burst's backlog is not kept for the next one
		}
	} else if p.head > 4096 && p.head*2 > len(p.queue) {
		// Compact so that a long-lived queue does not keep its whole history.
		n := copy(p.queue, p.queue[p.head:])
		p.queue, p.head = p.queue[:n], 0
	}
	if p.head < len(p.queue) {
		defer p.signal() // let another worker take the rest
	}
	return e, true, p.closed
}

func (p *pusher) work() {
	defer p.wg.Done()
	for {
		e, ok, closed := p.pop()
		if !ok {
			if closed {
				return
			}
			select {
			case <-p.wake:
			case <-p.closing:
			}
			continue
		}
		if wait := time.Until(e.due); wait > 0 && !e.due.IsZero() {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-p.closing:
				t.Stop()
			}
		}
		_ = p.sim.deliver(context.Background(), &e, p.closing) // deliver logs and counts a failure itself
	}
}

// close stops taking events, delivers those already queued without waiting
// for their due time, and waits for the workers.
func (p *pusher) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return
	}
	p.closed = true
	p.mu.Unlock()
	close(p.closing)
	p.wg.Wait()
}

// deliver POSTs e to the callback URL, signed, retrying a push left unanswered (a
// time-out, a connection that failed) up to callbackRetries times; an answer other than
// success ends it, as the platform's does. Closing stops the pauses between retries (nil: no
// such signal).
func (s *Simulator) deliver(ctx context.Context, e *event, closing <-chan struct{}) error {
	body := e.xml()
	var encrypted string
	if s.cipher != nil {
		// Encrypted once; each attempt signs it with its own timestamp and nonce.
		var err error
		if encrypted, err = s.cipher.Encrypt(body); err != nil {
			return fmt.Errorf("push %s event: encrypt: %w", e.name, err)
		}
		if body, err = xml.Marshal(safemode.Envelope{ToUserName: AccountID, Encrypt: encrypted}); err != nil {
			return fmt.Errorf("push %s event: %w", e.name, err)
		}
	}
	var err error
	for attempt := 0; attempt <= callbackRetries; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(callbackRetryPause << (attempt - 1))
			select {
			case <-t.C:
			case <-closing:
				t.Stop()
			case <-ctx.Done():
				t.Stop()
				s.stats.callbacksFailed.Add(1)
				return fmt.Errorf("push %s event: %w (last failure: %w)", e.name, ctx.Err(), err)
			}
		}
		if err = s.post(ctx, e.openid, body, encrypted); err == nil {
			s.stats.callbacksDelivered.Add(1)
			return nil
		}
		s.log.Debug("event push failed", "event", e.name, "openid", e.openid, "attempt", attempt+1, "error", err)
		if errors.Is(err, errAnswered) {
			break // an answer, if not success, is final: the platform repeats only a push left unanswered
		}
	}
	s.stats.callbacksFailed.Add(1)
	s.log.Warn("event push failed for good", "event", e.name, "openid", e.openid, "msgid", e.msgID, "error", err)
	return fmt.Errorf("push %s event: %w", e.name, err)
}

// post makes one signed push; encrypted is the body's Encrypt value in safe
// mode, which msg_signature covers.
func (s *Simulator) post(ctx context.Context, openid string, body []byte, encrypted string) error {
	ts := strconv.FormatInt(s.now().Unix(), 10)
	// The whole 64 bits: receivers accept a (timestamp, nonce) pair once, and
	// thousands of pushes a second must not make two alike.
	nonce := strconv.FormatUint(s.randUint64(), 10)
	q := s.callbackURL.Query()
	q.Set("signature", Sign(s.cfg.CallbackToken, ts, nonce))
	q.Set("timestamp", ts)
	q.Set("nonce", nonce)
	// The platform names the follower in the query of every event push too.
	q.Set("openid", openid)
	if s.cipher != nil {
		q.Set("encrypt_type", "aes")
		q.Set("msg_signature", safemode.MsgSignature(s.cfg.CallbackToken, ts, nonce, encrypted))
	}
	u := *s.callbackURL
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/xml")
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%w: HTTP status %s", errAnswered, resp.Status)
	}
	return nil
}

// errAnswered is a push answered with a failure, which the platform does not repeat.
var errAnswered = errors.New("callback answered with a failure")

// parseCallbackURL parses Config.CallbackURL; empty means no pushes.
func parseCallbackURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("simulator: CallbackURL %q is not an absolute http(s) URL", raw)
	}
	return u, nil
}
