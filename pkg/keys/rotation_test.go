package keys_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/keys"
)

// TestRotation: once the signing key is older than the rotation period, a new one signs; the
// JWKS serves the new and the previous key, every header has its kid, and tokens of the
// previous key stay valid until the next rotation retires it.
func TestRotation(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	clock := clk.Now
	st := embeddedtest.Store(t, clock)
	ctx := context.Background()
	a, err := keys.Load(ctx, st, "ES256", clock)
	if err != nil {
		t.Fatal(err)
	}
	b, err := keys.Load(ctx, st, "ES256", clock) // a second replica
	if err != nil {
		t.Fatal(err)
	}
	claims := func() jwt.RegisteredClaims {
		return jwt.RegisteredClaims{IssuedAt: jwt.NewNumericDate(clk.Now()), ExpiresAt: jwt.NewNumericDate(clk.Now().Add(time.Hour))}
	}
	parse := func(s *keys.Set, tok string) error {
		var c jwt.RegisteredClaims
		return s.Parse(tok, &c, jwt.WithTimeFunc(clock))
	}
	jwksKids := func(s *keys.Set) []string {
		var set struct{ Keys []struct{ Kid string } }
		_ = json.Unmarshal(s.JWKS(), &set)
		var out []string
		for _, k := range set.Keys {
			out = append(out, k.Kid)
		}
		return out
	}
	old, _ := a.Sign(claims())
	k1 := a.KeyID()
	const period = 24 * time.Hour

	if err := a.Refresh(ctx, st, period, clock); err != nil || a.KeyID() != k1 {
		t.Fatalf("rotated too early: %v", err)
	}
	clk.Advance(period + time.Minute)
	if err := a.Refresh(ctx, st, period, clock); err != nil {
		t.Fatal(err)
	}
	k2 := a.KeyID()
	if k2 == k1 || len(jwksKids(a)) != 2 {
		t.Fatalf("after rotation: kid %s, jwks %v", k2, jwksKids(a))
	}
	if err := b.Refresh(ctx, st, period, clock); err != nil || b.KeyID() != k2 {
		t.Fatalf("the other replica did not pick up the rotation (or rotated again): %s %v", b.KeyID(), err)
	}
	fresh, _ := b.Sign(claims())
	hdr, _, _ := jwt.NewParser().ParseUnverified(fresh, &jwt.RegisteredClaims{})
	if hdr.Header["kid"] != k2 {
		t.Fatalf("kid %v", hdr.Header["kid"])
	}
	clk.Advance(-period) // the old token is checked within its own lifetime
	if err := parse(a, old); err != nil {
		t.Fatalf("a token of the previous key was refused: %v", err)
	}
	clk.Advance(2*period + 2*time.Minute)
	if err := a.Refresh(ctx, st, period, clock); err != nil || a.KeyID() == k2 {
		t.Fatalf("second rotation: %v", err)
	}
	for _, kid := range jwksKids(a) {
		if kid == k1 {
			t.Fatal("the key two rotations back is still published")
		}
	}
	clk.Advance(-2*period - time.Minute)
	if err := parse(a, old); err == nil {
		t.Fatal("a token of a retired key is still accepted")
	}
}
