package push

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/campus-it/ucs/pkg/openapi"
	"github.com/campus-it/ucs/pkg/platform/keyword"
	"github.com/campus-it/ucs/schemas"
)

// schemas/push.schema.json is generated here from the same tables Parse
// uses (types, emoji ranges, white space), so that its long character
// classes cannot drift from the Go rules. Regenerate it after changing a
// rule with:
//
//	go test ./pkg/push -run TestPushSchemaUpToDate -update
var update = flag.Bool("update", false, "rewrite schemas/push.schema.json from the rules in this package")

const schemaFile = "../../schemas/push.schema.json"

func TestPushSchemaUpToDate(t *testing.T) {
	want := generatePushSchema()
	if *update {
		if err := os.WriteFile(schemaFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
		// The embedded copy is the one compiled into this test binary;
		// the next run sees the new file.
		return
	}
	if got := schemas.Push(); !bytes.Equal(got, want) {
		t.Fatalf("schemas/push.schema.json does not match the rules of package push; " +
			"run: go test ./pkg/push -run TestPushSchemaUpToDate -update")
	}
}

// obj is a JSON object that keeps its keys in the order written, so that
// the schema reads top-down like the rules.
type obj []kv

type kv struct {
	k string
	v any
}

func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := encodeNoHTML(&b, e.k); err != nil {
			return nil, err
		}
		b.WriteByte(':')
		if err := encodeNoHTML(&b, e.v); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func encodeNoHTML(b *bytes.Buffer, v any) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	return nil
}

// classOf writes ranges as the inside of a character class made of the
// characters themselves (the JSON text escapes the controls among them),
// never \x{…} or \u{…}: ECMA-262 with the u flag (ajv, redocly, browsers),
// RE2 (Go) and Python's re read a literal character the same way, while
// each refuses one of the escape forms. The four characters that mean
// something inside a class are escaped with a backslash, which all three
// read as the character itself.
func classOf(rs []runeRange) string {
	var b strings.Builder
	lit := func(r rune) {
		switch r {
		case '\\', ']', '[', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	for _, r := range rs {
		lit(r.lo)
		if r.hi > r.lo {
			b.WriteByte('-')
			lit(r.hi)
		}
	}
	return b.String()
}

// runeRange is an inclusive range of code points: the schema writes its
// character classes as ranges.
type runeRange struct{ lo, hi rune }

// mergeRanges returns the union of the tables, sorted, with adjacent ranges
// joined, so that a class names each range once.
func mergeRanges(tables ...[]runeRange) []runeRange {
	var all []runeRange
	for _, t := range tables {
		all = append(all, t...)
	}
	slices.SortFunc(all, func(a, b runeRange) int { return int(a.lo - b.lo) })
	var out []runeRange
	for _, r := range all {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// tableRanges returns the code points of t as ranges.
func tableRanges(t *unicode.RangeTable) []runeRange {
	var out []runeRange
	add := func(lo, hi, stride rune) {
		if stride == 1 {
			out = append(out, runeRange{lo, hi})
			return
		}
		for r := lo; r <= hi; r += stride {
			out = append(out, runeRange{r, r})
		}
	}
	for _, r := range t.R16 {
		add(rune(r.Lo), rune(r.Hi), rune(r.Stride))
	}
	for _, r := range t.R32 {
		add(rune(r.Lo), rune(r.Hi), rune(r.Stride))
	}
	return mergeRanges(out)
}

// The character sets of the rules.
var (
	// refusedChars are the characters of the classes of package keyword
	// that the front end refuses (line breaks, controls, formatting,
	// private use, not characters), less the surrogates, which no valid
	// string holds and RE2 cannot name.
	refusedChars = subtractSurrogates(keywordRanges(keyword.Refuse))
	// removedChars are dropped before sending and count for nothing.
	removedChars = keywordRanges(keyword.Remove)
	// whiteSpace is what makes a value blank (unicode.IsSpace).
	whiteSpace = tableRanges(unicode.White_Space)
	// urlExcluded may not occur in a URL: controls and white space.
	urlExcluded = mergeRanges([]runeRange{{0x00, 0x20}, {0x7F, 0xA0}}, whiteSpace)
)

// Patterns of the schema, in the syntax that ECMA-262 (u flag), RE2 and
// Python's re share: literal characters, classes, (?:…), bounded
// repetition, ^ and $ (TestSchemaPatternsPortable checks the first two).
var (
	textPattern    = `^[^` + classOf(mergeRanges(refusedChars, tableRanges(emojiTable))) + `]*$`
	nonBlank       = `[^` + classOf(mergeRanges(whiteSpace, removedChars, tableRanges(showsNothing))) + `]`
	userIDPattern  = fmt.Sprintf(`^[A-Za-z0-9._-]{1,%d}$`, maxUserIDRunes)
	timeDigits     = `^[1-9][0-9]{9}(?:[0-9]{3})?$`
	urlPattern     = `^$|^[hH][tT][tT][pP][sS]?://` + urlHost + `(?::[0-9]{1,5})?` + urlRest + `$`
	urlHost        = `[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?`
	urlRest        = `(?:[/?#](?:[^` + classOf(urlExcluded) + `%]|%[0-9A-Fa-f]{2})*)?`
	schemaTypeList = func() []string {
		var out []string
		for _, t := range typeTable {
			out = append(out, string(t.Type))
		}
		return out
	}()
)

// noLineFeed refuses a line feed anywhere in a string. Every pattern above
// refuses one already, but Python's re lets $ match before a final line
// feed, so Python validators (jsonschema) would accept "value\n"; this
// unanchored pattern reads the same in all three dialects.
var noLineFeed = obj{
	{"$comment", "Python's re lets $ match before a final line feed: this keeps Python validators in agreement."},
	{"type", "string"}, // a null url or time is not a string with a line feed
	{"pattern", "\n"},
}

// keywordRanges are the ranges of the classes of package keyword with
// treatment t.
func keywordRanges(t keyword.Treatment) []runeRange {
	var out []runeRange
	for _, c := range keyword.Classes() {
		if c.Treatment == t {
			out = append(out, tableRanges(c.Table)...)
		}
	}
	return mergeRanges(out)
}

func subtractSurrogates(rs []runeRange) []runeRange {
	var out []runeRange
	for _, r := range rs {
		if r.lo < 0xD800 {
			out = append(out, runeRange{r.lo, min(r.hi, 0xD7FF)})
		}
		if r.hi > 0xDFFF {
			out = append(out, runeRange{max(r.lo, 0xE000), r.hi})
		}
	}
	return out
}

// countPattern matches a value of at most n characters, not counting those
// removed before sending.
func countPattern(n int) string {
	r := classOf(removedChars)
	return fmt.Sprintf(`^[%s]*(?:[^%s][%s]*){0,%d}$`, r, r, r, n)
}

func generatePushSchema() []byte {
	var allOf []any
	defs := obj{
		{"text", obj{
			{"description", "A data value: a string without emoji, line breaks, control or formatting characters (bidirectional controls among them), private-use characters or code points that are not characters (the platform strips emoji and refuses the others). " +
				"Spaces other than U+0020 are sent as U+0020; soft hyphens, zero width spaces, word joiners and byte order marks are removed before sending and not counted."},
			{"type", "string"},
			{"pattern", textPattern},
			{"not", noLineFeed},
		}},
		{"mainItem", obj{
			{"description", fmt.Sprintf("A main content item: required, not blank, at most %d characters (removed characters not counted).", mainItemMaxRunes)},
			{"$ref", "#/$defs/text"},
			{"type", "string"}, // beside each pattern, for validators in strict mode (AJV)
			{"pattern", nonBlank},
			{"allOf", []any{obj{{"type", "string"}, {"pattern", countPattern(mainItemMaxRunes)}}}},
		}},
		{"extraItem", obj{
			{"description", fmt.Sprintf("Header or remark: optional, at most %d characters (removed characters not counted); the platform no longer shows them. null means not given.", extraItemMaxRunes)},
			{"anyOf", []any{
				obj{{"type", "null"}},
				obj{{"$ref", "#/$defs/text"}, {"type", "string"}, {"pattern", countPattern(extraItemMaxRunes)}},
			}},
		}},
	}
	for _, t := range typeTable {
		props := obj{}
		var required []string
		for _, f := range t.Fields {
			ref := "#/$defs/extraItem"
			switch {
			case f.Main && f.Required && f.MaxRunes == mainItemMaxRunes:
				ref = "#/$defs/mainItem"
				required = append(required, f.Name)
			case !f.Main && !f.Required && f.MaxRunes == extraItemMaxRunes:
			default:
				panic("schema generator: field " + f.Name + " of " + string(t.Type) + " fits neither mainItem nor extraItem")
			}
			props = append(props, kv{f.Name, obj{{"title", f.DescZH}, {"description", f.DescEN}, {"$ref", ref}}})
		}
		defs = append(defs, kv{string(t.Type), obj{
			{"title", t.MeaningZH},
			{"description", "data of type " + string(t.Type) + ": " + t.MeaningEN},
			{"type", "object"},
			{"required", required},
			{"additionalProperties", false},
			{"properties", props},
		}})
		allOf = append(allOf, obj{
			{"if", obj{{"properties", obj{{"type", obj{{"const", string(t.Type)}}}}}, {"required", []string{"type"}}}},
			{"then", obj{{"properties", obj{{"data", obj{{"$ref", "#/$defs/" + string(t.Type)}}}}}}},
		})
	}
	s := obj{
		{"$schema", "https://json-schema.org/draft/2020-12/schema"},
		{"$id", "https://github.com/campus-it/ucs/schemas/push.schema.json"},
		{"title", "Push request body"},
		{"description", "Body of POST /v1/infra/notification/mp. Generated from package push (go test ./pkg/push -run TestPushSchemaUpToDate -update); " +
			"the tests check that it accepts exactly the bodies push.Parse accepts, given a body of at most 65536 bytes of valid UTF-8 JSON without duplicate keys or lone surrogate escapes."},
		{"type", "object"},
		{"required", []string{"userId", "type", "data"}},
		{"additionalProperties", false},
		{"properties", obj{
			{"userId", obj{
				{"description", "Campus user number of the recipient."},
				{"type", "string"},
				{"pattern", userIDPattern},
				{"not", noLineFeed},
			}},
			{"type", obj{
				{"description", "Message type code, exact case."},
				{"type", "string"},
				{"enum", schemaTypeList},
			}},
			{"url", obj{
				{"description", "Link target: an absolute http or https URL with a host name or IPv4 address (no IPv6 literal, no user info), without white space or control characters. null or \"\" means none."},
				{"type", []string{"string", "null"}},
				{"maxLength", maxURLRunes},
				{"pattern", urlPattern},
				{"not", noLineFeed},
			}},
			{"time", obj{
				{"description", "Unix time in seconds (10 digits) or milliseconds (13 digits), as a whole number or a string of digits. null means none."},
				{"anyOf", []any{
					obj{{"type", "null"}},
					obj{{"type", "integer"}, {"minimum", int64(1e9)}, {"maximum", int64(9999999999)}},
					obj{{"type", "integer"}, {"minimum", int64(1e12)}, {"maximum", int64(9999999999999)}},
					obj{{"type", "string"}, {"pattern", timeDigits}, {"not", noLineFeed}},
				}},
			}},
			{"data", obj{
				{"description", "Template content; its fields depend on type. An optional field given as null is not given."},
				{"type", "object"},
				{"additionalProperties", obj{{"anyOf", []any{obj{{"type", "null"}}, obj{{"$ref", "#/$defs/text"}}}}}},
			}},
		}},
		{"allOf", allOf},
		{"$defs", defs},
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	// The patterns hold controls and non-characters themselves; as \uXXXX
	// escapes they stay the same JSON value and YAML-based readers accept
	// the file.
	return openapi.EscapeUnprintable(b.Bytes())
}
