// Package openapi reads the service's OpenAPI description: a JSON tree that keeps the order its
// author wrote (so that operations, properties and examples read top-down, as written),
// bundling of the JSON Schema files the description refers to, and the sections the
// documentation page shows.
package openapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Object is a JSON object with its members in document order.
type Object []Member

// Member is one name and value of an Object.
type Member struct {
	Name  string
	Value any
}

// Number is a JSON number as written.
type Number string

// Get returns the value of the member name, or nil.
func (o Object) Get(name string) any {
	for _, m := range o {
		if m.Name == name {
			return m.Value
		}
	}
	return nil
}

// Set replaces the value of the member name, or appends the member.
func (o *Object) Set(name string, v any) {
	for i := range *o {
		if (*o)[i].Name == name {
			(*o)[i].Value = v
			return
		}
	}
	*o = append(*o, Member{name, v})
}

// Delete removes the member name.
func (o *Object) Delete(name string) {
	for i := range *o {
		if (*o)[i].Name == name {
			*o = append((*o)[:i], (*o)[i+1:]...)
			return
		}
	}
}

// Parse reads JSON into a tree of Object, []any, string, Number, bool and nil.
func Parse(b []byte) (any, error) {
	d := jsontext.NewDecoder(bytes.NewReader(b))
	v, err := decode(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.ReadToken(); !errors.Is(err, io.EOF) {
		return nil, errors.New("openapi: data after the JSON value")
	}
	return v, nil
}

func decode(d *jsontext.Decoder) (any, error) {
	t, err := d.ReadToken()
	if err != nil {
		return nil, err
	}
	switch t.Kind() {
	case '{':
		o := Object{}
		for d.PeekKind() != '}' {
			tok, err := d.ReadToken()
			if err != nil {
				return nil, err
			}
			name := tok.String() // before the next read voids tok
			v, err := decode(d)
			if err != nil {
				return nil, err
			}
			o = append(o, Member{name, v})
		}
		_, err := d.ReadToken()
		return o, err
	case '[':
		a := []any{}
		for d.PeekKind() != ']' {
			v, err := decode(d)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.ReadToken()
		return a, err
	case '"':
		return t.String(), nil
	case '0':
		return Number(t.String()), nil
	case 't', 'f':
		return t.Bool(), nil
	case 'n':
		return nil, nil
	}
	return nil, fmt.Errorf("openapi: unexpected token %v", t)
}

// Marshal writes a tree made by Parse as indented JSON, without escaping < > & (the document
// is read by people too).
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	e := jsontext.NewEncoder(&buf, jsontext.Multiline(true), jsontext.WithIndent("  "), jsontext.EscapeForHTML(false))
	if err := encode(e, v); err != nil {
		return nil, err
	}
	return EscapeUnprintable(buf.Bytes()), nil
}

// EscapeUnprintable rewrites, in the JSON text b, each character that is not visible
// (controls, format characters, unassigned code points and non-characters, spaces other
// than U+0020) as a \uXXXX escape, a surrogate pair beyond U+FFFF. The JSON value stays the
// same, and the long character classes of the push rules, which hold such characters
// themselves, become readable. It also matters to tools: YAML does not allow controls,
// U+FFFE or U+FFFF anywhere in a document, and tools that read a JSON description with a
// YAML parser (libopenapi, redocly) refuse them even inside a string. Outside strings a
// JSON text holds only ASCII, so b is rewritten rune by rune.
func EscapeUnprintable(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if unprintable(r) && !(r == utf8.RuneError && n == 1) {
			if out == nil {
				out = append(make([]byte, 0, len(b)+64), b[:i]...)
			}
			if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
				out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
			} else {
				out = fmt.Appendf(out, `\u%04x`, r)
			}
		} else if out != nil {
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	if out == nil {
		return b
	}
	return out
}

func unprintable(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r':
		return false // JSON's own white space between tokens; inside strings they are escaped
	case r < 0x7F:
		return r < 0x20
	}
	return !unicode.IsGraphic(r) || unicode.Is(unicode.Zs, r) || unicode.Is(unicode.Cf, r)
}

func encode(e *jsontext.Encoder, v any) error {
	switch t := v.(type) {
	case Object:
		if err := e.WriteToken(jsontext.BeginObject); err != nil {
			return err
		}
		for _, m := range t {
			if err := e.WriteToken(jsontext.String(m.Name)); err != nil {
				return err
			}
			if err := encode(e, m.Value); err != nil {
				return err
			}
		}
		return e.WriteToken(jsontext.EndObject)
	case []any:
		if err := e.WriteToken(jsontext.BeginArray); err != nil {
			return err
		}
		for _, x := range t {
			if err := encode(e, x); err != nil {
				return err
			}
		}
		return e.WriteToken(jsontext.EndArray)
	case string:
		return e.WriteToken(jsontext.String(t))
	case Number:
		return e.WriteValue(jsontext.Value(t))
	case bool:
		return e.WriteToken(jsontext.Bool(t))
	case nil:
		return e.WriteToken(jsontext.Null)
	}
	return fmt.Errorf("openapi: cannot write %T", v)
}
