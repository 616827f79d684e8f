package keys_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/campus-it/ucs/pkg/keys"
)

func load(t *testing.T, alg string) *keys.Set {
	t.Helper()
	sk, err := keys.Generate(alg, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s, err := keys.FromStored(sk)
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyID() != sk.KeyID || s.Alg() != alg {
		t.Fatalf("kid %s alg %s", s.KeyID(), s.Alg())
	}
	return s
}

func claims() jwt.RegisteredClaims {
	now := time.Now()
	return jwt.RegisteredClaims{Subject: "x", IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}
}

// TestSignVerifyAndJWKS signs with each algorithm and verifies the token with nothing but the
// published JWKS, as a relying party would.
func TestSignVerifyAndJWKS(t *testing.T) {
	for _, alg := range []string{"ES256", "RS256"} {
		t.Run(alg, func(t *testing.T) {
			s := load(t, alg)
			tok, err := s.Sign(claims())
			if err != nil {
				t.Fatal(err)
			}
			var got jwt.RegisteredClaims
			if err := s.Parse(tok, &got); err != nil || got.Subject != "x" {
				t.Fatalf("parse: %v %+v", err, got)
			}
			var set struct {
				Keys []map[string]string `json:"keys"`
			}
			if err := json.Unmarshal(s.JWKS(), &set); err != nil || len(set.Keys) != 1 {
				t.Fatalf("jwks %s", s.JWKS())
			}
			k := set.Keys[0]
			if k["kid"] != s.KeyID() || k["alg"] != alg || k["use"] != "sig" {
				t.Fatalf("jwk %v", k)
			}
			b := func(f string) []byte { v, _ := base64.RawURLEncoding.DecodeString(k[f]); return v }
			var pub any
			switch alg {
			case "ES256":
				pub, err = ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, b("x")...), b("y")...))
			case "RS256":
				pub = &rsa.PublicKey{N: new(big.Int).SetBytes(b("n")), E: int(new(big.Int).SetBytes(b("e")).Int64())}
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := jwt.Parse(tok, func(*jwt.Token) (any, error) { return pub, nil }, jwt.WithValidMethods([]string{alg})); err != nil {
				t.Fatalf("a relying party with the JWKS cannot verify: %v", err)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	s := load(t, "ES256")
	other := load(t, "ES256")
	rs := load(t, "RS256")
	fromOther, _ := other.Sign(claims())
	fromRS, _ := rs.Sign(claims())
	// HS256 keyed with nothing secret: the classic algorithm confusion.
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, claims())
	hs.Header["kid"] = s.KeyID()
	hsTok, _ := hs.SignedString([]byte("public"))
	expired := claims()
	expired.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-time.Minute))
	expTok, _ := s.Sign(expired)
	noExp := jwt.RegisteredClaims{Subject: "x", IssuedAt: jwt.NewNumericDate(time.Now())}
	noExpTok, _ := s.Sign(noExp)
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	sameKid := jwt.NewWithClaims(jwt.SigningMethodES256, claims())
	sameKid.Header["kid"] = s.KeyID()
	sameKidTok, _ := sameKid.SignedString(k)
	for name, tok := range map[string]string{
		"other key": fromOther, "other algorithm": fromRS, "HS256": hsTok, "expired": expTok,
		"no expiry": noExpTok, "forged with the right kid": sameKidTok, "garbage": "a.b.c",
	} {
		var c jwt.RegisteredClaims
		if err := s.Parse(tok, &c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	var c jwt.RegisteredClaims
	if err := s.Parse(fromOther, &c); !errors.Is(err, keys.ErrUnknownKey) {
		t.Errorf("unknown kid: %v", err)
	}
}
