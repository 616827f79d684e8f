package platform

import (
	"unicode/utf8"
)

// appendSendBody appends the JSON body of the template send endpoint for m:
//
//	{"touser":…,"template_id":…,"url":…,"client_msg_id":…,"data":{"thing1":{"value":…}}}
//
// It is written by hand because it is built for every message a worker
// sends, and encoding/json would need an intermediate map of structs.
func appendSendBody(b []byte, m *TemplateMessage) []byte {
	b = append(b, `{"touser":`...)
	b = appendJSONString(b, m.ToUser)
	b = append(b, `,"template_id":`...)
	b = appendJSONString(b, m.TemplateID)
	if m.URL != "" {
		b = append(b, `,"url":`...)
		b = appendJSONString(b, m.URL)
	}
	if m.ClientMsgID != "" {
		b = append(b, `,"client_msg_id":`...)
		b = appendJSONString(b, m.ClientMsgID)
	}
	b = append(b, `,"data":{`...)
	first := true
	for k, v := range m.Data {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONString(b, k)
		b = append(b, `:{"value":`...)
		b = appendJSONString(b, v)
		b = append(b, '}')
	}
	return append(b, "}}"...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// as encoding/json does, and U+2028/U+2029 are escaped so the body is also
// valid JavaScript.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
