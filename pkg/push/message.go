package push

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
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
	Time int64 `json:"time,omitzero"`
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

// Encode returns m as JSON: the object encoding/json would write, with the data members in no
// particular order. Every push passes here once (a batch of 1,000, a thousand times), so it
// appends the eight members itself, quoting each string with jsontext.AppendQuote, in a quarter of
// the time of a reflecting encoder and without its allocations (BenchmarkMessageEncode). Invalid
// UTF-8, which a validated push never has, is written as U+FFFD, and a nil Data as null, as
// encoding/json would. Any reader of JSON decodes it (TestEncodeDecodes).
func (m Message) Encode() ([]byte, error) {
	n := 128 + len(m.UcsID) + len(m.ClientID) + len(m.UserID) + len(m.URL)
	for k, v := range m.Data {
		n += len(k) + len(v) + 6
	}
	b := appendString(make([]byte, 0, n), `{"ucsId":`, m.UcsID)
	b = appendString(b, `,"clientId":`, m.ClientID)
	b = appendString(b, `,"userId":`, m.UserID)
	b = appendString(b, `,"type":`, string(m.Type))
	if m.URL != "" {
		b = appendString(b, `,"url":`, m.URL)
	}
	if m.Data == nil {
		b = append(b, `,"data":null`...)
	} else {
		sep := `,"data":{`
		for k, v := range m.Data {
			b = appendString(b, sep, k)
			b = appendString(b, ":", v)
			sep = ","
		}
		if sep != "," {
			b = append(b, sep...)
		}
		b = append(b, '}')
	}
	if m.Time != 0 {
		b = strconv.AppendInt(append(b, `,"time":`...), m.Time, 10)
	}
	b = strconv.AppendInt(append(b, `,"accepted":`...), m.Accepted, 10)
	return append(b, '}'), nil
}

// appendString appends prefix and the JSON string of s. Invalid UTF-8 is written as U+FFFD;
// the error that reports it is dropped, as Encode promises.
func appendString(b []byte, prefix, s string) []byte {
	b, _ = jsontext.AppendQuote(append(b, prefix...), s)
	return b
}

// decodeOptions read a message as encoding/json would (names matched without regard to case,
// the last of repeated names kept, invalid UTF-8 as U+FFFD), in two thirds of its time and a
// quarter of its allocations (BenchmarkDecodeMessage): every delivery passes here.
var decodeOptions = jsonv2.JoinOptions(jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true), jsonv2.MatchCaseInsensitiveNames(true))

// DecodeMessage reads a Message encoded by Encode. It rejects a message
// without ucsId, clientId, userId or type, or with a type that is not one of
// the nine; such a message can never be delivered, so every error of
// DecodeMessage is permanent. Unknown fields are ignored, so that an older
// worker can read what a newer api wrote during a rolling update.
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	if err := jsonv2.Unmarshal(b, &m, decodeOptions); err != nil {
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
