package simulator_test

import (
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/silenceper/wechat/v2/util"

	"github.com/campus-it/ucs/pkg/platform/simulator"
)

// TestPushesReadBySDK: what the simulator pushes, in plain and in safe mode, is read by a
// maintained SDK of the platform nobody here wrote (github.com/silenceper/wechat/v2): its
// signature and msg_signature check, and it decrypts the event for the account's appid.
func TestPushesReadBySDK(t *testing.T) {
	const key = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
	for _, mode := range []string{"plain", "safe"} {
		t.Run(mode, func(t *testing.T) {
			type push struct {
				q    url.Values
				body []byte
			}
			got := make(chan push, 4)
			rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got <- push{r.URL.Query(), b}
				_, _ = io.WriteString(w, "success")
			}))
			defer rcv.Close()
			cfg := simulator.Config{CallbackURL: rcv.URL + "/cb"}
			if mode == "safe" {
				cfg.EncodingAESKey = key
			}
			e := newEnv(t, cfg)
			a := e.send(t, e.token(t, false).AccessToken, examMessage(follower, "ucs-sdk"))
			if a.ErrCode != 0 {
				t.Fatalf("send: %+v", a)
			}
			var p push
			select {
			case p = <-got:
			case <-time.After(5 * time.Second):
				t.Fatal("no push within 5 s")
			}
			ts, nonce := p.q.Get("timestamp"), p.q.Get("nonce")
			if p.q.Get("signature") != util.Signature(cbToken, ts, nonce) {
				t.Fatalf("signature %q, the SDK computes %q", p.q.Get("signature"), util.Signature(cbToken, ts, nonce))
			}
			if p.q.Get("openid") != follower {
				t.Fatalf("query openid %q, want %q", p.q.Get("openid"), follower)
			}
			event := p.body
			if mode == "safe" {
				var env struct {
					Encrypt string `xml:"Encrypt"`
				}
				if err := xml.Unmarshal(p.body, &env); err != nil {
					t.Fatal(err)
				}
				if p.q.Get("encrypt_type") != "aes" || p.q.Get("msg_signature") != util.Signature(cbToken, ts, nonce, env.Encrypt) {
					t.Fatalf("msg_signature %q, the SDK computes %q", p.q.Get("msg_signature"), util.Signature(cbToken, ts, nonce, env.Encrypt))
				}
				var err error
				if _, event, err = util.DecryptMsg(appID, env.Encrypt, key); err != nil {
					t.Fatalf("the SDK cannot decrypt the push: %v", err)
				}
			}
			var ev struct {
				FromUserName, Event, Status string
				MsgID                       int64
			}
			if err := xml.Unmarshal(event, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.FromUserName != follower || ev.Event != "TEMPLATESENDJOBFINISH" || ev.MsgID != a.MsgID || ev.Status != "success" {
				t.Fatalf("event %+v", ev)
			}
		})
	}
}
