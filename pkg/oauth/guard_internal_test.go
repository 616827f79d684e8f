package oauth

import (
	"strings"
	"testing"
)

// TestAddressPart: an IPv6 address counts as its /64; an IPv4 address as itself; every key
// part is short, whatever the caller sent.
func TestAddressPart(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"2001:db8:1:2:aaaa::1", "2001:db8:1:2:bbbb::2"},
		{"2001:db8:1:2::", "2001:db8:1:2:ffff:ffff:ffff:ffff"},
	} {
		if addressPart(c.a) != addressPart(c.b) {
			t.Errorf("%s and %s are one /64: %s, %s", c.a, c.b, addressPart(c.a), addressPart(c.b))
		}
	}
	for _, c := range []struct{ a, b string }{
		{"2001:db8:1:2::1", "2001:db8:1:3::1"},
		{"10.0.0.1", "10.0.0.2"},
		{"::ffff:10.0.0.1", "::ffff:10.0.0.2"},
	} {
		if addressPart(c.a) == addressPart(c.b) {
			t.Errorf("%s and %s share a key: %s", c.a, c.b, addressPart(c.a))
		}
	}
	for _, s := range []string{"", "10.0.0.1", "a.b", strings.Repeat("x", 45), strings.Repeat("é", 40), strings.Repeat("y", 5000)} {
		if k := keyPart(s); len(k) > 65 || strings.ContainsAny(k, ". *>") {
			t.Errorf("keyPart(%.20q) = %q", s, k)
		}
	}
}
