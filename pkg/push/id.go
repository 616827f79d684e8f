package push

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
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
	return generate(now, "NewID", func(uint64) (string, bool) {
		var s [ulid.EncodedSize]byte
		_ = ids.id.MarshalTextTo(s[:]) // cannot fail: s has the size
		return string(s[:]), true
	})
}

// generate makes the next id of the generator for now's millisecond in ids.id, with ids
// locked, and returns what use makes of it; use answers false when that millisecond has no
// room left, and the next one is borrowed, which keeps the order.
func generate[T any](now time.Time, name string, use func(ms uint64) (T, bool)) T {
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
			if v, ok := use(ms); ok {
				return v
			}
			err = ulid.ErrMonotonicOverflow
		}
		if !errors.Is(err, ulid.ErrMonotonicOverflow) || ms == ulid.MaxTime() {
			// crypto/rand does not fail on supported systems, and a
			// clock in the year 10889 is not one to trust: either is
			// a broken machine, not a condition to handle.
			panic("push: " + name + ": " + err.Error())
		}
		// The random part ran over its 80 bits (about once in 2^48
		// IDs of one millisecond): borrow the next millisecond.
		ms++
	}
}

// BlockBits is how many low bits of a ucsId number the pushes of one block (NewBlock): the
// last four characters of its text.
const BlockBits = 20

// MaxBlock is the most ucsIds one block holds.
const MaxBlock = 1 << BlockBits

// blockChars is how many characters of a ucsId name its block; the rest is its index.
const blockChars = ulid.EncodedSize - BlockBits/5

// NewBlock returns n new ucsIds (1 to MaxBlock) for pushes accepted together at now: they
// share all but their last four characters (the block, BlockOf), which number them 0 to n-1,
// so that what holds them together can be found from any one of them. Like NewID's, they sort
// by time and after every ucsId this process made before, and every later one sorts after
// them. They are not guessable from outside the block (its 60 random bits come from
// crypto/rand), but each is from the others: a block must hold the pushes of one client only.
func NewBlock(now time.Time, n int) []string {
	if n < 1 || n > MaxBlock {
		panic("push: NewBlock: n out of range")
	}
	return generate(now, "NewBlock", func(ms uint64) ([]string, bool) {
		// The block starts at the first multiple of MaxBlock above the id just made, so
		// that it holds nothing made before; the generator is then moved past its end, so
		// that it holds nothing made after.
		hi := binary.BigEndian.Uint16(ids.id[6:8])
		lo := binary.BigEndian.Uint64(ids.id[8:16])
		lo = lo&^(MaxBlock-1) + MaxBlock
		if lo == 0 {
			hi++
		}
		if hi == 0 && lo == 0 {
			return nil, false
		}
		return block(ms, hi, lo, n), true
	})
}

// block makes the ids of the block starting at (hi, lo) in millisecond ms, and moves the
// generator past its end. Called with ids locked.
func block(ms uint64, hi uint16, lo uint64, n int) []string {
	var base ulid.ULID
	_ = base.SetTime(ms) // ms was accepted by NewBlock
	binary.BigEndian.PutUint16(base[6:8], hi)
	binary.BigEndian.PutUint64(base[8:16], lo)
	last := base
	binary.BigEndian.PutUint64(last[8:16], lo|(MaxBlock-1))
	for {
		// The generator's increments are random and below 2^32, so this takes one or two
		// rounds; once its random part runs out in this millisecond, the next id borrows
		// the next one (NewID), which sorts after the block anyway.
		if err := ids.entropy.MonotonicRead(ms, ids.id[6:]); err != nil || bytes.Compare(ids.id[6:], last[6:]) > 0 {
			break
		}
	}
	out := make([]string, n)
	var s [ulid.EncodedSize]byte
	for i := range out {
		binary.BigEndian.PutUint64(base[8:16], lo+uint64(i))
		_ = base.MarshalTextTo(s[:])
		out[i] = string(s[:])
	}
	return out
}

// BlockOf returns the block a ucsId of NewBlock belongs to: its first 22 characters. Any other
// ucsId also has one, which names no block.
func BlockOf(ucsID string) string {
	if len(ucsID) != ulid.EncodedSize {
		return ""
	}
	return ucsID[:blockChars]
}

// BlockIndex returns the index of a ucsId in its block (its last four characters), or -1 for
// a text that is not a valid ucsId.
func BlockIndex(ucsID string) int {
	if !ValidID(ucsID) {
		return -1
	}
	var id ulid.ULID
	if err := id.UnmarshalText([]byte(ucsID)); err != nil {
		return -1
	}
	return int(binary.BigEndian.Uint32(id[12:16]) & (MaxBlock - 1))
}

// BlockID returns the ucsId with index i (0 to MaxBlock-1) in the block named block (BlockOf
// of any of its ucsIds), or "" when block names none.
func BlockID(block string, i int) string {
	if len(block) != blockChars || i < 0 || i >= MaxBlock {
		return ""
	}
	s := block + "0000"
	var id ulid.ULID
	if !ValidID(s) || id.UnmarshalText([]byte(s)) != nil {
		return ""
	}
	binary.BigEndian.PutUint32(id[12:16], binary.BigEndian.Uint32(id[12:16])|uint32(i))
	return id.String()
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
