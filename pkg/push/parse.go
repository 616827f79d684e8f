package push

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/campus-it/ucs/pkg/platform/keyword"
)

// MaxBodyBytes is the largest push body accepted. A valid body with every
// field at its limit and every character written as a \u escape pair stays
// under 20 KiB, so this leaves room for white space and pretty printing
// while keeping a flood of bodies cheap to reject.
const MaxBodyBytes = 64 << 10

// Limits of the top-level fields, in characters.
const (
	maxUserIDRunes = 64
	maxURLRunes    = 1024
)

// Request is a push body that passed every rule.
type Request struct {
	// UserID is the campus user number of the recipient.
	UserID string
	// Type is the message type.
	Type Type
	// URL is the link target of the message, "" if none.
	URL string
	// Data holds the given data fields of Type, keyed by field name.
	Data map[string]string
	// Time is the time given in the body, in UTC, or the zero Time if the
	// body gave none.
	Time time.Time
}

// Problem is one broken rule: the path of the field (userId, data.content,
// body), what is wrong with it, and the kind of rule, set where the problem
// is found.
type Problem struct {
	Field, Rule string
	kind        RuleKind
}

// RuleKind names the kind of rule a problem broke in a word, for counting
// refusals by rule (the rule label of ucs_push_rejected_total): one of the
// RuleKind constants or the name of a refused character class of package
// keyword (format, private_use, not_a_character).
type RuleKind string

// The kinds of rule.
const (
	RuleKindBody         RuleKind = "body"          // the body as a whole: size, UTF-8, JSON
	RuleKindRequired     RuleKind = "required"      // a required field is absent, null or ""
	RuleKindString       RuleKind = "string"        // a field is not a string
	RuleKindDuplicate    RuleKind = "duplicate"     // a key is given twice
	RuleKindObject       RuleKind = "object"        // data is not an object
	RuleKindUnknownField RuleKind = "unknown_field" // a key that is no field, at the top level or in data
	RuleKindUserID       RuleKind = "user_id"       // userId has other characters
	RuleKindType         RuleKind = "type"          // type names no message type
	RuleKindURL          RuleKind = "url"           // url is not an http or https URL
	RuleKindTime         RuleKind = "time"          // time is not Unix seconds or milliseconds
	RuleKindLength       RuleKind = "length"        // too many characters
	RuleKindBlank        RuleKind = "blank"         // a required data value is blank
	RuleKindLineBreak    RuleKind = "line_break"    // a data value holds a line break
	RuleKindControl      RuleKind = "control"       // a data value holds a control character
	RuleKindEmoji        RuleKind = "emoji"         // a data value holds emoji
	RuleKindKeyword      RuleKind = "keyword"       // a value its template keyword's kind refuses
)

// String returns "Field: Rule".
func (p Problem) String() string { return p.Field + ": " + p.Rule }

// ValidationError is the error of Parse for a bad body. It lists every
// problem of the body in a fixed order: body, userId, type, url, time, data,
// the data fields in the type's order, unknown data keys and unknown
// top-level keys, each of the last two sorted.
type ValidationError struct {
	Problems []Problem
}

// MaxListedProblems bounds the problems an answer lists: a body of
// thousands of unknown keys gets the first ones and a count of the rest, not
// an error larger than itself.
const MaxListedProblems = 20

// Lines returns the problems as "field: rule", at most MaxListedProblems of
// them, followed by "… and N more problems" when there are more.
func (e *ValidationError) Lines() []string {
	n := min(len(e.Problems), MaxListedProblems)
	out := make([]string, n, n+1)
	for i, p := range e.Problems[:n] {
		out[i] = p.String()
	}
	if more := len(e.Problems) - n; more > 0 {
		out = append(out, moreProblems(more))
	}
	return out
}

// Kind is the kind of the first rule the body broke (problems come in a fixed order): the one
// kind a refused push is counted under, so that the counts add up to the pushes refused.
func (e *ValidationError) Kind() RuleKind {
	if len(e.Problems) == 0 {
		return ""
	}
	return e.Problems[0].Kind()
}

func moreProblems(n int) string {
	if n == 1 {
		return "… and 1 more problem"
	}
	return "… and " + strconv.Itoa(n) + " more problems"
}

// Error returns Lines joined with "; ".
func (e *ValidationError) Error() string { return strings.Join(e.Lines(), "; ") }

// Rule texts shared by several fields.
const (
	ruleRequired  = "required"
	ruleString    = "must be a string"
	ruleDuplicate = "duplicate key"
	ruleBlank     = "must not be blank"
	ruleLineBreak = "contains a line break"
	ruleControl   = "contains a control character"
	ruleEmoji     = "contains emoji"
	ruleUserID    = "may contain only letters, digits, '.', '_' and '-'"
	ruleURL       = "must be an absolute http or https URL"
	ruleTime      = "must be Unix seconds (10 digits) or milliseconds (13 digits)"
	ruleUnknown   = "not a field of a push body"
)

// Parse reads a push body and applies every rule of the interface and of
// the messaging platform to it. On success the Request holds copies of the
// body's values: Parse keeps no reference to body itself, so the caller may
// reuse its buffer at once. On failure the error
// is a *ValidationError that lists every problem.
func Parse(body []byte) (Request, error) { return parse(body, nil) }

// parse is Parse, with the keyword rules of p if p is not nil.
func parse(body []byte, p *Parser) (Request, error) {
	if len(body) > MaxBodyBytes {
		return Request{}, bodyProblem("larger than " + strconv.Itoa(MaxBodyBytes) + " bytes")
	}
	if !utf8.Valid(body) {
		return Request{}, bodyProblem("not valid UTF-8")
	}
	// One allocation holds the data members of any type.
	var buf [maxFields]member
	b := bodyReader{members: buf[:0], parser: p}
	if problem := b.read(body); problem != "" {
		if problem == ruleNotJSON {
			problem = TextProblem(body)
		}
		return Request{}, bodyProblem(problem)
	}
	return b.check()
}

// ruleNotJSON is the problem of a body that is not JSON text.
const ruleNotJSON = "not valid JSON"

// TextProblem returns "" if body is one JSON value as this service reads
// JSON text (RFC 8259, UTF-8, at most 10,000 nested containers, no lone
// surrogate escape), and otherwise what is wrong with it: "not valid UTF-8",
// or "not valid JSON", which names a lone surrogate escape and where it is.
// Many JSON readers take such an escape for U+FFFD, so its sender may well
// not expect the refusal. It reads the whole body, so callers use it only to
// explain a refusal.
func TextProblem(body []byte) string {
	if !utf8.Valid(body) {
		return "not valid UTF-8"
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true))
	_, err := dec.ReadValue()
	if err == nil {
		if atEnd(dec) {
			return ""
		}
		return ruleNotJSON
	}
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		if at := se.ByteOffset; at >= 0 && at+6 <= int64(len(body)) && isSurrogateEscape(body[at:at+6]) {
			return fmt.Sprintf("%s: %s at byte %d is a lone surrogate escape, half of a UTF-16 pair, which stands for no character",
				ruleNotJSON, body[at:at+6], at)
		}
	}
	return ruleNotJSON
}

// isSurrogateEscape reports whether e is a \u escape of U+D800 to U+DFFF.
func isSurrogateEscape(e []byte) bool {
	if len(e) != 6 || e[0] != '\\' || e[1] != 'u' {
		return false
	}
	v, err := strconv.ParseUint(string(e[2:]), 16, 16)
	return err == nil && v >= 0xD800 && v <= 0xDFFF
}

func bodyProblem(rule string) error {
	return &ValidationError{Problems: []Problem{{Field: "body", Rule: rule, kind: RuleKindBody}}}
}

// bodyReader holds a push body as read, before any rule but JSON syntax is
// applied, and the problems found while checking it.
type bodyReader struct {
	userID, typ, url, time, data value
	members                      []member // of data, if it is an object
	unknown                      []string // unknown top-level keys
	problems                     []Problem
	parser                       *Parser // keyword rules of the templates; nil: none
}

// Kinds of a JSON value, as the rules need them.
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

// maxDepth is the nesting limit of jsontext (as of encoding/json): deeper
// bodies are not valid JSON to us.
const maxDepth = 10000

// decoder is a Decoder with the reader it reads from; both are reused, as
// a Decoder keeps buffers worth keeping between bodies.
type decoder struct {
	dec  *jsontext.Decoder
	src  bytes.Reader
	text []byte // the strings the rules need, unescaped
}

var decoders = sync.Pool{New: func() any {
	d := &decoder{}
	d.dec = jsontext.NewDecoder(&d.src)
	return d
}}

// read fills b from the JSON text body and returns the problem of the body
// as a whole, or "". The JSON syntax is go-json-experiment's jsontext:
// RFC 8259 with strict UTF-8 (a lone surrogate escape is invalid text), at
// most 10,000 nested containers. Duplicate names are let through to be
// reported field by field.
//
// The strings the rules need are unescaped into one buffer, made a string
// once at the end: a body costs one allocation for all of its text.
func (b *bodyReader) read(body []byte) string {
	d := decoders.Get().(*decoder)
	defer func() {
		d.src.Reset(nil)
		d.text = d.text[:0]
		decoders.Put(d)
	}()
	d.src.Reset(body)
	dec := d.dec
	dec.Reset(&d.src, jsontext.AllowDuplicateNames(true))
	if dec.PeekKind() != '{' {
		if _, err := dec.ReadValue(); err == nil && atEnd(dec) {
			return "must be a JSON object"
		}
		return ruleNotJSON
	}
	var spans [4 + maxFields]span // userId, type, url, time, then data members
	ok := d.object(func(key []byte) bool {
		var dst *value
		i := 0
		switch string(key) {
		case "userId":
			dst, i = &b.userID, 0
		case "type":
			dst, i = &b.typ, 1
		case "url":
			dst, i = &b.url, 2
		case "time":
			dst, i = &b.time, 3
		case "data":
			return b.readData(d, spans[4:])
		default:
			b.unknown = append(b.unknown, string(key))
			return dec.SkipValue() == nil
		}
		v, sp, ok := d.value()
		v.count = dst.count + 1
		*dst, spans[i] = v, sp
		return ok
	})
	if !ok || !atEnd(dec) {
		return ruleNotJSON
	}
	text := string(d.text)
	for i, v := range []*value{&b.userID, &b.typ, &b.url, &b.time} {
		v.str = spans[i].of(text)
	}
	for i := range min(len(b.members), maxFields) {
		b.members[i].val.str = spans[4+i].of(text)
	}
	return ""
}

// fieldNames holds every data field name of every type, so that reading a
// body's data keys costs no allocation.
var fieldNames = func() map[string]string {
	m := map[string]string{}
	for _, t := range Types() {
		for _, f := range t.Fields {
			m[f.Name] = f.Name
		}
	}
	return m
}()

// span is where a decoded string is in the decoder's text buffer.
type span struct{ from, to int }

func (s span) of(text string) string { return text[s.from:s.to] }

// atEnd reports whether nothing but white space is left.
func atEnd(dec *jsontext.Decoder) bool {
	_, err := dec.ReadToken()
	return errors.Is(err, io.EOF)
}

// unquote appends the text of the JSON string v to d.text.
func (d *decoder) unquote(v jsontext.Value) (span, bool) {
	from := len(d.text)
	if raw := v[1 : len(v)-1]; bytes.IndexByte(raw, '\\') < 0 {
		d.text = append(d.text, raw...)
	} else {
		t, err := jsontext.AppendUnquote(d.text, v)
		if err != nil {
			return span{}, false
		}
		d.text = t
	}
	return span{from, len(d.text)}, true
}

// object reads an object, calling member with each name (valid only during
// the call); member reads the value.
func (d *decoder) object(member func(key []byte) bool) bool {
	if t, err := d.dec.ReadToken(); err != nil || t.Kind() != '{' {
		return false
	}
	for d.dec.PeekKind() != '}' {
		v, err := d.dec.ReadValue()
		if err != nil || v.Kind() != '"' {
			return false
		}
		sp, ok := d.unquote(v)
		if !ok || !member(d.text[sp.from:sp.to]) {
			return false
		}
	}
	_, err := d.dec.ReadToken()
	return err == nil
}

// value reads a value: the text of a string or number goes to d.text,
// containers are only noted.
func (d *decoder) value() (value, span, bool) {
	switch k := d.dec.PeekKind(); k {
	case '{', '[':
		v := value{kind: kindObject}
		if k == '[' {
			v.kind = kindArray
		}
		return v, span{}, d.dec.SkipValue() == nil
	}
	raw, err := d.dec.ReadValue()
	if err != nil {
		return value{}, span{}, false
	}
	switch raw.Kind() {
	case 'n':
		return value{kind: kindNull}, span{}, true
	case 't', 'f':
		return value{kind: kindBool}, span{}, true
	case '0':
		from := len(d.text)
		d.text = append(d.text, raw...)
		return value{kind: kindNumber}, span{from, len(d.text)}, true
	case '"':
		sp, ok := d.unquote(raw)
		return value{kind: kindString}, sp, ok
	}
	return value{}, span{}, false
}

func (b *bodyReader) readData(d *decoder, spans []span) bool {
	b.data.count++
	if d.dec.PeekKind() != '{' {
		v, _, ok := d.value()
		b.data.kind = v.kind
		return ok
	}
	b.data.kind = kindObject
	b.members = b.members[:0] // a repeated data key is reported; keep the last
	return d.object(func(key []byte) bool {
		k, known := fieldNames[string(key)]
		if !known {
			k = string(key)
		}
		v, sp, ok := d.value()
		if len(b.members) < len(spans) {
			spans[len(b.members)] = sp
		} else {
			v.str = string(d.text[sp.from:sp.to]) // beyond any type's fields: rare
		}
		b.members = append(b.members, member{k, v})
		return ok
	})
}

func (b *bodyReader) add(field string, kind RuleKind, rule string) {
	b.problems = append(b.problems, Problem{Field: field, Rule: rule, kind: kind})
}

// check applies the rules in the order of the problem list.
func (b *bodyReader) check() (Request, error) {
	var req Request
	req.UserID = b.checkUserID()
	sp := b.checkType()
	if sp != nil {
		req.Type = sp.Type
	}
	req.URL = b.checkURL()
	req.Time = b.checkTime()
	if sp != nil {
		req.Data = b.checkData(sp)
	} else {
		b.checkUntypedData()
	}
	b.checkUnknown()
	if len(b.problems) > 0 {
		return Request{}, &ValidationError{Problems: b.problems}
	}
	return req, nil
}

// scalar applies the rules every top-level string shares and returns the
// string, or ok=false if the field is absent or already reported.
func (b *bodyReader) scalar(name string, v value, required bool) (string, bool) {
	switch {
	case v.count > 1:
		b.add(name, RuleKindDuplicate, ruleDuplicate)
	case v.kind == kindAbsent || v.kind == kindNull || v.kind == kindString && v.str == "":
		if required {
			b.add(name, RuleKindRequired, ruleRequired)
		}
	case v.kind != kindString:
		b.add(name, RuleKindString, ruleString)
	default:
		return v.str, true
	}
	return "", false
}

func (b *bodyReader) checkUserID() string {
	s, ok := b.scalar("userId", b.userID, true)
	if !ok {
		return ""
	}
	good := true
	for i := 0; i < len(s); i++ {
		if !isIDByte(s[i]) {
			good = false
			break
		}
	}
	if n := utf8.RuneCountInString(s); n > maxUserIDRunes {
		b.add("userId", RuleKindLength, tooLong(n, maxUserIDRunes))
	}
	if !good {
		b.add("userId", RuleKindUserID, ruleUserID)
	}
	return s
}

// ValidUserID reports whether s is a campus user number a push may name: 1 to 64 letters,
// digits, '.', '_' and '-'. A binding of any other user number could never be used.
func ValidUserID(s string) bool {
	if s == "" || len(s) > maxUserIDRunes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isIDByte(s[i]) {
			return false
		}
	}
	return true
}

func isIDByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

func (b *bodyReader) checkType() *TypeSpec {
	s, ok := b.scalar("type", b.typ, true)
	if !ok {
		return nil
	}
	sp := spec(s)
	if sp == nil {
		b.add("type", RuleKindType, quote(s, 32)+" is not one of "+typeList)
	}
	return sp
}

func (b *bodyReader) checkURL() string {
	s, ok := b.scalar("url", b.url, false)
	if !ok {
		return ""
	}
	if n := utf8.RuneCountInString(s); n > maxURLRunes {
		b.add("url", RuleKindLength, tooLong(n, maxURLRunes))
	}
	if !validURL(s) {
		b.add("url", RuleKindURL, ruleURL)
	}
	return s
}

func (b *bodyReader) checkTime() time.Time {
	v := b.time
	switch {
	case v.count > 1:
		b.add("time", RuleKindDuplicate, ruleDuplicate)
		return time.Time{}
	case v.kind == kindAbsent || v.kind == kindNull:
		return time.Time{}
	}
	var n int64
	ok := false
	switch v.kind {
	case kindString:
		n, ok = digitTime(v.str)
	case kindNumber:
		n, ok = integral(v.str)
	}
	switch {
	case ok && 1e9 <= n && n <= 9999999999:
		return time.Unix(n, 0).UTC()
	case ok && 1e12 <= n && n <= 9999999999999:
		return time.UnixMilli(n).UTC()
	}
	b.add("time", RuleKindTime, ruleTime)
	return time.Time{}
}

// digitTime parses 10 or 13 ASCII digits, the first not 0.
func digitTime(s string) (int64, bool) {
	if len(s) != 10 && len(s) != 13 || s[0] == '0' {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// integral returns the value of a JSON number literal if it is a whole
// number of at most 13 digits. It works on the decimal digits rather than a
// float64 so that 1700000000.0000000001 is not taken for a whole number; the
// JSON Schema validator decides the same way with exact rationals.
func integral(lit string) (int64, bool) {
	if lit[0] == '-' {
		return 0, false // no valid time is negative
	}
	mant, exp := lit, 0
	if e := strings.IndexAny(lit, "eE"); e >= 0 {
		mant = lit[:e]
		x, neg := lit[e+1:], false
		if x[0] == '+' || x[0] == '-' {
			neg = x[0] == '-'
			x = x[1:]
		}
		for i := 0; i < len(x); i++ {
			if exp < 1<<20 { // beyond that the answer no longer changes
				exp = exp*10 + int(x[i]-'0')
			}
		}
		if neg {
			exp = -exp
		}
	}
	intPart, frac := mant, ""
	if d := strings.IndexByte(mant, '.'); d >= 0 {
		intPart, frac = mant[:d], mant[d+1:]
	}
	// The digits intPart+frac times 10^(exp-len(frac)), walked without
	// joining them: first and last significant digit.
	n := len(intPart) + len(frac)
	at := func(i int) byte {
		if i < len(intPart) {
			return intPart[i]
		}
		return frac[i-len(intPart)]
	}
	first, last := -1, -1
	for i := 0; i < n; i++ {
		if at(i) != '0' {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return 0, false // zero
	}
	scale := exp - len(frac) + (n - 1 - last)
	if scale < 0 || last-first+1+scale > 13 {
		return 0, false
	}
	var v int64
	for i := first; i <= last; i++ {
		v = v*10 + int64(at(i)-'0')
	}
	for ; scale > 0; scale-- {
		v *= 10
	}
	return v, true
}

// checkData applies the rules of type sp to the data object and returns the
// data map, built only if nothing is wrong so far.
func (b *bodyReader) checkData(sp *TypeSpec) map[string]string {
	if !b.checkDataObject() {
		return nil
	}
	// Where each field is in members, or -1; -2 if it occurs twice.
	var at [maxFields]int
	for i := range sp.Fields {
		at[i] = -1
	}
	var unknown []string
	for i, m := range b.members {
		f := sp.field(m.key)
		switch {
		case f < 0:
			unknown = append(unknown, m.key)
		case at[f] == -1:
			at[f] = i
		default:
			at[f] = -2
		}
	}
	var clean [maxFields]bool // values the platform gets with characters replaced or removed
	kinds := b.parser.kindsOf(sp)
	for i := range sp.Fields {
		f := &sp.Fields[i]
		switch at[i] {
		case -1:
			if f.Required {
				b.add("data."+f.Name, RuleKindRequired, ruleRequired)
			}
		case -2:
			b.add("data."+f.Name, RuleKindDuplicate, ruleDuplicate)
		default:
			if b.members[at[i]].val.kind == kindNull {
				// null is not given, as for url and time: an optional field is left out (many
				// JSON writers put null for a member not set), a required one is missing.
				if at[i] = -1; f.Required {
					b.add("data."+f.Name, RuleKindRequired, ruleRequired)
				}
				continue
			}
			n := len(b.problems)
			v := b.members[at[i]].val
			clean[i] = b.checkText(f.Name, v, f)
			if kinds == nil || kinds[i] == nil || len(b.problems) > n {
				continue
			}
			if !f.Required && (v.str == "" || clean[i] && keyword.Clean(v.str) == "") {
				// An optional field given empty is not given: its keyword would reach the
				// platform empty, which no kind takes.
				at[i] = -1
				continue
			}
			b.checkKeyword(f.Name, v.str, clean[i], kinds[i])
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		unknown = slices.Compact(unknown)
		rule := "not a field of type " + string(sp.Type)
		for _, k := range unknown {
			b.add("data."+displayKey(k), RuleKindUnknownField, rule)
		}
	}
	if len(b.problems) > 0 {
		return nil
	}
	data := make(map[string]string, len(b.members))
	for i := range sp.Fields {
		if at[i] >= 0 {
			v := b.members[at[i]].val.str
			if clean[i] {
				v = keyword.Clean(v)
			}
			data[sp.Fields[i].Name] = v
		}
	}
	return data
}

// checkDataObject applies the rules on data itself and reports whether its
// members are worth checking.
func (b *bodyReader) checkDataObject() bool {
	switch {
	case b.data.count > 1:
		b.add("data", RuleKindDuplicate, ruleDuplicate)
	case b.data.kind == kindAbsent || b.data.kind == kindNull:
		b.add("data", RuleKindRequired, ruleRequired)
	case b.data.kind != kindObject:
		b.add("data", RuleKindObject, "must be an object")
	default:
		return true
	}
	return false
}

// checkUntypedData applies the rules that hold whatever the type: data is an
// object of strings free of emoji and control characters.
func (b *bodyReader) checkUntypedData() {
	if !b.checkDataObject() {
		return
	}
	ms := slices.Clone(b.members)
	slices.SortStableFunc(ms, func(x, y member) int { return strings.Compare(x.key, y.key) })
	for i := 0; i < len(ms); {
		j := i + 1
		for j < len(ms) && ms[j].key == ms[i].key {
			j++
		}
		if j > i+1 {
			b.add("data."+displayKey(ms[i].key), RuleKindDuplicate, ruleDuplicate)
		} else {
			b.checkText(displayKey(ms[i].key), ms[i].val, nil)
		}
		i = j
	}
}

// checkText applies the content rules to the value of data key; f is nil
// if the type, and so the field's limits, are unknown. The problem path is
// built only when there is a problem, as this runs for every field. It
// reports whether the value holds characters that are replaced or removed
// before sending (keyword.Clean).
func (b *bodyReader) checkText(key string, v value, f *Field) bool {
	if v.kind != kindString {
		b.add("data."+key, RuleKindString, ruleString)
		return false
	}
	t := inspect(v.str)
	if f != nil && f.Required && t.blank {
		b.add("data."+key, RuleKindBlank, ruleBlank)
	}
	if t.lineBreak {
		b.add("data."+key, RuleKindLineBreak, ruleLineBreak)
	}
	if t.control {
		b.add("data."+key, RuleKindControl, ruleControl)
	}
	// Invisible characters are named by their code point: the sender
	// cannot see which one was meant otherwise.
	for i, r := range t.refused {
		if r >= 0 {
			b.add("data."+key, RuleKind(refusedClasses[i].Name), refusedRule(refusedClasses[i], r))
		}
	}
	if t.emoji {
		b.add("data."+key, RuleKindEmoji, ruleEmoji)
	}
	if f != nil && t.runes > f.MaxRunes {
		b.add("data."+key, RuleKindLength, tooLong(t.runes, f.MaxRunes))
	}
	return t.clean
}

// refusedClasses are the classes of keyword.Classes that the front end
// refuses and reports by code point: all refused classes but line breaks and
// controls, which have rules of their own.
var refusedClasses = func() []keyword.Class {
	var out []keyword.Class
	for _, c := range keyword.Classes() {
		if c.Treatment == keyword.Refuse && c.Name != "line_break" && c.Name != "control" {
			out = append(out, c)
		}
	}
	if len(out) != len(textFacts{}.refused) {
		panic("push: textFacts.refused does not fit the refused classes of package keyword")
	}
	return out
}()

// refusedRule is the rule text for a character r of class c:
// "contains a formatting character (U+202E)".
func refusedRule(c keyword.Class, r rune) string {
	return "contains a " + c.Noun + " (" + fmt.Sprintf("%U", r) + ")"
}

func (b *bodyReader) checkUnknown() {
	if len(b.unknown) == 0 {
		return
	}
	slices.Sort(b.unknown)
	for _, k := range slices.Compact(b.unknown) {
		b.add(displayKey(k), RuleKindUnknownField, ruleUnknown)
	}
}

func tooLong(n, most int) string {
	return strconv.Itoa(n) + " characters, at most " + strconv.Itoa(most)
}

// displayKey returns a key as it appears in a problem: plain if it is a
// harmless name, else quoted and cut, so that no key can inject line breaks
// or megabytes into an error message or a log line.
func displayKey(k string) string {
	if k != "" && len(k) <= 64 {
		plain := true
		for i := 0; i < len(k); i++ {
			if !isIDByte(k[i]) {
				plain = false
				break
			}
		}
		if plain {
			return k
		}
	}
	return quote(k, 64)
}

// quote returns s in Go quoted form, cut to at most n runes.
func quote(s string, n int) string {
	if utf8.RuneCountInString(s) > n {
		i := 0
		for range n {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
		}
		return strconv.Quote(s[:i]) + "…"
	}
	return strconv.Quote(s)
}

// textFacts is what the content rules need to know about a value.
type textFacts struct {
	// runes counts the characters the platform receives: those removed
	// before sending do not count.
	runes int
	// blank: only Unicode White_Space, removed characters and characters that
	// show nothing by themselves (showsNothing), or empty.
	blank                     bool
	lineBreak, control, emoji bool
	// refused holds, per class of refusedClasses, the first character of
	// that class, or -1.
	refused [3]rune
	// clean: some character is replaced or removed before sending.
	clean bool
}

// showsNothing are characters the platform takes that show nothing by themselves,
// so that a required value of them alone (and white space) is blank: the Hangul
// fillers (U+115F, U+1160, U+3164, U+FFA0), the blank Braille pattern U+2800,
// the combining grapheme joiner U+034F, the Khmer inherent vowels U+17B4 and
// U+17B5, the musical null notehead U+1D159, and the variation selectors
// U+180B–U+180D, U+180F, U+FE00–U+FE0E and U+E0100–U+E01EF (U+FE0F is an emoji
// component).
var showsNothing = &unicode.RangeTable{
	R16: []unicode.Range16{
		{Lo: 0x034F, Hi: 0x034F, Stride: 1}, {Lo: 0x115F, Hi: 0x1160, Stride: 1}, {Lo: 0x17B4, Hi: 0x17B5, Stride: 1},
		{Lo: 0x180B, Hi: 0x180D, Stride: 1}, {Lo: 0x180F, Hi: 0x180F, Stride: 1}, {Lo: 0x2800, Hi: 0x2800, Stride: 1}, {Lo: 0x3164, Hi: 0x3164, Stride: 1}, {Lo: 0xFE00, Hi: 0xFE0E, Stride: 1},
		{Lo: 0xFFA0, Hi: 0xFFA0, Stride: 1},
	},
	R32: []unicode.Range32{{Lo: 0x1D159, Hi: 0x1D159, Stride: 1}, {Lo: 0xE0100, Hi: 0xE01EF, Stride: 1}},
}

// inspect walks s once and collects its textFacts. Each character is in at
// most one rule: emoji first (the zero width joiner and tags build emoji),
// then the classes of package keyword.
func inspect(s string) textFacts {
	t := textFacts{blank: true, refused: [3]rune{-1, -1, -1}}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			t.runes++
			i++
			switch {
			case c == ' ':
			case c == '\n' || c == '\r' || c == '\v' || c == '\f':
				t.lineBreak = true
			case c == '\t':
				t.control = true
			case c < 0x20 || c == 0x7F:
				t.control = true
				t.blank = false
			default:
				t.blank = false
			}
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if isEmoji(r) {
			t.runes++
			t.emoji = true
			t.blank = false
			continue
		}
		class := keyword.ClassOf(r)
		if class == nil {
			// Every White_Space character beyond ASCII is in a class.
			t.runes++
			if !unicode.Is(showsNothing, r) {
				t.blank = false
			}
			continue
		}
		switch class.Treatment {
		case keyword.Space:
			t.runes++
			t.clean = true
		case keyword.Remove:
			t.clean = true
		default:
			t.runes++
			switch class.Name {
			case "line_break":
				t.lineBreak = true
			case "control":
				t.control = true
				t.blank = false
			default:
				t.blank = false
				for k := range refusedClasses {
					if refusedClasses[k].Name == class.Name {
						if t.refused[k] < 0 {
							t.refused[k] = r
						}
						break
					}
				}
			}
		}
	}
	return t
}

// validURL reports whether u is an absolute http or https URL with a host,
// in the exact form that the schema's url pattern describes (urlPattern in
// schema_gen_test.go): scheme, a host name (DNS labels or an IPv4 address),
// an optional port of 1 to 5 digits, then an optional path, query or
// fragment without white space or control characters and with well-formed
// percent escapes. User info is refused, as a link that carries a password
// must not be sent to a user's phone, and so are IPv6 literals, which no
// campus link needs and whose syntax a pattern can only approximate, while
// net/url checks it exactly: every accepted URL also parses with net/url.
func validURL(u string) bool {
	if len(u) < 7 || !strings.EqualFold(u[:4], "http") {
		return false
	}
	i := 4
	if u[i] == 's' || u[i] == 'S' {
		i++
	}
	if !strings.HasPrefix(u[i:], "://") {
		return false
	}
	i += 3
	j := i
	for j < len(u) && (isAlnum(u[j]) || u[j] == '.' || u[j] == '-') {
		j++
	}
	if j == i || !isAlnum(u[i]) || !isAlnum(u[j-1]) {
		return false
	}
	i = j
	if i < len(u) && u[i] == ':' {
		j := i + 1
		for j < len(u) && '0' <= u[j] && u[j] <= '9' {
			j++
		}
		if j == i+1 || j-i-1 > 5 {
			return false
		}
		i = j
	}
	if i == len(u) {
		return true
	}
	if u[i] != '/' && u[i] != '?' && u[i] != '#' {
		return false
	}
	for i++; i < len(u); {
		c := u[i]
		switch {
		case c == '%':
			if i+2 >= len(u) || !isHex(u[i+1]) || !isHex(u[i+2]) {
				return false
			}
			i += 3
		case c < utf8.RuneSelf:
			if c <= ' ' || c == 0x7F {
				return false
			}
			i++
		default:
			r, n := utf8.DecodeRuneInString(u[i:])
			if r <= 0xA0 || unicode.Is(unicode.White_Space, r) {
				return false
			}
			i += n
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// Kind is the kind of rule the problem broke.
func (p Problem) Kind() RuleKind { return p.kind }
