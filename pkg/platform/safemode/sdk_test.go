package safemode_test

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/silenceper/wechat/v2/util"

	"github.com/campus-it/ucs/pkg/platform/safemode"
)

// The platform's safe mode checked against an implementation nobody here wrote: the
// maintained Go SDK github.com/silenceper/wechat/v2 (its util package, which its official
// account server uses to decrypt and sign).

const (
	sdkKey   = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
	sdkAppID = "wx5ca1ab1ec0de0001"
	sdkToken = "campus-callback-token"
)

func TestCipherAgreesWithSDK(t *testing.T) {
	c, err := safemode.New(sdkKey, sdkAppID)
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range [][]byte{
		[]byte("<xml><ToUserName><![CDATA[gh_1]]></ToUserName><Event><![CDATA[TEMPLATESENDJOBFINISH]]></Event><MsgID>3100000000000000001</MsgID></xml>"),
		[]byte("<xml>考试通知 " + string(bytes.Repeat([]byte("x"), 33)) + "</xml>"),
		{},
		bytes.Repeat([]byte("y"), 4096),
	} {
		// Ours encrypts, the SDK decrypts for the account's appid.
		enc, err := c.Encrypt(msg)
		if err != nil {
			t.Fatal(err)
		}
		_, got, err := util.DecryptMsg(sdkAppID, enc, sdkKey)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("the SDK decrypts ours to %q, %v; want %q", got, err, msg)
		}
		if _, _, err := util.DecryptMsg("wx-another-account", enc, sdkKey); err == nil {
			t.Fatal("the SDK took ours for another appid")
		}
		// The SDK encrypts, ours decrypts.
		random := make([]byte, 16)
		_, _ = rand.Read(random)
		sdkEnc, err := util.EncryptMsg(random, msg, sdkAppID, sdkKey)
		if err != nil {
			t.Fatal(err)
		}
		back, err := c.Decrypt(string(sdkEnc))
		if err != nil || !bytes.Equal(back, msg) {
			t.Fatalf("ours decrypts the SDK's to %q, %v; want %q", back, err, msg)
		}
		other, _ := util.EncryptMsg(random, msg, "wx-another-account", sdkKey)
		if _, err := c.Decrypt(string(other)); err == nil {
			t.Fatal("ours took the SDK's message for another appid")
		}
	}
}

func TestSignaturesAgreeWithSDK(t *testing.T) {
	for _, tc := range []struct{ ts, nonce, enc string }{
		{"1700000000", "1234567890", "c2FmZS1tb2RlLWJvZHk="},
		{"1", "n", ""},
		{"1740816000", "18446744073709551615", "Zm9vL2Jhcitx"},
	} {
		if got, want := safemode.Signature(sdkToken, tc.ts, tc.nonce), util.Signature(sdkToken, tc.ts, tc.nonce); got != want {
			t.Errorf("signature %s, the SDK %s", got, want)
		}
		if got, want := safemode.MsgSignature(sdkToken, tc.ts, tc.nonce, tc.enc), util.Signature(sdkToken, tc.ts, tc.nonce, tc.enc); got != want {
			t.Errorf("msg_signature %s, the SDK %s", got, want)
		}
	}
}
