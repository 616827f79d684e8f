package simulator_test

import (
	"context"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/campus-it/ucs/pkg/platform/safemode"
	"github.com/campus-it/ucs/pkg/platform/simulator"
)

// TestSafeModePushes: with an EncodingAESKey the simulator's pushes are the platform's safe
// mode: encrypt_type=aes, the <xml><ToUserName/><Encrypt/></xml> body, msg_signature over it,
// and an event that decrypts for the account's appid; each push has its own nonce.
func TestSafeModePushes(t *testing.T) {
	const key = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
	type push struct {
		q    url.Values
		body []byte
	}
	var (
		mu     sync.Mutex
		pushes []push
	)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		pushes = append(pushes, push{r.URL.Query(), b})
		mu.Unlock()
		_, _ = io.WriteString(w, "success")
	}))
	defer rcv.Close()
	sim := simulator.New(simulator.Config{AppID: appID, Secret: secret, CallbackURL: rcv.URL, CallbackToken: cbToken, EncodingAESKey: key})
	defer sim.Close()
	ctx := context.Background()
	if err := sim.Subscribe(ctx, follower); err != nil {
		t.Fatal(err)
	}
	if err := sim.Unsubscribe(ctx, follower); err != nil {
		t.Fatal(err)
	}
	c, err := safemode.New(key, appID)
	if err != nil {
		t.Fatal(err)
	}
	if len(pushes) != 2 || pushes[0].q.Get("nonce") == pushes[1].q.Get("nonce") {
		t.Fatalf("pushes: %+v", pushes)
	}
	for i, p := range pushes {
		ts, nonce := p.q.Get("timestamp"), p.q.Get("nonce")
		var env safemode.Envelope
		if err := xml.Unmarshal(p.body, &env); err != nil || env.ToUserName != simulator.AccountID || env.Encrypt == "" {
			t.Fatalf("push %d body %s: %v", i, p.body, err)
		}
		if p.q.Get("encrypt_type") != "aes" || p.q.Get("msg_signature") != safemode.MsgSignature(cbToken, ts, nonce, env.Encrypt) ||
			p.q.Get("signature") != simulator.Sign(cbToken, ts, nonce) {
			t.Fatalf("push %d query %v", i, p.q)
		}
		if strings.Contains(string(p.body), follower) {
			t.Fatalf("push %d shows the event in plaintext: %s", i, p.body)
		}
		ev, err := c.Decrypt(env.Encrypt)
		want := []string{"subscribe", "unsubscribe"}[i]
		if err != nil || !strings.Contains(string(ev), "<Event><![CDATA["+want+"]]></Event>") || !strings.Contains(string(ev), follower) {
			t.Fatalf("push %d decrypts to %q: %v", i, ev, err)
		}
	}
}
