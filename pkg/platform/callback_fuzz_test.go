package platform

import (
	"bytes"
	"errors"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/platform/safemode"
)

// FuzzCallback feeds the platform's callback path, query and body, in both modes. In "raw"
// shape the input is taken as sent (what an outsider can send): nothing panics, and nothing is
// accepted that the token did not sign. In "plain" and "safe" shape the input is signed (and
// sealed) as the platform would: it is accepted, safe mode returns the very event sealed, and
// the event parser takes whatever the platform could put in it.
func FuzzCallback(f *testing.F) {
	const token = "fuzz-token"
	const appID = "wxfuzz0000000001"
	now := time.Unix(1_700_000_000, 0)
	cipher, err := safemode.New("jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C", appID)
	if err != nil {
		f.Fatal(err)
	}
	plain := &CallbackAuth{token: token, now: func() time.Time { return now }}
	safe := &CallbackAuth{token: token, cipher: cipher, now: plain.now}
	ts := strconv.FormatInt(now.Unix(), 10)

	finish := `<xml><ToUserName><![CDATA[gh_1]]></ToUserName><FromUserName><![CDATA[oA]]></FromUserName><CreateTime>1700000000</CreateTime><MsgType><![CDATA[event]]></MsgType><Event><![CDATA[TEMPLATESENDJOBFINISH]]></Event><MsgID>3100000000000000001</MsgID><Status><![CDATA[failed:user block]]></Status></xml>`
	sub := `<xml><ToUserName>gh_1</ToUserName><FromUserName>oA</FromUserName><CreateTime>1700000000</CreateTime><MsgType>event</MsgType><Event>subscribe</Event></xml>`
	signed := url.Values{"signature": {safemode.Signature(token, ts, "n1")}, "timestamp": {ts}, "nonce": {"n1"}}.Encode()
	sealedBody, msgSig, _ := cipher.Seal(token, ts, "n2", "gh_1", []byte(finish))
	sealedQuery := url.Values{"signature": {safemode.Signature(token, ts, "n2")}, "timestamp": {ts}, "nonce": {"n2"},
		"encrypt_type": {"aes"}, "msg_signature": {msgSig}}.Encode()
	for _, seed := range []struct {
		shape       byte
		query, body string
	}{
		{0, signed, finish},
		{0, sealedQuery, string(sealedBody)},
		{0, "signature=x&timestamp=1&nonce=1&encrypt_type=aes&msg_signature=x", "<xml><Encrypt>AAAA</Encrypt></xml>"},
		{0, "%zz&;;", "<xml"},
		{1, "n1", finish},
		{1, "n3", sub},
		{1, "n4", `<xml><MsgType>event</MsgType><Event>unsubscribe</Event><FromUserName>o</FromUserName><CreateTime>99999999999999</CreateTime></xml>`},
		{1, "n5", `<!DOCTYPE x [<!ENTITY e "e">]><xml><MsgID>-1</MsgID></xml>`},
		{2, "n6", finish},
		{2, "n7", ""},
	} {
		f.Add(seed.shape, seed.query, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, shape byte, query string, body []byte) {
		switch shape % 3 {
		case 0: // as sent by anyone
			q, _ := url.ParseQuery(query)
			for _, a := range []*CallbackAuth{plain, safe} {
				if ts, nonce, err := a.VerifyURL(q); err == nil && !safemode.SameSignature(one(q, "signature"), safemode.Signature(token, ts, nonce)) {
					t.Fatalf("address check accepted without the token's signature: %q", query)
				}
				ts, nonce, ev, err := a.Open(q, body)
				if err != nil {
					if _, ok := errors.AsType[*CallbackRefused](err); !ok {
						t.Fatalf("refusal of another type: %T %v", err, err)
					}
					continue
				}
				if a.cipher == nil && !safemode.SameSignature(one(q, "signature"), safemode.Signature(token, ts, nonce)) {
					t.Fatalf("plain mode accepted an unsigned query %q", query)
				}
				if a.cipher != nil && len(ev) > len(body) {
					t.Fatalf("safe mode: %d bytes of event from a %d-byte body", len(ev), len(body))
				}
				_, _ = ParseEvent(ev, now)
			}
		case 1: // signed in plain mode, as the platform does
			if query == "" {
				return
			}
			q := url.Values{"signature": {safemode.Signature(token, ts, query)}, "timestamp": {ts}, "nonce": {query}}
			gotTS, nonce, ev, err := plain.Open(q, body)
			if err != nil || gotTS != ts || nonce != query || !bytes.Equal(ev, body) {
				t.Fatalf("a signed plain push refused: %v", err)
			}
			checkEvent(t, now, ev)
		case 2: // sealed in safe mode, as the platform does
			if query == "" {
				return
			}
			sealed, sig, err := cipher.Seal(token, ts, query, "gh_1", body)
			if err != nil {
				t.Fatal(err)
			}
			q := url.Values{"timestamp": {ts}, "nonce": {query}, "encrypt_type": {"aes"}, "msg_signature": {sig}}
			_, _, ev, err := safe.Open(q, sealed)
			if err != nil || !bytes.Equal(ev, body) {
				t.Fatalf("a sealed push refused or changed: %v", err)
			}
			if _, _, _, err := plain.Open(q, sealed); err == nil {
				t.Fatal("plain mode accepted a query without signature")
			}
			checkEvent(t, now, ev)
		}
	})
}

// checkEvent parses an authenticated event: a follow it accepts has a follower and a time no
// later than the window allows.
func checkEvent(t *testing.T, now time.Time, ev []byte) {
	t.Helper()
	e, err := ParseEvent(ev, now)
	if err != nil || e.MsgType != "event" {
		return
	}
	switch e.Event {
	case "subscribe", "unsubscribe":
		if e.FromUserName == "" || e.CreateTime <= 0 || time.Unix(e.CreateTime, 0).After(now.Add(CallbackWindow)) {
			t.Fatalf("follow event accepted: %+v", e)
		}
	case "TEMPLATESENDJOBFINISH":
		if e.MsgID == 0 || e.Status == "" {
			t.Fatalf("receipt accepted: %+v", e)
		}
	}
}
