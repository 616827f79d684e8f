package keys_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/keys"
)

// TestRotation: once the signing key is older than the rotation period, a new one is made and
// published at once (the JWKS serves the new and the previous key, and both are accepted, on
// every replica once it reads the keys again), and signs from PublishAhead on; every header
// has its kid, and tokens of the previous key stay valid until the next rotation retires it.
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
	t0 := clk.Now()
	at := func(d time.Duration) { clk.Set(t0.Add(d)) }
	old, _ := a.Sign(claims())
	k1 := a.KeyID()
	const period = 24 * time.Hour
	// A key is replaced once it has signed for a period: PublishAhead after it was made it
	// signs, and a replica notices within ReloadEvery.
	due := period + keys.PublishAhead + keys.ReloadEvery

	at(due - time.Second)
	if err := a.Refresh(ctx, st, period, clock); err != nil || a.KeyID() != k1 || len(jwksKids(a)) != 1 {
		t.Fatalf("rotated too early: %v", err)
	}
	at(due)
	if err := a.Refresh(ctx, st, period, clock); err != nil {
		t.Fatal(err)
	}
	kids := jwksKids(a)
	if len(kids) != 2 || a.KeyID() != k1 {
		t.Fatalf("after rotation: signing kid %s (want the previous %s until the new one is published everywhere), jwks %v", a.KeyID(), k1, kids)
	}
	k2 := kids[0]
	if k2 == k1 {
		k2 = kids[1]
	}
	if err := b.Refresh(ctx, st, period, clock); err != nil || len(jwksKids(b)) != 2 || b.KeyID() != k1 {
		t.Fatalf("the other replica did not pick up the rotation (or rotated again): %s %v %v", b.KeyID(), jwksKids(b), err)
	}
	// The previous key's last token, as long-lived as the period.
	at(due + keys.PublishAhead - time.Second)
	if err := b.Refresh(ctx, st, period, clock); err != nil || b.KeyID() != k1 {
		t.Fatalf("the new key signs before it is published everywhere: %s %v", b.KeyID(), err)
	}
	lastClaims := claims()
	lastClaims.ExpiresAt = jwt.NewNumericDate(clk.Now().Add(period))
	last, _ := b.Sign(lastClaims)

	// A token the new key signs on one replica is accepted on the other before it signs there.
	at(due + keys.PublishAhead)
	if err := a.Refresh(ctx, st, period, clock); err != nil || a.KeyID() != k2 {
		t.Fatalf("the new key does not sign once published: %s %v", a.KeyID(), err)
	}
	early, _ := a.Sign(claims())
	if err := parse(b, early); err != nil {
		t.Fatalf("a replica that has not read the keys again refuses the new key's token: %v", err)
	}
	if err := b.Refresh(ctx, st, period, clock); err != nil || b.KeyID() != k2 {
		t.Fatalf("the other replica: %s %v", b.KeyID(), err)
	}
	fresh, _ := b.Sign(claims())
	hdr, _, _ := jwt.NewParser().ParseUnverified(fresh, &jwt.RegisteredClaims{})
	if hdr.Header["kid"] != k2 {
		t.Fatalf("kid %v", hdr.Header["kid"])
	}
	at(time.Minute) // the old token is checked within its own lifetime
	if err := parse(a, old); err != nil {
		t.Fatalf("a token of the previous key was refused: %v", err)
	}
	// The previous key's last token stays valid until it expires: the next rotation, which
	// retires the key, comes after.
	at(due + keys.PublishAhead + period - 2*time.Second)
	if err := a.Refresh(ctx, st, period, clock); err != nil {
		t.Fatal(err)
	}
	if err := parse(a, last); err != nil {
		t.Fatalf("the previous key's last token, a second before it expires: %v", err)
	}
	at(2 * due)
	if err := a.Refresh(ctx, st, period, clock); err != nil || !slices.Contains(jwksKids(a), k2) || len(jwksKids(a)) != 2 {
		t.Fatalf("second rotation: %v %v", jwksKids(a), err)
	}
	for _, kid := range jwksKids(a) {
		if kid == k1 {
			t.Fatal("the key two rotations back is still published")
		}
	}
	at(time.Minute)
	if err := parse(a, old); err == nil {
		t.Fatal("a token of a retired key is still accepted")
	}
}
