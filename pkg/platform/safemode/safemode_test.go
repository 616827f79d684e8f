package safemode

import (
	"bytes"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"strings"
	"testing"
)

// The platform's published sample of an encrypted message (its message-encryption sample code):
// key, token, appid, query and Encrypt value, and what they decrypt to. Agreeing with it shows
// that this package speaks the platform's format, not merely one it agrees with itself on.
const (
	sampleKey       = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
	sampleToken     = "QDG6eK"
	sampleAppID     = "wx5823bf96d3bd56c7"
	sampleTimestamp = "1409659813"
	sampleNonce     = "1372623149"
	sampleSignature = "477715d11cdb4164915debcba66cb864d751f3e6"
	sampleEncrypt   = "RypEvHKD8QQKFhvQ6QleEB4J58tiPdvo+rtK1I9qca6aM/wvqnLSV5zEPeusUiX5L5X/0lWfrf0QADHHhGd3QczcdCUpj911L3vg3W/sYYvuJTs3TUUkSUXxaccAS0qhxchrRYt66wiSpGLYL42aM6A8dTT+6k4aSknmPj48kzJs8qLjvd4Xgpue06DOdnLxAUHzM6+kDZ+HMZfJYuR+LtwGc2hgf5gsijff0ekUNXZiqATP7PF5mZxZ3Izoun1s4zG4LUMnvw2r+KqCKIw+3IQH03v+BCA9nMELNqbSf6tiWSrXJB3LAVGUcallcrw8V2t9EL4EhzJWrQUax5wLVMNS0+rUPA3k22Ncx4XXZS9o0MBH27Bo6BpNelZpS+/uh9KsNlY6bHCmJU9p8g7m3fVKn28H3KDYA5Pl/T8Z1ptDAVe0lXdQ2YoyyH2uyPIGHBZZIs2pDBS8R07+qN+E7Q=="
)

func TestPlatformSample(t *testing.T) {
	if got := MsgSignature(sampleToken, sampleTimestamp, sampleNonce, sampleEncrypt); got != sampleSignature {
		t.Fatalf("msg_signature %s, the platform's %s", got, sampleSignature)
	}
	if !SameSignature(strings.ToUpper(sampleSignature), MsgSignature(sampleToken, sampleTimestamp, sampleNonce, sampleEncrypt)) {
		t.Fatal("an upper-case signature was refused")
	}
	c, err := New(sampleKey, sampleAppID)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := c.Decrypt(sampleEncrypt)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(msg, []byte("<xml><ToUserName><![CDATA[wx5823bf96d3bd56c7]]>")) || !bytes.Contains(msg, []byte("<Content><![CDATA[hello]]></Content>")) {
		t.Fatalf("decrypted %q", msg)
	}
	other, _ := New(sampleKey, "wx0000000000000000")
	if _, err := other.Decrypt(sampleEncrypt); !errors.Is(err, ErrAppID) {
		t.Fatalf("another account's message: %v", err)
	}
}

func TestRoundTrip(t *testing.T) {
	c, err := New(sampleKey, "wxabc")
	if err != nil {
		t.Fatal(err)
	}
	// Lengths around the 32-byte padding block: a plaintext that fills blocks exactly gets a
	// whole block of padding.
	for n := range 80 {
		msg := bytes.Repeat([]byte{'x'}, n)
		enc, err := c.Encrypt(msg)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := base64.StdEncoding.DecodeString(enc)
		if len(raw)%32 != 0 || len(raw) < 16+4+n+len("wxabc")+1 {
			t.Fatalf("%d bytes: ciphertext of %d bytes", n, len(raw))
		}
		got, err := c.Decrypt(enc)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("%d bytes: %q %v", n, got, err)
		}
	}
	a, _ := c.Encrypt([]byte("same"))
	b, _ := c.Encrypt([]byte("same"))
	if a == b {
		t.Fatal("two encryptions of one message are equal: the random prefix is missing")
	}
	body, sig, err := c.Seal("tok", "1700000000", "42", "gh_1", []byte("<xml/>"))
	if err != nil {
		t.Fatal(err)
	}
	var env Envelope
	if err := xml.Unmarshal(body, &env); err != nil || env.ToUserName != "gh_1" || sig != MsgSignature("tok", "1700000000", "42", env.Encrypt) {
		t.Fatalf("sealed %s %s: %v", body, sig, err)
	}
}

func TestDecryptRefusesMalformed(t *testing.T) {
	c, _ := New(sampleKey, sampleAppID)
	good, _ := base64.StdEncoding.DecodeString(sampleEncrypt)
	for name, enc := range map[string]string{
		"empty":           "",
		"not base64":      "%%%",
		"not whole block": base64.StdEncoding.EncodeToString(good[:len(good)-3]),
		"truncated":       base64.StdEncoding.EncodeToString(good[:len(good)-16]),
		"one block":       base64.StdEncoding.EncodeToString(good[:16]),
		"flipped":         base64.StdEncoding.EncodeToString(append(append([]byte{}, good[:len(good)-1]...), good[len(good)-1]^1)),
	} {
		if _, err := c.Decrypt(enc); err == nil {
			t.Errorf("%s: decrypted", name)
		}
	}
}

func TestParseKey(t *testing.T) {
	if _, err := ParseKey(sampleKey); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"", sampleKey[:42], sampleKey + "A", sampleKey[:42] + "+", sampleKey[:42] + "="} {
		if _, err := ParseKey(k); err == nil {
			t.Errorf("%q accepted", k)
		}
	}
	if _, err := New(sampleKey, ""); err == nil {
		t.Error("a cipher without appid")
	}
}

// FuzzDecrypt: no Encrypt value panics the decryption, and every message survives a round trip.
func FuzzDecrypt(f *testing.F) {
	f.Add(sampleEncrypt, []byte("<xml/>"))
	f.Add("", []byte{})
	f.Add("AAAAAAAAAAAAAAAAAAAAAA==", bytes.Repeat([]byte{0}, 44))
	c, _ := New(sampleKey, sampleAppID)
	f.Fuzz(func(t *testing.T, enc string, msg []byte) {
		if got, err := c.Decrypt(enc); err == nil && len(got) > len(enc) {
			t.Fatalf("message of %d bytes from %d characters", len(got), len(enc))
		}
		sealed, err := c.Encrypt(msg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Decrypt(sealed)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("round trip of %q: %q %v", msg, got, err)
		}
	})
}
