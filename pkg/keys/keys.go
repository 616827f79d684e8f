// Package keys holds the service's token signing keys: it generates them on first start, keeps
// them in the store so every replica signs with the same key, signs JWTs, verifies them with the
// algorithm pinned, and publishes the public keys as a JWKS.
package keys

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/campus-it/ucs/pkg/store"
)

// Store keeps signing keys; *store.Store implements it.
type Store interface {
	CurrentSigningKey(ctx context.Context, alg string, generate func() (store.SigningKey, error)) (store.SigningKey, error)
	PreviousSigningKey(ctx context.Context, alg string) (store.SigningKey, error)
	RotateSigningKey(ctx context.Context, alg string, old, next store.SigningKey) (bool, error)
}

// Set is the keys in use: the one that signs new tokens and every one whose tokens are
// accepted (the current key and the one before it). Refresh swaps them while requests run.
//
// A new key is published (in the JWKS, and accepted) for PublishAhead before it signs: the
// replica that rotates keeps signing with the previous key meanwhile, so that every other
// replica, which reads the keys again every minute, holds the new key before any token it
// signs reaches them or a relying party reads their JWKS.
type Set struct {
	st atomic.Pointer[keyState]
}

type keyState struct {
	current store.SigningKey // the newest key, whose age decides the next rotation
	alg     string
	kid     string // of the key that signs: current, or the previous one during PublishAhead
	method  jwt.SigningMethod
	signer  crypto.Signer
	verify  map[string]crypto.PublicKey
	algs    []string
	jwks    []byte
}

// Load returns the key set, generating and storing a key of alg (ES256 or RS256) on first start.
func Load(ctx context.Context, st Store, alg string, now func() time.Time) (*Set, error) {
	if now == nil {
		now = time.Now
	}
	s := &Set{}
	if err := s.load(ctx, st, alg, now); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Set) load(ctx context.Context, st Store, alg string, now func() time.Time) error {
	cur, err := st.CurrentSigningKey(ctx, alg, func() (store.SigningKey, error) { return Generate(alg, now()) })
	if err != nil {
		return err
	}
	var prev []store.SigningKey
	switch p, err := st.PreviousSigningKey(ctx, alg); {
	case err == nil:
		prev = append(prev, p)
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	ks, err := newState(cur, now(), prev...)
	if err != nil {
		return err
	}
	s.st.Store(ks)
	return nil
}

// ReloadEvery is how often every replica reads the keys again (Refresh).
const ReloadEvery = time.Minute

// PublishAhead is how long a new key is published before it signs: twice ReloadEvery.
const PublishAhead = 2 * ReloadEvery

// Refresh reloads the keys from the store, where another replica may have rotated them, and
// rotates them itself when the current key has signed for rotateAfter: once it is older than
// rotateAfter, PublishAhead and ReloadEvery, as the previous key may sign until PublishAhead
// (and a replica notices at its next reload). The previous key stays accepted (and in the
// JWKS) until the next rotation, so a token it signed stays valid until it expires as long as
// rotateAfter exceeds every token lifetime.
func (s *Set) Refresh(ctx context.Context, st Store, rotateAfter time.Duration, now func() time.Time) error {
	ks := s.st.Load()
	if err := s.load(ctx, st, ks.alg, now); err != nil {
		return err
	}
	ks = s.st.Load()
	if now().Sub(ks.current.Created) < rotateAfter+PublishAhead+ReloadEvery {
		return nil
	}
	next, err := Generate(ks.alg, now())
	if err != nil {
		return err
	}
	if _, err := st.RotateSigningKey(ctx, ks.alg, ks.current, next); err != nil {
		return err
	}
	return s.load(ctx, st, ks.alg, now)
}

// Generate makes a new signing key of alg.
func Generate(alg string, now time.Time) (store.SigningKey, error) {
	var priv crypto.Signer
	var err error
	switch alg {
	case "ES256":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "RS256":
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		return store.SigningKey{}, fmt.Errorf("unsupported signing algorithm %q", alg)
	}
	if err != nil {
		return store.SigningKey{}, fmt.Errorf("generate %s key: %w", alg, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return store.SigningKey{}, fmt.Errorf("encode key: %w", err)
	}
	kid, err := thumbprint(priv.Public())
	if err != nil {
		return store.SigningKey{}, err
	}
	return store.SigningKey{KeyID: kid, Alg: alg, PKCS8: der, Created: now.UTC()}, nil
}

// FromStored builds a set that signs with sk and also accepts tokens of previous.
func FromStored(sk store.SigningKey, previous ...store.SigningKey) (*Set, error) {
	ks, err := newState(sk, sk.Created.Add(PublishAhead), previous...)
	if err != nil {
		return nil, err
	}
	s := &Set{}
	s.st.Store(ks)
	return s, nil
}

func signerOf(sk store.SigningKey) (crypto.Signer, error) {
	k, err := x509.ParsePKCS8PrivateKey(sk.PKCS8)
	if err != nil {
		return nil, fmt.Errorf("decode signing key %s: %w", sk.KeyID, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("signing key %s is not a signer", sk.KeyID)
	}
	return signer, nil
}

// newState is the state of the keys sk (the newest) and previous at now: sk signs unless it
// is younger than PublishAhead and a previous key of its algorithm can sign meanwhile.
func newState(sk store.SigningKey, now time.Time, previous ...store.SigningKey) (*keyState, error) {
	signer, err := signerOf(sk)
	if err != nil {
		return nil, err
	}
	s := &keyState{current: sk, alg: sk.Alg, kid: sk.KeyID, signer: signer, verify: map[string]crypto.PublicKey{sk.KeyID: signer.Public()}}
	for _, p := range previous {
		if p.Alg != sk.Alg {
			continue // a key of another algorithm is never accepted: the algorithm stays pinned
		}
		ps, err := signerOf(p)
		if err != nil {
			return nil, err
		}
		s.verify[p.KeyID] = ps.Public()
		if now.Before(sk.Created.Add(PublishAhead)) {
			s.kid, s.signer = p.KeyID, ps
		}
	}
	switch sk.Alg {
	case "ES256":
		if _, ok := signer.(*ecdsa.PrivateKey); !ok {
			return nil, fmt.Errorf("key %s is not an ECDSA key", sk.KeyID)
		}
		s.method = jwt.SigningMethodES256
	case "RS256":
		if _, ok := signer.(*rsa.PrivateKey); !ok {
			return nil, fmt.Errorf("key %s is not an RSA key", sk.KeyID)
		}
		s.method = jwt.SigningMethodRS256
	default:
		return nil, fmt.Errorf("unsupported signing algorithm %q", sk.Alg)
	}
	s.algs = []string{sk.Alg}
	jwks, err := s.buildJWKS()
	if err != nil {
		return nil, err
	}
	s.jwks = jwks
	return s, nil
}

// Alg is the algorithm of new tokens.
func (s *Set) Alg() string { return s.st.Load().alg }

// KeyID is the kid of the signing key.
func (s *Set) KeyID() string { return s.st.Load().kid }

// Sign returns the signed compact JWT of claims, with kid in its header.
func (s *Set) Sign(claims jwt.Claims) (string, error) {
	return s.st.Load().sign(claims)
}

// SignTyped is Sign with the header's typ set to typ (RFC 8725 §3.11: a token of another kind,
// such as a back-channel logout token's "logout+jwt", cannot pass for an ID or access token).
func (s *Set) SignTyped(typ string, claims jwt.Claims) (string, error) {
	return s.st.Load().signTyped(typ, claims)
}

func (s *keyState) sign(claims jwt.Claims) (string, error) { return s.signTyped("", claims) }

func (s *keyState) signTyped(typ string, claims jwt.Claims) (string, error) {
	t := jwt.NewWithClaims(s.method, claims)
	t.Header["kid"] = s.kid
	if typ != "" {
		t.Header["typ"] = typ
	}
	return t.SignedString(s.signer)
}

// ErrUnknownKey is returned for a token signed with a key the set does not hold.
var ErrUnknownKey = errors.New("token signed with an unknown key")

// Parse verifies token's signature, with only the set's algorithms allowed, and its time
// claims, and decodes it into claims.
func (s *Set) Parse(token string, claims jwt.Claims, opts ...jwt.ParserOption) error {
	return s.st.Load().parse(token, claims, opts...)
}

func (s *keyState) parse(token string, claims jwt.Claims, opts ...jwt.ParserOption) error {
	// No check that iat is not in the future: iat is written in whole seconds, and a replica
	// whose clock runs a little behind the one that issued a token would refuse it.
	opts = append(opts, jwt.WithValidMethods(s.algs), jwt.WithExpirationRequired())
	_, err := jwt.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		k, ok := s.verify[kid]
		if !ok {
			return nil, ErrUnknownKey
		}
		return k, nil
	}, opts...)
	return err
}

// JWKS returns the public keys as a JSON Web Key Set document.
func (s *Set) JWKS() []byte { return s.st.Load().jwks }

type jwk struct {
	Kty string `json:"kty"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Crv string `json:"crv,omitempty"`
	X   string `json:"x,omitempty"`
	Y   string `json:"y,omitempty"`
	N   string `json:"n,omitempty"`
	E   string `json:"e,omitempty"`
}

func (s *keyState) buildJWKS() ([]byte, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	for kid, pub := range s.verify {
		k, err := publicJWK(pub)
		if err != nil {
			return nil, err
		}
		k.Kid = kid
		set.Keys = append(set.Keys, k)
	}
	return json.Marshal(set)
}

func publicJWK(pub crypto.PublicKey) (jwk, error) {
	b64 := base64.RawURLEncoding.EncodeToString
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		raw, err := k.Bytes() // 0x04 || X || Y, each 32 bytes for P-256
		if err != nil {
			return jwk{}, err
		}
		return jwk{Kty: "EC", Use: "sig", Alg: "ES256", Crv: "P-256", X: b64(raw[1:33]), Y: b64(raw[33:65])}, nil
	case *rsa.PublicKey:
		return jwk{Kty: "RSA", Use: "sig", Alg: "RS256", N: b64(k.N.Bytes()), E: b64(big.NewInt(int64(k.E)).Bytes())}, nil
	}
	return jwk{}, fmt.Errorf("unsupported public key %T", pub)
}

// thumbprint is the RFC 7638 SHA-256 thumbprint of the public key, used as its kid.
func thumbprint(pub crypto.PublicKey) (string, error) {
	k, err := publicJWK(pub)
	if err != nil {
		return "", err
	}
	var canon string
	switch k.Kty {
	case "EC":
		canon = fmt.Sprintf(`{"crv":%q,"kty":"EC","x":%q,"y":%q}`, k.Crv, k.X, k.Y)
	case "RSA":
		canon = fmt.Sprintf(`{"e":%q,"kty":"RSA","n":%q}`, k.E, k.N)
	}
	sum := sha256.Sum256([]byte(canon))
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// JWKSOf returns one JSON Web Key Set holding the public keys of every set given.
func JWKSOf(sets ...*Set) ([]byte, error) {
	var all struct {
		Keys []json.RawMessage `json:"keys"`
	}
	all.Keys = []json.RawMessage{}
	for _, s := range sets {
		var one struct {
			Keys []json.RawMessage `json:"keys"`
		}
		if err := json.Unmarshal(s.JWKS(), &one); err != nil {
			return nil, err
		}
		all.Keys = append(all.Keys, one.Keys...)
	}
	return json.Marshal(all)
}
