package server_test

import (
	"crypto/rand"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/silenceper/wechat/v2/util"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
)

// TestCallbackTakesSDKSealedEvents: the front end takes events encrypted and signed by a
// maintained SDK of the platform nobody here wrote (github.com/silenceper/wechat/v2), in safe
// mode (msg_signature over the encrypted body) and in plain mode (signature over the query),
// and refuses them when the SDK signed with another token.
func TestCallbackTakesSDKSealedEvents(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) {
		c.Platform.EncodingAESKey, c.Platform.AppID = aesKey, safeAppID
	})
	seal := func(token, nonce, event string) (string, string) {
		random := make([]byte, 16)
		_, _ = rand.Read(random)
		enc, err := util.EncryptMsg(random, []byte(event), safeAppID, aesKey)
		if err != nil {
			t.Fatal(err)
		}
		ts := strconv.FormatInt(e.clock.Now().Unix(), 10)
		q := url.Values{"signature": {util.Signature(token, ts, nonce)}, "timestamp": {ts}, "nonce": {nonce},
			"openid": {"oA"}, "encrypt_type": {"aes"}, "msg_signature": {util.Signature(token, ts, nonce, string(enc))}}
		return q.Encode(), "<xml><ToUserName><![CDATA[gh_1]]></ToUserName><Encrypt><![CDATA[" + string(enc) + "]]></Encrypt></xml>"
	}
	waitFollowing := func(want bool) {
		t.Helper()
		embeddedtest.Eventually(t, 5*time.Second, fmt.Sprintf("following is %v", want), func() bool { return e.following("2020000001") == want })
	}
	q, body := seal(cbToken, "sdk-1", followEvent("oA", "unsubscribe", e.clock.Now().Unix()))
	if a := e.callback(q, body); a.status != 200 || strings.TrimSpace(string(a.body)) != "success" {
		t.Fatalf("SDK-sealed unsubscribe: %d %s", a.status, a.body)
	}
	waitFollowing(false)
	q, body = seal("another-token", "sdk-2", followEvent("oA", "subscribe", e.clock.Now().Unix()))
	if a := e.callback(q, body); a.status == 200 {
		t.Fatalf("an event signed with another token was taken: %s", a.body)
	}
	q, body = seal(cbToken, "sdk-3", followEvent("oA", "subscribe", e.clock.Now().Unix()))
	if a := e.callback(q, body); a.status != 200 {
		t.Fatalf("SDK-sealed subscribe: %d %s", a.status, a.body)
	}
	waitFollowing(true)
}

// TestCallbackTakesSDKSignedPlainEvents: in plain mode the SDK's signature over the query is
// the one the front end checks.
func TestCallbackTakesSDKSignedPlainEvents(t *testing.T) {
	e := newEnv(t)
	ts := strconv.FormatInt(e.clock.Now().Unix(), 10)
	q := url.Values{"signature": {util.Signature(cbToken, ts, "sdk-p1")}, "timestamp": {ts}, "nonce": {"sdk-p1"}, "openid": {"oA"}}.Encode()
	if a := e.callback(q, followEvent("oA", "unsubscribe", e.clock.Now().Unix())); a.status != 200 {
		t.Fatalf("SDK-signed plain event: %d %s", a.status, a.body)
	}
	q = url.Values{"signature": {util.Signature("another-token", ts, "sdk-p2")}, "timestamp": {ts}, "nonce": {"sdk-p2"}}.Encode()
	if a := e.callback(q, followEvent("oA", "subscribe", e.clock.Now().Unix())); a.status == 200 {
		t.Fatalf("an event signed with another token was taken: %s", a.body)
	}
}
