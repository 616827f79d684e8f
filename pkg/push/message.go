package push

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// Message is what the api publishes to the queue and the workers deliver:
// an accepted push with its identifier, its sender and when it was accepted.
type Message struct {
	// UcsID is the push identifier returned to the caller (a ULID).
	UcsID string `json:"ucsId"`
	// ClientID is the OAuth client that pushed the message; results are
	// shown only to it.
	ClientID string `json:"clientId"`
	// UserID is the campus user number of the recipient.
	UserID string `json:"userId"`
	// Type is the message type.
	Type Type `json:"type"`
	// URL is the link target, "" if none.
	URL string `json:"url,omitempty"`
	// Data holds the data fields by name.
	Data map[string]string `json:"data"`
	// Time is the time given in the body, in Unix milliseconds, or 0.
	Time int64 `json:"time,omitempty"`
	// Accepted is when the service accepted the push, in Unix milliseconds.
	Accepted int64 `json:"accepted"`
}

// Message returns the queue message of r. The Data map is shared with r,
// not copied: a Request is not used after it has become a Message.
func (r Request) Message(ucsID, clientID string, accepted time.Time) Message {
	m := Message{
		UcsID:    ucsID,
		ClientID: clientID,
		UserID:   r.UserID,
		Type:     r.Type,
		URL:      r.URL,
		Data:     r.Data,
		Accepted: accepted.UnixMilli(),
	}
	if !r.Time.IsZero() {
		m.Time = r.Time.UnixMilli()
	}
	return m
}

// Encode returns m as JSON, byte for byte what json.Marshal returns, but
// without reflection and, for up to 8 data fields, in one allocation,
// because every push passes here.
// The error is always nil; it is there so that a future field that can fail
// to encode does not change the signature.
func (m Message) Encode() ([]byte, error) {
	n := 96 + len(m.UcsID) + len(m.ClientID) + len(m.UserID) + len(m.Type) + len(m.URL)
	var keyBuf [8]string
	keys := keyBuf[:0]
	for k, v := range m.Data {
		keys = append(keys, k)
		n += len(k) + len(v) + 6
	}
	slices.Sort(keys)
	n += n / 8 // room for escapes

	b := make([]byte, 0, n)
	b = append(b, `{"ucsId":`...)
	b = appendString(b, m.UcsID)
	b = append(b, `,"clientId":`...)
	b = appendString(b, m.ClientID)
	b = append(b, `,"userId":`...)
	b = appendString(b, m.UserID)
	b = append(b, `,"type":`...)
	b = appendString(b, string(m.Type))
	if m.URL != "" {
		b = append(b, `,"url":`...)
		b = appendString(b, m.URL)
	}
	b = append(b, `,"data":`...)
	if m.Data == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, m.Data[k])
		}
		b = append(b, '}')
	}
	if m.Time != 0 {
		b = append(b, `,"time":`...)
		b = strconv.AppendInt(b, m.Time, 10)
	}
	b = append(b, `,"accepted":`...)
	b = strconv.AppendInt(b, m.Accepted, 10)
	b = append(b, '}')
	return b, nil
}

// appendString appends s as a JSON string escaped as encoding/json does by
// default: HTML-sensitive characters, U+2028 and U+2029 as \u escapes, and
// invalid UTF-8 as U+FFFD.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	// Valid UTF-8, the usual case, needs a closer look only at 0xE2,
	// the first byte of U+2028 and U+2029.
	valid := utf8.ValidString(s)
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if htmlSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		if valid && c != 0xE2 {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			start = i + size
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			start = i + size
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// htmlSafe reports the ASCII bytes that encoding/json writes as they are.
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// DecodeMessage reads a Message encoded by Encode. It rejects a message
// without ucsId, clientId, userId or type, or with a type that is not one of
// the nine; such a message can never be delivered, so every error of
// DecodeMessage is permanent. Unknown fields are ignored, so that an older
// worker can read what a newer api wrote during a rolling update.
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return Message{}, fmt.Errorf("push: decode message: %w", err)
	}
	switch {
	case m.UcsID == "":
		return Message{}, errors.New("push: decode message: no ucsId")
	case m.ClientID == "":
		return Message{}, errors.New("push: decode message: no clientId")
	case m.UserID == "":
		return Message{}, errors.New("push: decode message: no userId")
	case m.Type == "":
		return Message{}, errors.New("push: decode message: no type")
	case spec(string(m.Type)) == nil:
		return Message{}, errors.New("push: decode message: unknown type " + quote(string(m.Type), 32))
	}
	return m, nil
}
