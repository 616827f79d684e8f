package platform

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/campus-it/ucs/pkg/platform/safemode"
)

// CallbackWindow is how far a callback's timestamp may be from now. The platform stamps each
// push when it sends it; an old push is refused, and within the window each (timestamp, nonce)
// pair is accepted once.
const CallbackWindow = 5 * time.Minute

// NoncesTTL is how long a (timestamp, nonce) pair taken by a callback must be remembered: a
// timestamp is accepted from CallbackWindow before our clock to CallbackWindow after it, so a
// pair can come back during twice the window.
const NoncesTTL = 2 * CallbackWindow

// The kinds of event push the service applies (Event.Event).
const (
	EventTemplateFinish = "TEMPLATESENDJOBFINISH"
	EventSubscribe      = "subscribe"
	EventUnsubscribe    = "unsubscribe"
)

// Event is an event push of the platform, as plain mode sends it and safe mode encrypts it.
type Event struct {
	XMLName      xml.Name `xml:"xml"`
	ToUserName   string   `xml:"ToUserName"`
	FromUserName string   `xml:"FromUserName"`
	CreateTime   int64    `xml:"CreateTime"`
	MsgType      string   `xml:"MsgType"`
	Event        string   `xml:"Event"`
	MsgID        int64    `xml:"MsgID"`
	Status       string   `xml:"Status"`
}

// CallbackRefused is a callback that did not authenticate; Reason is for the log only.
type CallbackRefused struct{ Reason string }

func (e *CallbackRefused) Error() string { return "callback not authenticated: " + e.Reason }

func refused(reason string) error { return &CallbackRefused{Reason: reason} }

// CallbackAuth authenticates the platform's callbacks. Plain mode (no EncodingAESKey): the
// signature covers the token, timestamp and nonce, never the body. Safe mode: the body is
// encrypted with the account's EncodingAESKey and msg_signature covers it; a plaintext body is
// refused.
type CallbackAuth struct {
	token  string
	cipher *safemode.Cipher // nil: plain mode
	now    func() time.Time
}

// NewCallbackAuth authenticates callbacks signed with token; a non-empty encodingAESKey takes
// them in safe mode only, for appID. An empty token refuses every callback.
func NewCallbackAuth(token, encodingAESKey, appID string, now func() time.Time) (*CallbackAuth, error) {
	a := &CallbackAuth{token: token, now: now}
	if encodingAESKey != "" {
		c, err := safemode.New(encodingAESKey, appID)
		if err != nil {
			return nil, fmt.Errorf("callback safe mode: %w", err)
		}
		a.cipher = c
	}
	return a, nil
}

// one is the query parameter k when it is given exactly once.
func one(q url.Values, k string) string {
	if v := q[k]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// VerifyURL checks the platform's GET of the callback address and returns its timestamp and
// nonce. In both modes the official account platform signs it as plain mode does and expects
// echostr back as it came (only WeCom encrypts echostr).
func (a *CallbackAuth) VerifyURL(q url.Values) (ts, nonce string, err error) {
	ts, nonce = one(q, "timestamp"), one(q, "nonce")
	if err := a.fresh(ts, nonce); err != nil {
		return "", "", err
	}
	sig := one(q, "signature")
	if sig == "" {
		return "", "", refused("no signature")
	}
	if !safemode.SameSignature(sig, safemode.Signature(a.token, ts, nonce)) {
		return "", "", refused("wrong signature")
	}
	return ts, nonce, nil
}

func (a *CallbackAuth) fresh(ts, nonce string) error {
	if a.token == "" {
		return refused("no callback token configured")
	}
	if ts == "" || nonce == "" {
		return refused("no timestamp or nonce")
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return refused("timestamp not a number")
	}
	if d := a.now().Sub(time.Unix(secs, 0)); d > CallbackWindow || d < -CallbackWindow {
		return refused("timestamp outside the window")
	}
	return nil
}

// SignsBody says whether an event push's signature covers its body (safe mode: msg_signature
// over the encrypted body), so that another body under a pair already used cannot be a replay.
func (a *CallbackAuth) SignsBody() bool { return a.cipher != nil }

// Open authenticates an event push and returns its timestamp, nonce and plaintext event. Every
// refusal is a *CallbackRefused.
func (a *CallbackAuth) Open(q url.Values, body []byte) (ts, nonce string, event []byte, err error) {
	if a.cipher == nil {
		if (one(q, "encrypt_type") == "aes" || q.Has("msg_signature")) && !bytes.Contains(body, []byte("<MsgType>")) {
			// The account was put in safe mode, and this service has no key to read it with: a
			// push taken for an event with no type would be answered success and lost. (In the
			// compatible mode the body carries the plain fields beside the encrypted copy.)
			return "", "", nil, refused("an encrypted push, and no EncodingAESKey is configured (platform.encoding_aes_key)")
		}
		ts, nonce, err = a.VerifyURL(q)
		return ts, nonce, body, err
	}
	ts, nonce = one(q, "timestamp"), one(q, "nonce")
	if err := a.fresh(ts, nonce); err != nil {
		return "", "", nil, err
	}
	if one(q, "encrypt_type") != "aes" {
		// A plaintext push where the account is in safe mode: its body is signed by nobody.
		return "", "", nil, refused("not encrypted (encrypt_type is not aes)")
	}
	msgSig := one(q, "msg_signature")
	if msgSig == "" {
		return "", "", nil, refused("no msg_signature")
	}
	var env safemode.Envelope
	if err := xml.Unmarshal(body, &env); err != nil || env.Encrypt == "" {
		return "", "", nil, refused("body has no Encrypt")
	}
	if !safemode.SameSignature(msgSig, safemode.MsgSignature(a.token, ts, nonce, env.Encrypt)) {
		return "", "", nil, refused("wrong msg_signature")
	}
	event, err = a.cipher.Decrypt(env.Encrypt)
	switch {
	case errors.Is(err, safemode.ErrAppID):
		return "", "", nil, refused("encrypted for another appid")
	case err != nil:
		return "", "", nil, refused("body does not decrypt")
	}
	return ts, nonce, event, nil
}

// NonceKey is the key under which a (timestamp, nonce) pair is remembered: a hash, so that any
// nonce makes a valid key of bounded length. 128 bits of it, in 22 characters: every callback
// of the last ten minutes has its key in the index of the bucket that remembers them, and a
// 64-character key costs about 390 bytes of the queue's memory where this one costs 300.
func NonceKey(ts, nonce string) string {
	sum := sha256.Sum256([]byte(ts + "|" + nonce))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// PairKey is the key under which the (timestamp, nonce) pair of a callback is remembered
// (NonceKey), with mark what its record holds (NonceMark of an event push's body, or
// AddressCheckMark). When the signature covers the body (safe mode's msg_signature), another
// body under a pair already used is another push of the platform's (its nonces are short, and
// two of one second do meet), not a replay: the pair of an event push is taken with its body's
// mark, and the same body again is still a repeat.
func (a *CallbackAuth) PairKey(ts, nonce string, mark []byte) string {
	if a.SignsBody() && !bytes.Equal(mark, AddressCheckMark) {
		nonce += "|" + string(mark)
	}
	return NonceKey(ts, nonce)
}

// NonceMark is what the record of a (timestamp, nonce) pair holds for an event push whose
// signed content is event (Open's: the body in plain mode, the decrypted event in safe mode,
// where the XML around the signed Encrypt is signed by no one): a hash of it. The platform
// repeats a push it got no timely "success" for as it was: a pair already taken with the same
// mark is that repeat, and is taken again (an event applied twice changes nothing); with
// another mark, it is a replay.
func NonceMark(body []byte) []byte {
	sum := sha256.Sum256(body)
	return []byte(eventMarkPrefix + base64.RawURLEncoding.EncodeToString(sum[:]))
}

// IsEventMark reports whether mark, a pair's record, is an event push's (NonceMark).
func IsEventMark(mark []byte) bool { return bytes.HasPrefix(mark, []byte(eventMarkPrefix)) }

const eventMarkPrefix = "event "

// AddressCheckMark is what the record of a pair taken by an address check holds: no event
// push's mark, so that the check's signed query cannot sign one.
var AddressCheckMark = []byte("address check")

// ParseEvent reads an authenticated event and checks what applying it needs: a receipt has a
// msgid and a status, a follow its follower and a time no later than now and CallbackWindow
// (follows apply in CreateTime order, and a later time would outrank every real event to
// come). The error says what is missing. Events of other kinds are returned unchecked.
func ParseEvent(plain []byte, now time.Time) (Event, error) {
	var ev Event
	if err := xml.Unmarshal(plain, &ev); err != nil {
		return ev, errors.New("callback body is not an event")
	}
	if ev.MsgType != "event" {
		return ev, nil
	}
	switch ev.Event {
	case EventTemplateFinish:
		if ev.MsgID == 0 || ev.Status == "" {
			return ev, errors.New(EventTemplateFinish + " without MsgID or Status")
		}
	case EventSubscribe, EventUnsubscribe:
		if ev.FromUserName == "" {
			return ev, errors.New(ev.Event + " without FromUserName")
		}
		if ev.CreateTime <= 0 || time.Unix(ev.CreateTime, 0).After(now.Add(CallbackWindow)) {
			return ev, errors.New(ev.Event + " without a CreateTime up to now")
		}
	}
	return ev, nil
}
