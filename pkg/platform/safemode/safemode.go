// Package safemode is the messaging platform's message encryption ("safe mode") of the event
// pushes it makes to an official account's callback address, as the platform documents it:
//
//   - the account's EncodingAESKey is 43 characters; the AES-256 key is base64(EncodingAESKey+"=")
//     and the CBC initialisation vector is the key's first 16 bytes;
//   - the plaintext is 16 random bytes, the message's length (4 bytes, big-endian), the message,
//     then the account's appid, padded with PKCS#7 to a multiple of 32 bytes;
//   - the body is <xml><ToUserName/><Encrypt/></xml>, Encrypt the base64 of the ciphertext;
//   - the query carries msg_signature, the hex SHA-1 of the token, timestamp, nonce and Encrypt,
//     sorted and joined, so that the signature covers the body (plain mode's signature covers
//     the query alone).
//
// Both the front end (which decrypts) and the platform simulator (which encrypts) use it.
package safemode

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// KeyLen is the length of an EncodingAESKey.
const KeyLen = 43

// blockPad is the block size of the documented PKCS#7 padding (not AES's 16 bytes).
const blockPad = 32

// Errors of Decrypt. ErrAppID is a message that decrypts but was made for another account.
var (
	ErrMalformed = errors.New("encrypted message malformed")
	ErrAppID     = errors.New("encrypted message is for another appid")
)

// ParseKey checks an EncodingAESKey (43 letters and digits, as the platform generates them) and
// returns the 32-byte AES key it encodes.
func ParseKey(encodingAESKey string) ([]byte, error) {
	if len(encodingAESKey) != KeyLen {
		return nil, fmt.Errorf("an EncodingAESKey is %d characters, not %d", KeyLen, len(encodingAESKey))
	}
	for i := 0; i < len(encodingAESKey); i++ {
		if ch := encodingAESKey[i]; !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9') {
			return nil, errors.New("an EncodingAESKey is made of letters and digits only")
		}
	}
	// Not Strict: the platform's own sample code ignores the unused low bits of the last
	// character, so keys whose bits are not zero there are valid keys.
	key, err := base64.StdEncoding.DecodeString(encodingAESKey + "=")
	if err != nil || len(key) != 32 {
		return nil, errors.New("an EncodingAESKey must decode to 32 bytes")
	}
	return key, nil
}

// Cipher encrypts and decrypts the messages of one account. It is safe for concurrent use.
type Cipher struct {
	block cipher.Block
	iv    []byte
	appID []byte
}

// New returns the Cipher of the account appID with the given EncodingAESKey.
func New(encodingAESKey, appID string) (*Cipher, error) {
	key, err := ParseKey(encodingAESKey)
	if err != nil {
		return nil, err
	}
	if appID == "" {
		return nil, errors.New("safe mode needs the account's appid")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return &Cipher{block: block, iv: key[:aes.BlockSize], appID: []byte(appID)}, nil
}

// Encrypt returns the Encrypt value of msg: the base64 of its ciphertext.
func (c *Cipher) Encrypt(msg []byte) (string, error) {
	n := 16 + 4 + len(msg) + len(c.appID)
	pad := blockPad - n%blockPad // 1 to 32: a whole block of padding when n fits exactly
	plain := make([]byte, n+pad)
	if _, err := rand.Read(plain[:16]); err != nil {
		return "", err
	}
	binary.BigEndian.PutUint32(plain[16:20], uint32(len(msg)))
	copy(plain[20:], msg)
	copy(plain[20+len(msg):], c.appID)
	for i := n; i < len(plain); i++ {
		plain[i] = byte(pad)
	}
	cipher.NewCBCEncrypter(c.block, c.iv).CryptBlocks(plain, plain)
	return base64.StdEncoding.EncodeToString(plain), nil
}

// Decrypt returns the message of an Encrypt value, after checking that it was made for this
// account's appid (ErrAppID otherwise). Anything that is not a well-formed ciphertext is
// ErrMalformed. Check the value's msg_signature first: decrypting an unsigned value tells
// an attacker nothing, but does work for them.
func (c *Cipher) Decrypt(encrypted string) ([]byte, error) {
	data, err := base64.StdEncoding.DecodeString(encrypted)
	if err != nil || len(data) == 0 || len(data)%aes.BlockSize != 0 {
		return nil, ErrMalformed
	}
	cipher.NewCBCDecrypter(c.block, c.iv).CryptBlocks(data, data)
	pad := int(data[len(data)-1])
	if pad < 1 || pad > blockPad || pad > len(data) {
		return nil, ErrMalformed
	}
	for _, b := range data[len(data)-pad:] {
		if int(b) != pad {
			return nil, ErrMalformed
		}
	}
	data = data[:len(data)-pad]
	if len(data) < 20 {
		return nil, ErrMalformed
	}
	n := binary.BigEndian.Uint32(data[16:20])
	if uint64(n) > uint64(len(data)-20) {
		return nil, ErrMalformed
	}
	msg, appID := data[20:20+n], data[20+n:]
	if !bytes.Equal(appID, c.appID) {
		return nil, ErrAppID
	}
	return msg, nil
}

// Signature is plain mode's signature of a callback (and of the address check in either mode):
// the hex SHA-1 of token, timestamp and nonce, sorted and joined.
func Signature(token, timestamp, nonce string) string {
	return sign(token, timestamp, nonce)
}

// MsgSignature is safe mode's signature of a callback: the hex SHA-1 of token, timestamp, nonce
// and the body's Encrypt value, sorted and joined.
func MsgSignature(token, timestamp, nonce, encrypt string) string {
	return sign(token, timestamp, nonce, encrypt)
}

func sign(parts ...string) string {
	sort.Strings(parts)
	sum := sha1.Sum([]byte(strings.Join(parts, "")))
	return hex.EncodeToString(sum[:])
}

// SameSignature compares a signature as received (either case of hex) with the expected one in
// constant time.
func SameSignature(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(strings.ToLower(got)), []byte(want)) == 1
}

// Envelope is the body of an encrypted push.
type Envelope struct {
	XMLName    xml.Name `xml:"xml"`
	ToUserName string   `xml:"ToUserName"`
	Encrypt    string   `xml:"Encrypt"`
}

// Seal encrypts msg and returns the body of its push and its msg_signature.
func (c *Cipher) Seal(token, timestamp, nonce, toUserName string, msg []byte) (body []byte, msgSignature string, err error) {
	enc, err := c.Encrypt(msg)
	if err != nil {
		return nil, "", err
	}
	body, err = xml.Marshal(Envelope{ToUserName: toUserName, Encrypt: enc})
	if err != nil {
		return nil, "", err
	}
	return body, MsgSignature(token, timestamp, nonce, enc), nil
}
