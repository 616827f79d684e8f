package push

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is a small JSON reader made for push bodies. encoding/json would
// do, but decoding into a map of raw messages costs a dozen allocations and
// several microseconds per request, and it cannot report duplicate keys.
// The reader accepts exactly what encoding/json accepts (RFC 8259, at most
// maxDepth nested containers) and decodes strings the same way, including
// its treatment of lone surrogate escapes; FuzzParse checks both claims
// against encoding/json.

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// Kinds of a JSON value, as kept by the reader.
const (
	kindAbsent byte = iota
	kindNull
	kindBool
	kindNumber
	kindString
	kindObject
	kindArray
)

// value is a JSON value as far as the rules need it: its kind, the decoded
// text of a string, the literal of a number, and how often its key occurred.
type value struct {
	kind  byte
	count int
	str   string
}

// member is a key and value of the data object.
type member struct {
	key string
	val value
}

// reader walks a JSON text held in a string. Decoded strings without escapes
// are substrings of it, so they cost no allocation.
type reader struct {
	s string
	i int
}

func (r *reader) ws() {
	for r.i < len(r.s) {
		switch r.s[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// end reports whether only white space is left.
func (r *reader) end() bool {
	r.ws()
	return r.i == len(r.s)
}

// peek returns the next byte, or 0 at the end.
func (r *reader) peek() byte {
	if r.i < len(r.s) {
		return r.s[r.i]
	}
	return 0
}

// expect consumes c, after white space, and reports whether it was there.
func (r *reader) expect(c byte) bool {
	r.ws()
	if r.peek() != c {
		return false
	}
	r.i++
	r.ws()
	return true
}

// str reads the string that starts at r.i and returns its decoded text.
func (r *reader) str() (string, bool) {
	start := r.i + 1
	for i := start; i < len(r.s); i++ {
		switch c := r.s[i]; {
		case c == '"':
			r.i = i + 1
			return r.s[start:i], true
		case c == '\\':
			return r.strEscaped(start, i)
		case c < 0x20:
			return "", false
		}
	}
	return "", false
}

// strEscaped finishes a string whose first escape is at i.
func (r *reader) strEscaped(start, i int) (string, bool) {
	b := make([]byte, 0, i-start+16)
	b = append(b, r.s[start:i]...)
	for i < len(r.s) {
		c := r.s[i]
		switch {
		case c == '"':
			r.i = i + 1
			return string(b), true
		case c < 0x20:
			return "", false
		case c != '\\':
			b = append(b, c)
			i++
			continue
		}
		if i+1 >= len(r.s) {
			return "", false
		}
		e := r.s[i+1]
		i += 2
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			c1, ok := hex4(r.s, i)
			if !ok {
				return "", false
			}
			i += 4
			if utf16.IsSurrogate(c1) {
				// As encoding/json: a valid pair is one rune, anything
				// else makes this escape U+FFFD and leaves the next
				// escape to be read on its own.
				if i+6 <= len(r.s) && r.s[i] == '\\' && r.s[i+1] == 'u' {
					if c2, ok := hex4(r.s, i+2); ok {
						if d := utf16.DecodeRune(c1, c2); d != utf8.RuneError {
							b = utf8.AppendRune(b, d)
							i += 6
							continue
						}
					}
				}
				c1 = utf8.RuneError
			}
			b = utf8.AppendRune(b, c1)
		default:
			return "", false
		}
	}
	return "", false
}

func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[i : i+4]) {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// skipStr checks the string that starts at r.i without decoding it.
func (r *reader) skipStr() bool {
	for i := r.i + 1; i < len(r.s); i++ {
		switch c := r.s[i]; {
		case c == '"':
			r.i = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if i+1 >= len(r.s) {
				return false
			}
			switch r.s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if _, ok := hex4(r.s, i+2); !ok {
					return false
				}
				i += 5
			default:
				return false
			}
		}
	}
	return false
}

// num reads a number and returns its literal.
func (r *reader) num() (string, bool) {
	s, i := r.s, r.i
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		i = digits(s, i)
	default:
		return "", false
	}
	if i < len(s) && s[i] == '.' {
		j := digits(s, i+1)
		if j == i+1 {
			return "", false
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digits(s, i)
		if j == i {
			return "", false
		}
		i = j
	}
	lit := s[r.i:i]
	r.i = i
	return lit, true
}

func digits(s string, i int) int {
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return i
}

// literal consumes word (true, false or null).
func (r *reader) literal(word string) bool {
	if !strings.HasPrefix(r.s[r.i:], word) {
		return false
	}
	r.i += len(word)
	return true
}

// value reads any value; depth is the number of containers around it.
// Strings are decoded and numbers keep their literal; containers are only
// checked.
func (r *reader) value(depth int) (value, bool) {
	switch r.peek() {
	case '"':
		s, ok := r.str()
		return value{kind: kindString, str: s}, ok
	case 'n':
		return value{kind: kindNull}, r.literal("null")
	case 't':
		return value{kind: kindBool}, r.literal("true")
	case 'f':
		return value{kind: kindBool}, r.literal("false")
	case '{':
		return value{kind: kindObject}, r.skip(depth)
	case '[':
		return value{kind: kindArray}, r.skip(depth)
	}
	lit, ok := r.num()
	return value{kind: kindNumber, str: lit}, ok
}

// skip checks the value at r.i and moves past it.
func (r *reader) skip(depth int) bool {
	switch r.peek() {
	case '"':
		return r.skipStr()
	case '{':
		if depth >= maxDepth {
			return false
		}
		r.i++
		r.ws()
		if r.peek() == '}' {
			r.i++
			return true
		}
		for {
			if r.peek() != '"' || !r.skipStr() || !r.expect(':') || !r.skip(depth+1) {
				return false
			}
			r.ws()
			switch r.peek() {
			case ',':
				r.i++
				r.ws()
			case '}':
				r.i++
				return true
			default:
				return false
			}
		}
	case '[':
		if depth >= maxDepth {
			return false
		}
		r.i++
		r.ws()
		if r.peek() == ']' {
			r.i++
			return true
		}
		for {
			if !r.skip(depth + 1) {
				return false
			}
			r.ws()
			switch r.peek() {
			case ',':
				r.i++
				r.ws()
			case ']':
				r.i++
				return true
			default:
				return false
			}
		}
	}
	_, ok := r.value(depth)
	return ok
}

// object reads the members of the object at r.i, calling f with each key;
// f reads the value (r.i is at its first byte) and reports success.
func (r *reader) object(f func(key string) bool) bool {
	r.i++ // '{'
	r.ws()
	if r.peek() == '}' {
		r.i++
		return true
	}
	for {
		if r.peek() != '"' {
			return false
		}
		key, ok := r.str()
		if !ok || !r.expect(':') || !f(key) {
			return false
		}
		r.ws()
		switch r.peek() {
		case ',':
			r.i++
			r.ws()
		case '}':
			r.i++
			return true
		default:
			return false
		}
	}
}
