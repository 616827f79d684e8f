package server_test

import (
	"strings"
	"testing"
)

// TestCompatibleModePushTaken: the official account platform's compatible mode (兼容模式,
// the step between plain and safe mode) pushes the plaintext event and its encrypted copy
// together: the query has signature, encrypt_type=aes and msg_signature, the body the plain
// fields and <Encrypt>. A front end without an EncodingAESKey takes the signed plain fields,
// and refuses only the safe mode's push, whose body holds nothing but the encrypted copy.
func TestCompatibleModePushTaken(t *testing.T) {
	e := newEnv(t)
	if !e.following("2020000001") {
		t.Fatal("precondition: 2020000001 follows")
	}
	now := e.clock.Now().Unix()
	plain := followEvent("oA", "unsubscribe", now)
	body := strings.Replace(plain, "</xml>", "<Encrypt><![CDATA[c2VhbGVkIGNvcHkgb2YgdGhlIGV2ZW50]]></Encrypt></xml>", 1)
	query := e.plainQuery(cbToken, "compat1") + "&encrypt_type=aes&msg_signature=0123456789abcdef0123456789abcdef01234567"
	a := e.callback(query, body)
	if a.status != 200 {
		t.Fatalf("a compatible-mode push (signed plain fields and an encrypted copy) answered %d: %s", a.status, a.body)
	}
	e.applied(0)
	if e.following("2020000001") {
		t.Fatal("the compatible-mode unsubscribe was not applied")
	}
}
