package keyword

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/rangetable"
)

// The platform takes in a keyword value only what its documentation calls
// Chinese, letters, digits and symbols, and the ordinary space: the Unicode
// categories L, M, N, P and S, and U+0020. Every other code point falls into
// exactly one of the classes below, and a value holding one is answered
// 47003 "argument invalid". This file is the one table of those classes: the
// simulator refuses by it, and the push validation either refuses a value
// with a field error or cleans it before sending, as each class's Treatment
// says, so that nothing the front end accepts is refused by the platform.

// Treatment is what the service does about a character the platform refuses,
// before anything is sent.
type Treatment uint8

// The treatments. Refuse is the default for anything a reader could miss or
// be misled by; a character is changed only where the change cannot alter
// what the reader sees.
const (
	// Refuse: the push is refused with a field error that names the field,
	// the rule and (for invisible characters) the code point.
	Refuse Treatment = iota + 1
	// Space: the character is sent as an ordinary space (U+0020). For the
	// full-width space of Chinese text and the no-break spaces, which a
	// reader sees as a space either way.
	Space
	// Remove: the character is dropped. For characters that show nothing
	// and change nothing a reader sees (zero-width space, soft hyphen, word
	// joiner, byte order mark), which text pasted from documents and web
	// pages carries unnoticed.
	Remove
)

// String returns refuse, space or remove.
func (t Treatment) String() string {
	switch t {
	case Refuse:
		return "refuse"
	case Space:
		return "space"
	case Remove:
		return "remove"
	}
	return "unknown"
}

// Class is a class of characters the platform refuses in every keyword value.
type Class struct {
	// Name identifies the class in refusal metrics and the metadata
	// dictionary: line_break, control, space, invisible, format,
	// private_use or not_a_character.
	Name string
	// Treatment is what the front end does about the class.
	Treatment Treatment
	// Noun names one character of the class in an error message, after
	// "contains a".
	Noun string
	// DescZH and DescEN say in words which characters these are and what
	// happens to them, for the metadata dictionary.
	DescZH, DescEN string
	// Table holds the code points of the class.
	Table *unicode.RangeTable
}

// Contains reports whether r is in the class.
func (c *Class) Contains(r rune) bool { return unicode.Is(c.Table, r) }

// lineBreaks are what a reader would take for a new line: LF, VT, FF, CR,
// NEL and the Unicode line and paragraph separators.
var lineBreaks = rangetable.New('\n', '\v', '\f', '\r', 0x85, 0x2028, 0x2029)

// invisibles are the formatting characters that show nothing and join or
// break nothing a reader would notice in Chinese or Latin text, so dropping
// them changes nothing on the screen: soft hyphen, Mongolian vowel separator,
// zero width space and non-joiner, word joiner, the invisible mathematical
// operators, and the byte order mark (zero width no-break space). Joiners
// that build emoji (U+200D) and the bidirectional controls, which reorder
// what is shown, are not among them: those are refused.
var invisibles = rangetable.New(0x00AD, 0x180E, 0x200B, 0x200C, 0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0xFEFF)

// classes is the table, in the order the front end reports its classes.
var classes = []Class{
	{Name: "line_break", Treatment: Refuse, Noun: "line break",
		DescZH: "换行符（LF、VT、FF、CR、U+0085、U+2028、U+2029）：平台不支持换行，拒收",
		DescEN: "line breaks (LF, VT, FF, CR, U+0085, U+2028, U+2029): the platform shows no line breaks; refused",
		Table:  lineBreaks},
	{Name: "control", Treatment: Refuse, Noun: "control character",
		DescZH: "其他控制字符（含制表符）：拒收",
		DescEN: "other control characters, tab included: refused",
		Table:  without(unicode.Cc, lineBreaks)},
	{Name: "space", Treatment: Space, Noun: "space other than U+0020",
		DescZH: "U+0020 以外的空格（全角空格 U+3000、不换行空格 U+00A0 等）：发送前替换为普通空格",
		DescEN: "spaces other than U+0020 (the full-width space U+3000, the no-break space U+00A0, …): sent as an ordinary space",
		Table:  without(unicode.Zs, rangetable.New(' '))},
	{Name: "invisible", Treatment: Remove, Noun: "invisible character",
		DescZH: "不可见且不影响显示的字符（软连字符 U+00AD、零宽空格 U+200B、零宽非连接符 U+200C、词连接符 U+2060、U+2061–U+2064、字节序标记 U+FEFF、U+180E）：发送前删除，不计入字数",
		DescEN: "characters that show nothing and change nothing shown (soft hyphen U+00AD, zero width space U+200B, zero width non-joiner U+200C, word joiner U+2060, U+2061–U+2064, byte order mark U+FEFF, U+180E): removed before sending, and not counted",
		Table:  invisibles},
	{Name: "format", Treatment: Refuse, Noun: "formatting character",
		DescZH: "其他格式字符（双向控制符 U+202A–U+202E、U+2066–U+2069、U+200E、U+200F，零宽连接符 U+200D 等）：可改变显示顺序或含义，拒收",
		DescEN: "other formatting characters (bidirectional controls U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, the zero width joiner U+200D, …): they can change what is shown or its order; refused",
		Table:  without(unicode.Cf, invisibles)},
	{Name: "private_use", Treatment: Refuse, Noun: "private-use character",
		DescZH: "私用区字符（U+E000–U+F8FF 等）：含义因字体而异，拒收",
		DescEN: "private-use characters (U+E000–U+F8FF, planes 15 and 16): their meaning depends on the font; refused",
		Table:  unicode.Co},
	{Name: "not_a_character", Treatment: Refuse, Noun: "code point that is not a character",
		DescZH: "非字符（U+FFFE、U+FFFF、U+FDD0–U+FDEF 等）、未分配的码位和代理项：拒收",
		DescEN: "noncharacters (U+FFFE, U+FFFF, U+FDD0–U+FDEF, …), unassigned code points and surrogates: refused",
		Table:  cut(rangetable.Merge(unicode.Cn, unicode.Cs), newer...)},
}

// newer are the characters Unicode assigned after the version of Go's tables
// (unicode.Version 15.0.0), which those tables take for unassigned code points: the 627 of
// Unicode 15.1, the ideographic description characters U+2FFC–U+2FFF, the CJK stroke U+31EF
// and CJK Unified Ideographs Extension I (newerHan).
var newer = []unicode.Range32{{Lo: 0x2FFC, Hi: 0x2FFF, Stride: 1}, {Lo: 0x31EF, Hi: 0x31EF, Stride: 1}, newerHan.R32[0]}

// newerHan is CJK Unified Ideographs Extension I (Unicode 15.1, U+2EBF0–U+2EE5D), characters of
// the Table of General Standard Chinese Characters (通用规范汉字表) that personal names use.
var newerHan = &unicode.RangeTable{R32: []unicode.Range32{{Lo: 0x2EBF0, Hi: 0x2EE5D, Stride: 1}}}

// cut returns t without the code points of cs, which lie in ranges of t of stride 1 (as the
// unassigned code points around a block do): the ranges are split, not visited code point by
// code point, which for the unassigned code points would mean some 800,000 of them at start.
// Nothing of Latin-1 is cut.
func cut(t *unicode.RangeTable, cs ...unicode.Range32) *unicode.RangeTable {
	out := &unicode.RangeTable{LatinOffset: t.LatinOffset}
	for _, r := range t.R16 {
		for _, p := range cutRange(unicode.Range32{Lo: uint32(r.Lo), Hi: uint32(r.Hi), Stride: uint32(r.Stride)}, cs) {
			out.R16 = append(out.R16, unicode.Range16{Lo: uint16(p.Lo), Hi: uint16(p.Hi), Stride: uint16(p.Stride)})
		}
	}
	for _, r := range t.R32 {
		out.R32 = append(out.R32, cutRange(r, cs)...)
	}
	return out
}

// cutRange is r without the code points of cs.
func cutRange(r unicode.Range32, cs []unicode.Range32) []unicode.Range32 {
	pieces := []unicode.Range32{r}
	for _, c := range cs {
		var left []unicode.Range32
		for _, p := range pieces {
			if p.Hi < c.Lo || p.Lo > c.Hi {
				left = append(left, p)
				continue
			}
			if p.Stride != 1 {
				panic("keyword: cut from a range of stride other than 1")
			}
			if p.Lo < c.Lo {
				left = append(left, unicode.Range32{Lo: p.Lo, Hi: c.Lo - 1, Stride: 1})
			}
			if p.Hi > c.Hi {
				left = append(left, unicode.Range32{Lo: c.Hi + 1, Hi: p.Hi, Stride: 1})
			}
		}
		pieces = left
	}
	return pieces
}

// Classes returns a copy of the table: every class of characters the platform
// refuses, with the front end's treatment of each. The classes are disjoint,
// and together they hold exactly the code points the platform refuses.
func Classes() []Class {
	out := slices.Clone(classes)
	for i := range out {
		t := *out[i].Table
		t.R16, t.R32 = slices.Clone(t.R16), slices.Clone(t.R32)
		out[i].Table = &t
	}
	return out
}

// plainBMP has a bit set for every code point below U+10000 that the platform
// accepts, so that the common case, Chinese text, costs one load rather than
// a search of every class's table. It is computed from the tables.
var plainBMP = func() *[0x10000 / 64]uint64 {
	var m [0x10000 / 64]uint64
	for i := range m {
		m[i] = ^uint64(0)
	}
	for _, c := range classes {
		for _, x := range c.Table.R16 {
			for r := int(x.Lo); r <= int(x.Hi); r += int(x.Stride) {
				m[r/64] &^= 1 << (r % 64)
			}
		}
	}
	return &m
}()

// ClassOf returns the class of r, or nil if the platform accepts r.
func ClassOf(r rune) *Class {
	if r >= 0 && r < 0x10000 && plainBMP[r/64]&(1<<(r%64)) != 0 {
		return nil
	}
	if r < 0 || r > unicode.MaxRune {
		return &classes[len(classes)-1]
	}
	for i := range classes {
		if unicode.Is(classes[i].Table, r) {
			return &classes[i]
		}
	}
	return nil
}

// Allowed reports whether the platform accepts r in a keyword value.
func Allowed(r rune) bool { return ClassOf(r) == nil }

// Clean returns s with the treatments Space and Remove applied: what the
// service sends for a value the front end accepted. Characters of refused
// classes are left in place; s is returned as is when nothing changes.
func Clean(s string) string {
	i := strings.IndexFunc(s, changed)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:i])
	for _, r := range s[i:] {
		switch c := ClassOf(r); {
		case c == nil || c.Treatment == Refuse:
			b.WriteRune(r)
		case c.Treatment == Space:
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// changed reports whether Clean changes r.
func changed(r rune) bool {
	if r < utf8.RuneSelf {
		return false
	}
	c := ClassOf(r)
	return c != nil && c.Treatment != Refuse
}

// without returns the code points of t that are not in minus. The tables it
// is used on are small (controls, spaces, formatting characters).
func without(t, minus *unicode.RangeTable) *unicode.RangeTable {
	var keep []rune
	rangetable.Visit(t, func(r rune) {
		if !unicode.Is(minus, r) {
			keep = append(keep, r)
		}
	})
	return rangetable.New(keep...)
}
