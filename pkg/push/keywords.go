package push

import (
	"fmt"
	"slices"
	"strings"

	"github.com/campus-it/ucs/pkg/platform/keyword"
)

// Parser is Parse with the keyword of each data field as the platform
// account's templates map it (platform.templates.<TYPE>.fields): a field
// mapped to a keyword is held to the rule of the keyword's kind (package
// keyword) as well, so that a push it accepts is never refused by the
// platform for a keyword's value. A nil *Parser applies the interface's
// rules only, as Parse does.
type Parser struct {
	// kinds holds, per type in typeTable's order, the kind of each field in
	// the type's order (nil: not mapped).
	kinds [][maxFields]*keyword.Kind
	names [][maxFields]string
}

// NewParser returns a Parser for the given mapping: push type → data field →
// template keyword. It refuses an unknown type or field, a keyword of no kind
// the platform documents and a keyword two fields map to, listing every
// problem.
func NewParser(templates map[string]map[string]string) (*Parser, error) {
	p := &Parser{kinds: make([][maxFields]*keyword.Kind, len(typeTable)), names: make([][maxFields]string, len(typeTable))}
	var problems []string
	types := make([]string, 0, len(templates))
	for t := range templates {
		types = append(types, t)
	}
	slices.Sort(types)
	for _, t := range types {
		ti := slices.IndexFunc(typeTable, func(s TypeSpec) bool { return string(s.Type) == t })
		if ti < 0 {
			problems = append(problems, t+": unknown push type")
			continue
		}
		fields := make([]string, 0, len(templates[t]))
		for f := range templates[t] {
			fields = append(fields, f)
		}
		slices.Sort(fields)
		mappedTo := make(map[string]string, len(fields))
		for _, f := range fields {
			kw := templates[t][f]
			fi := typeTable[ti].field(f)
			k := keyword.Of(kw)
			other, shared := mappedTo[kw]
			mappedTo[kw] = f
			switch {
			case shared:
				problems = append(problems, fmt.Sprintf("%s.fields: %s and %s both map to %s", t, other, f, kw))
			case fi < 0:
				problems = append(problems, fmt.Sprintf("%s.fields.%s: not a field of type %s", t, f, t))
			case k == nil:
				problems = append(problems, fmt.Sprintf("%s.fields.%s: %s", t, f, UnknownKeyword(kw)))
			case typeTable[ti].Fields[fi].Main && NotShown(kw):
				problems = append(problems, fmt.Sprintf("%s.fields.%s: %s", t, f, NotShownRule(kw)))
			default:
				p.kinds[ti][fi], p.names[ti][fi] = k, kw
			}
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("push: templates: %s", strings.Join(problems, "; "))
	}
	return p, nil
}

// NotShown reports whether the platform no longer shows keyword kw: the old industry templates'
// first and remark (since 2023-05-04). A main item mapped there would reach nobody.
func NotShown(kw string) bool {
	k := keyword.Of(kw)
	return k != nil && (k.Name == "first" || k.Name == "remark")
}

// NotShownRule says why a main item may not go to keyword kw (NotShown).
func NotShownRule(kw string) string {
	return "a main item cannot go to " + kw + ", which the platform no longer shows"
}

// UnknownKeyword says why a keyword name is refused: its kind is none the
// platform documents.
func UnknownKeyword(kw string) string {
	names := make([]string, 0, len(keyword.Kinds()))
	for _, k := range keyword.Kinds() {
		names = append(names, k.Name)
	}
	return fmt.Sprintf("keyword %q is of no known kind: a keyword is a kind followed by digits, the kinds being %s",
		kw, strings.Join(names, ", "))
}

// Parse is Parse with the keyword rules of p.
func (p *Parser) Parse(body []byte) (Request, error) { return parse(body, p) }

// Keyword returns the template keyword the field of type t is mapped to and
// its kind; nil if it is not mapped (or p is nil).
func (p *Parser) Keyword(t Type, field string) (string, *keyword.Kind) {
	if p == nil {
		return "", nil
	}
	for ti := range typeTable {
		if typeTable[ti].Type == t {
			if fi := typeTable[ti].field(field); fi >= 0 {
				return p.names[ti][fi], p.kinds[ti][fi]
			}
		}
	}
	return "", nil
}

// kindsOf returns the kinds of the fields of sp, or nil.
func (p *Parser) kindsOf(sp *TypeSpec) *[maxFields]*keyword.Kind {
	if p == nil {
		return nil
	}
	for i := range typeTable {
		if &typeTable[i] == sp {
			return &p.kinds[i]
		}
	}
	return nil
}

// keywordRule is the problem of a value its keyword's kind refuses:
// "character_string allows only letters, digits and symbols, at most 32".
func keywordRule(k *keyword.Kind) string { return k.String() }

// checkKeyword holds a value that passed the interface's rules to the rule of
// its keyword's kind, as the platform will get it (cleaned). An old industry
// template's keyword is refused where the platform would cut it: a user
// must never read a value cut short unseen.
func (b *bodyReader) checkKeyword(key, v string, clean bool, k *keyword.Kind) {
	if clean {
		v = keyword.Clean(v)
	}
	if !keyword.Valid(k.Name, v) || keyword.Cut(k.Name, v) {
		b.add("data."+key, RuleKindKeyword, keywordRule(k))
	}
}
