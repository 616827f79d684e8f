package platform

import (
	"testing"
	"time"
)

// TestPairKey: in plain mode a callback's pair is its timestamp and nonce alone, so a second
// body under a pair already used is a replay; in safe mode, where msg_signature covers the
// body, an event push's pair includes its body's mark (another body is another push of the
// platform's, the same body its repeat), and an address check's pair is the plain one.
func TestPairKey(t *testing.T) {
	plain, err := NewCallbackAuth("token", "", "wx0000000000000001", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	safe, err := NewCallbackAuth("token", "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C", "wx0000000000000001", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	a, b := NonceMark([]byte("<xml>a</xml>")), NonceMark([]byte("<xml>b</xml>"))
	bare := NonceKey("1700000000", "n1")
	for _, tt := range []struct {
		name string
		got  string
		same bool // the same key as bare
	}{
		{"plain mode, an event", plain.PairKey("1700000000", "n1", a), true},
		{"plain mode, another event", plain.PairKey("1700000000", "n1", b), true},
		{"plain mode, an address check", plain.PairKey("1700000000", "n1", AddressCheckMark), true},
		{"safe mode, an address check", safe.PairKey("1700000000", "n1", AddressCheckMark), true},
		{"safe mode, an event", safe.PairKey("1700000000", "n1", a), false},
	} {
		if (tt.got == bare) != tt.same {
			t.Errorf("%s: key %q, the bare pair's %q: want same %v", tt.name, tt.got, bare, tt.same)
		}
	}
	if safe.PairKey("1700000000", "n1", a) == safe.PairKey("1700000000", "n1", b) {
		t.Error("safe mode: two bodies under one pair have one key; the second would be refused as a replay")
	}
	if safe.PairKey("1700000000", "n1", a) != safe.PairKey("1700000000", "n1", NonceMark([]byte("<xml>a</xml>"))) {
		t.Error("safe mode: the same body under one pair has two keys; the platform's repeat would be taken as a new push")
	}
}
