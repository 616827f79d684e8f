package keyword

import (
	"testing"
	"unicode"
)

// TestClassesAreWhatThePlatformRefuses walks every code point: the classes
// are disjoint, and a code point is in one exactly when it is neither the
// ordinary space nor in the categories the platform documents (Chinese,
// letters, digits, symbols: L, M, N, P, S).
func TestClassesAreWhatThePlatformRefuses(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		in := -1
		for i := range classes {
			if classes[i].Contains(r) {
				if in >= 0 {
					t.Fatalf("%U is in %s and %s", r, classes[in].Name, classes[i].Name)
				}
				in = i
			}
		}
		platform := r == ' ' || unicode.IsPrint(r) || unicode.Is(&unicode.RangeTable{R32: newer}, r)
		if platform != (in < 0) {
			t.Fatalf("%U: platform accepts %v, but its class is %d", r, platform, in)
		}
		c := ClassOf(r)
		if (c == nil) != (in < 0) || c != nil && c.Name != classes[in].Name {
			t.Fatalf("ClassOf(%U) = %v, want class %d", r, c, in)
		}
	}
	if c := ClassOf(-1); c == nil || ClassOf(unicode.MaxRune+1) == nil {
		t.Fatal("a value beyond Unicode is accepted")
	}
}

// TestNamedCharacters pins the class and treatment of the characters found
// accepted by the front end and refused by the platform, and of their
// neighbours that stay accepted.
func TestNamedCharacters(t *testing.T) {
	for _, c := range []struct {
		r     rune
		class string
		treat Treatment
	}{
		{0x3000, "space", Space}, {0x00A0, "space", Space}, {0x2002, "space", Space}, {0x202F, "space", Space}, {0x205F, "space", Space},
		{0x00AD, "invisible", Remove}, {0x200B, "invisible", Remove}, {0x200C, "invisible", Remove}, {0x2060, "invisible", Remove},
		{0xFEFF, "invisible", Remove}, {0x180E, "invisible", Remove},
		{0x200D, "format", Refuse}, {0x200E, "format", Refuse}, {0x202A, "format", Refuse}, {0x202E, "format", Refuse},
		{0x2066, "format", Refuse}, {0x2069, "format", Refuse}, {0x061C, "format", Refuse}, {0xE0001, "format", Refuse},
		{0xE000, "private_use", Refuse}, {0xF8FF, "private_use", Refuse}, {0xF0000, "private_use", Refuse}, {0x10FFFD, "private_use", Refuse},
		{0xFDD0, "not_a_character", Refuse}, {0xFDEF, "not_a_character", Refuse}, {0xFFFE, "not_a_character", Refuse},
		{0xFFFF, "not_a_character", Refuse}, {0x1FFFF, "not_a_character", Refuse}, {0x10FFFF, "not_a_character", Refuse},
		{0x0378, "not_a_character", Refuse}, {0xD800, "not_a_character", Refuse}, {0xDFFF, "not_a_character", Refuse},
		{'\t', "control", Refuse}, {0x00, "control", Refuse}, {0x7F, "control", Refuse}, {0x9F, "control", Refuse},
		{'\n', "line_break", Refuse}, {'\r', "line_break", Refuse}, {0x85, "line_break", Refuse}, {0x2028, "line_break", Refuse}, {0x2029, "line_break", Refuse},
		{' ', "", 0}, {'a', "", 0}, {'中', "", 0}, {0xFFFD, "", 0}, {0x00A1, "", 0}, {0x00AC, "", 0}, {0x00AE, "", 0},
		{0x2010, "", 0}, {0x3001, "", 0}, {0xF900, "", 0}, {0xFE0F, "", 0}, {0x20000, "", 0},
		{0x2EBF0, "", 0}, {0x2EE5D, "", 0}, {0x2EE5E, "not_a_character", Refuse},
	} {
		got := ClassOf(c.r)
		switch {
		case c.class == "" && got != nil:
			t.Errorf("%U is in %s, want accepted", c.r, got.Name)
		case c.class != "" && (got == nil || got.Name != c.class || got.Treatment != c.treat):
			t.Errorf("%U is in %v, want %s (%v)", c.r, got, c.class, c.treat)
		}
	}
}

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"":                             "",
		"张三的请假申请":                      "张三的请假申请",
		"\u3000\u3000张三":               "  张三",
		"a\u00a0b":                     "a b",
		"零\u200b宽\u00ad空\ufeff格\u2060": "零宽空格",
		"\u200b":                       "",
		"bidi\u202eleft":               "bidi\u202eleft", // refused, not cleaned
		"a\tb":                         "a\tb",
	} {
		if got := Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClassesCopy(t *testing.T) {
	cs := Classes()
	cs[0].Table.R16[0].Lo = 'x'
	cs[0].Table.LatinOffset = 0
	cs[0].Name = "changed"
	if classes[0].Name != "line_break" || classes[0].Table.R16[0].Lo != 0x0A || classes[0].Table.LatinOffset == 0 {
		t.Fatal("Classes hands out the table itself")
	}
}

// TestUnicode151Characters: every character Unicode 15.1 assigned (newer than Go's tables) is a
// character, as Extension I's are: the ideographic description characters U+2FFC–U+2FFF and
// the stroke U+31EF too; their unassigned neighbours are not.
func TestUnicode151Characters(t *testing.T) {
	for _, r := range []rune{0x2FFC, 0x2FFD, 0x2FFE, 0x2FFF, 0x31EF, 0x2EBF0, 0x2EE5D} {
		if c := ClassOf(r); c != nil {
			t.Errorf("ClassOf(%U) = %s, want a character", r, c.Name)
		}
	}
	if c := ClassOf(0x2EE5E); c == nil || c.Name != "not_a_character" {
		t.Errorf("ClassOf(U+2EE5E) = %v, want not_a_character", c)
	}
}
