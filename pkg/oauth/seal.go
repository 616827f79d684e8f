package oauth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// Sealer encrypts and authenticates small values (AES-256-GCM) so that state can travel with
// the browser instead of being stored: an authorization request no one has signed in to yet
// costs the service no storage at all.
type Sealer struct {
	aead cipher.AEAD
	// purpose is bound into every sealed value, so a value sealed for one use opens for no other.
	purpose []byte
}

// NewSealer returns a sealer with a 32-byte key (shared by every replica) for one purpose.
func NewSealer(key []byte, purpose string) (*Sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("sealing key: %d bytes, want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead, purpose: []byte(purpose)}, nil
}

// NewSealingKey returns a random 32-byte key.
func NewSealingKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

// Seal returns v as JSON, encrypted and authenticated, in base64url.
func (s *Sealer) Seal(v any) (string, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plain, s.purpose)), nil
}

// errUnsealed is any sealed value that does not open: altered, sealed with another key or for
// another purpose, or not sealed at all.
var errUnsealed = errors.New("not a sealed value of this service")

// Open decrypts a value of Seal into v.
func (s *Sealer) Open(sealed string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(sealed)
	if err != nil || len(b) < s.aead.NonceSize()+s.aead.Overhead() {
		return errUnsealed
	}
	n := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, b[:n], b[n:], s.purpose)
	if err != nil {
		return errUnsealed
	}
	return json.Unmarshal(plain, v)
}
