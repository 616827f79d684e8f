package push

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/campus-it/ucs/schemas"
)

// compiledSchema is schemas/push.schema.json as jsonschema/v6 compiles it
// with Go's regexp (RE2), the engine the service's own tools use.
var compiledSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	return compilePushSchema(nil)
})

// compiledSchemaECMA is the same schema with an ECMA-262 engine in u-flag
// mode, as ajv, redocly and browsers read its patterns (JSON Schema
// 2020-12 §6.3.3: patterns SHOULD be ECMA-262).
var compiledSchemaECMA = sync.OnceValues(func() (*jsonschema.Schema, error) {
	return compilePushSchema(compileECMA)
})

func compilePushSchema(engine jsonschema.RegexpEngine) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemas.Push()))
	if err != nil {
		return nil, err
	}
	const url = "https://github.com/campus-it/ucs/schemas/push.schema.json"
	c := jsonschema.NewCompiler()
	c.UseRegexpEngine(engine)
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// ecmaRegexp adapts regexp2 to jsonschema's Regexp.
type ecmaRegexp struct{ re *regexp2.Regexp }

func (e ecmaRegexp) String() string { return e.re.String() }

// MatchString reports a match; a run-time failure (regexp2 bounds its
// backtracking) counts as no match, which the agreement then reports.
func (e ecmaRegexp) MatchString(s string) bool {
	ok, err := e.re.MatchString(s)
	return err == nil && ok
}

func compileECMA(pattern string) (jsonschema.Regexp, error) {
	re, err := regexp2.Compile(pattern, regexp2.ECMAScript|regexp2.Unicode)
	if err != nil {
		return nil, err
	}
	return ecmaRegexp{re}, nil
}

// bodyLevelOK applies the rules that concern the bytes of a body rather
// than the JSON value, which no JSON Schema can see: size, UTF-8, syntax
// (lone surrogate escapes included) and duplicate keys. It is written
// independently of Parse, on top of encoding/json.
func bodyLevelOK(body []byte) bool {
	return len(body) <= MaxBodyBytes && utf8.Valid(body) && json.Valid(body) && !hasLoneSurrogate(body) && !hasDuplicateKeys(body)
}

// hasLoneSurrogate reports whether the valid JSON text body escapes a UTF-16
// surrogate (\ud800 to \udfff) that is not half of a pair: text that stands
// for no character, which encoding/json turns into U+FFFD and Parse refuses.
func hasLoneSurrogate(body []byte) bool {
	hex4 := func(i int) (int, bool) {
		if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
		return int(v), err == nil
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		u, ok := hex4(i)
		if !ok {
			i++ // an escape of one character
			continue
		}
		switch {
		case u >= 0xdc00 && u <= 0xdfff:
			return true
		case u >= 0xd800 && u <= 0xdbff:
			low, ok := hex4(i + 6)
			if !ok || low < 0xdc00 || low > 0xdfff {
				return true
			}
			i += 11
		default:
			i += 5
		}
	}
	return false
}

// hasDuplicateKeys reports whether any object of the valid JSON text body
// has a key twice.
func hasDuplicateKeys(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		object bool
		keys   map[string]bool
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false // io.EOF; body is valid JSON
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
		} else if top := len(stack) - 1; top >= 0 && stack[top].key {
			k := tok.(string)
			if stack[top].keys[k] {
				return true
			}
			stack[top].keys[k] = true
			stack[top].key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, keys: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		}
		// A value ended: the parent object wants a key next.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true
		}
	}
}

// schemaAccepts reports whether body passes the body-level rules and then
// schemas/push.schema.json, read with Go's regexp and with an ECMA-262
// engine; it fails t if the two engines judge body differently.
func schemaAccepts(t testing.TB, body []byte) bool {
	t.Helper()
	sch, err := compiledSchema()
	if err != nil {
		t.Fatalf("compile push.schema.json: %v", err)
	}
	ecma, err := compiledSchemaECMA()
	if err != nil {
		t.Fatalf("compile push.schema.json with ECMA-262 patterns: %v", err)
	}
	if !bodyLevelOK(body) {
		return false
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return false
	}
	byRE2, byECMA := sch.Validate(inst) == nil, ecma.Validate(inst) == nil
	if byRE2 != byECMA {
		t.Errorf("the schema's patterns read differently: RE2 accepts %v, ECMA-262 accepts %v, body:\n%q", byRE2, byECMA, body)
	}
	return byRE2
}

// checkAgreement fails t if Parse and the schema judge body differently.
func checkAgreement(t testing.TB, body []byte) {
	t.Helper()
	_, err := Parse(body)
	if byParse, bySchema := err == nil, schemaAccepts(t, body); byParse != bySchema {
		t.Errorf("Parse and push.schema.json disagree: Parse accepts %v (%v), schema accepts %v, body:\n%q", byParse, err, bySchema, body)
	}
}

// TestSchemaAgreement runs every table case and fuzz seed through both.
func TestSchemaAgreement(t *testing.T) {
	n := 0
	for _, c := range parseCases() {
		checkAgreement(t, []byte(c.body))
		n++
	}
	// Each string of the emoji table as a main item and as a remark.
	for _, c := range emojiCases() {
		d := minimal(TypeTDL)
		checkAgreement(t, []byte(tdl(with(d, "content", c.s))))
		checkAgreement(t, []byte(tdl(with(d, "remark", c.s))))
		n += 2
	}
	for _, s := range fuzzSeeds() {
		checkAgreement(t, s)
		n++
	}
	corpus, err := readFuzzCorpus("testdata/fuzz/FuzzParse")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range corpus {
		checkAgreement(t, s)
		n++
	}
	t.Logf("checked %d bodies", n)
}

// TestBodyLevelOK pins the independent checker that the agreement relies on.
func TestBodyLevelOK(t *testing.T) {
	for body, want := range map[string]bool{
		`{"a":1,"b":{"a":2}}`:         true,
		`{"a":1,"a":2}`:               false,
		`{"d":{"x":"1","x":"2"}}`:     false,
		`[{"x":1},{"x":2}]`:           true,
		`{"a":[{"k":1,"k":2}]}`:       false,
		`{"a":"\u0000"}`:              true,
		`{"a":1`:                      false,
		"{\"a\":\"\xff\"}":            false,
		`{"a":{"b":1},"c":{"b":1}}`:   true,
		`{"a":["x","x"],"b":["x"]}`:   true,
		`{"k":{"k":{"k":1}},"j":"k"}`: true,
	} {
		if got := bodyLevelOK([]byte(body)); got != want {
			t.Errorf("bodyLevelOK(%q) = %v, want %v", body, got, want)
		}
	}
}

// readFuzzCorpus reads the []byte inputs of a go test fuzz corpus folder.
func readFuzzCorpus(dir string) ([][]byte, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		b, err := readFuzzFile(f)
		_ = f.Close() // only read
		if err != nil {
			return nil, errors.New(name + ": " + err.Error())
		}
		out = append(out, b)
	}
	return out, nil
}

func readFuzzFile(r io.Reader) ([]byte, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 4*MaxBodyBytes+1024)
	if !sc.Scan() || sc.Text() != "go test fuzz v1" {
		return nil, errors.New("not a fuzz corpus file")
	}
	if !sc.Scan() {
		return nil, errors.New("no value")
	}
	line := sc.Text()
	lit, ok := strings.CutPrefix(line, "[]byte(")
	if !ok || !strings.HasSuffix(lit, ")") {
		return nil, errors.New("not a []byte value: " + line)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
	return []byte(s), err
}
