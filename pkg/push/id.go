package push

import (
	"crypto/rand"
	"errors"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// ids is the one ucsId generator of the process. It is package state on
// purpose: monotonic order within a millisecond holds only among the IDs of
// one generator, so every caller must share it. The entropy is crypto/rand,
// read through the buffered reader of ulid.Monotonic: IDs are handed to
// clients and used to look up results, so they must not be guessable from
// one another, which math/rand (ulid's default) does not ensure.
var ids = struct {
	sync.Mutex
	entropy *ulid.MonotonicEntropy
	id      ulid.ULID // scratch, here so that it does not escape per call
}{entropy: ulid.Monotonic(rand.Reader, 0)}

// NewID returns a new ucsId for a push accepted at now: a ULID of 26
// characters whose first 10 encode now in milliseconds, so IDs sort by
// time. Within one millisecond, IDs of this process increase strictly (the
// 80 random bits are incremented by a random amount), and IDs are unique
// with overwhelming probability across processes. The random part comes
// from crypto/rand. NewID is safe for concurrent use. A now before 1970 is
// taken as 1970.
func NewID(now time.Time) string {
	ms := uint64(0)
	if t := now.UnixMilli(); t > 0 {
		ms = min(uint64(t), ulid.MaxTime())
	}
	ids.Lock()
	defer ids.Unlock()
	for {
		err := ids.id.SetTime(ms)
		if err == nil {
			err = ids.entropy.MonotonicRead(ms, ids.id[6:])
		}
		if err == nil {
			var s [ulid.EncodedSize]byte
			_ = ids.id.MarshalTextTo(s[:]) // cannot fail: s has the size
			return string(s[:])
		}
		if !errors.Is(err, ulid.ErrMonotonicOverflow) || ms == ulid.MaxTime() {
			// crypto/rand does not fail on supported systems, and a clock in the year
			// 10889 is not one to trust: either is a broken machine, not a condition to
			// handle.
			panic("push: NewID: " + err.Error())
		}
		// The random part ran over its 80 bits (about once in 2^48 IDs of one
		// millisecond): borrow the next millisecond, which keeps the order.
		ms++
	}
}

// ValidID reports whether s is a ULID in the canonical form NewID returns:
// 26 characters of Crockford's base 32 in upper case, the first at most 7.
// Lower case is refused so that a key from a lookup path matches the stored
// ucsId byte for byte.
func ValidID(s string) bool {
	if len(s) != ulid.EncodedSize || s[0] > '7' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
		case 'A' <= c && c <= 'Z' && c != 'I' && c != 'L' && c != 'O' && c != 'U':
		default:
			return false
		}
	}
	return true
}
