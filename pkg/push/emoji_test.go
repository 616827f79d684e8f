package push

import (
	"bytes"
	"os"
	"testing"
	"unicode"

	"github.com/campus-it/ucs/pkg/push/internal/emojigen"
)

type emojiCase struct {
	s    string
	want bool
}

func emojiCases() []emojiCase {
	return []emojiCase{
		// Emoji.
		{"😀", true},
		{"文字😀文字", true},
		{"👨\u200D👩\u200D👧", true}, // ZWJ sequence
		{"🇨🇳", true},              // flag: two regional indicators
		{"\U0001F1E6", true},      // one regional indicator
		{"1\uFE0F\u20E3", true},   // keycap 1
		{"#\u20E3", true},         // keycap without VS16
		{"👍🏽", true},              // skin tone modifier
		{"\U0001F3FB", true},      // modifier alone
		{"🏴\U000E0067\U000E0062\U000E0073\U000E0063\U000E0074\U000E007F", true}, // Scotland
		{"\U000E0067", true}, // tag alone
		{"a\u200Db", true},   // ZWJ alone
		{"a\uFE0F", true},    // VS16 alone
		{"❤", true},          // U+2764 without VS16
		{"❤️", true},
		{"☀", true},
		{"⌚", true},
		{"✅", true},
		{"🀄", true},
		{"🫠", true},          // Emoji 14
		{"🪿", true},          // Emoji 15
		{"\U0001FAE9", true}, // Emoji 16, in a reserved Extended_Pictographic block
		{"\U0001FC00", true}, // reserved, Extended_Pictographic
		{"©", true},          // Extended_Pictographic, though text by default
		{"®", true},
		{"™", true},
		{"‼", true},
		{"★", true}, // U+2605 is Extended_Pictographic
		{"〰", true},
		{"〽", true},
		{"㊗", true},
		{"↔", true},

		// Not emoji.
		{"", false},
		{"hello, world #1 *", false},
		{"0123456789", false},
		{"关于2024年暑期放假安排的通知", false},
		{"，。：；？！“”‘’《》【】（）、…—·", false},
		{"ＡＢＣ１２３！＠＃", false},
		{"　", false},
		{"℃", false},
		{"№", false},
		{"①②⑳", false},
		{"☆", false}, // U+2606 is not
		{"←↑→↓", false},
		{"×÷°±¥€£§¶", false},
		{"\uFE0E", false},     // VS15 asks for text presentation
		{"\U00020000", false}, // CJK extension B
		{"あア가ㄅ", false},
		{"\U0001F100", false}, // DIGIT ZERO FULL STOP
		{"\U0001F1AC", false}, // SQUARED VOD, just below an emoji range
		{"\U0001F3FB"[:3], false},
		{"\xff\xfe", false},
		{"\u00A8\u00AA\u00AD\u00AF", false}, // around © and ®
	}
}

func TestContainsEmoji(t *testing.T) {
	for _, c := range emojiCases() {
		if got := ContainsEmoji(c.s); got != c.want {
			t.Errorf("ContainsEmoji(%q) = %v, want %v", c.s, got, c.want)
		}
	}
}

// TestEmojiTableGenerated regenerates emoji_table.go from the committed
// emoji-data.txt in memory: the table cannot drift from the data file, and a
// new data file needs go generate ./pkg/push.
func TestEmojiTableGenerated(t *testing.T) {
	want, err := emojigen.Source(emojigen.Data)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("emoji_table.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("emoji_table.go is not what internal/emojigen/emoji-data.txt gives; run: go generate ./pkg/push")
	}
}

// TestEmojiTables checks that the merged table isEmoji searches holds
// exactly the code points of the two generated tables, for every code point
// and a few values beyond Unicode, and pins the table's size so that a new
// data file's changes are seen in review.
func TestEmojiTables(t *testing.T) {
	n := 0
	for r := rune(-1); r <= unicode.MaxRune+1; r++ {
		want := unicode.In(r, extendedPictographic, emojiComponents)
		if got := isEmoji(r); got != want {
			t.Fatalf("isEmoji(%U) = %v, want %v", r, got, want)
		}
		if want {
			n++
		}
	}
	// Emoji 15.0: 3537 Extended_Pictographic code points, and the
	// components outside them (ZWJ, keycap, VS16, regional indicators,
	// skin tones, tags).
	if n != 3537+1+1+1+26+5+96 {
		t.Errorf("the tables hold %d code points", n)
	}
	for _, r := range []rune{'#', '*', '0', '9'} {
		if isEmoji(r) {
			t.Errorf("%q is an emoji; the keycap bases are ordinary text alone", r)
		}
	}
}

func TestInspect(t *testing.T) {
	none := [3]rune{-1, -1, -1}
	refused := func(format, private, notChar rune) [3]rune { return [3]rune{format, private, notChar} }
	for _, c := range []struct {
		s    string
		want textFacts
	}{
		{"", textFacts{blank: true, refused: none}},
		{"中文", textFacts{runes: 2, refused: none}},
		{" \u3000\u00A0\u2003", textFacts{runes: 4, blank: true, refused: none, clean: true}},
		// Removed characters count for nothing: the value is blank.
		{"\u200B", textFacts{blank: true, refused: none, clean: true}},
		{"\u00AD\uFEFF\u2060 ", textFacts{runes: 1, blank: true, refused: none, clean: true}},
		{"零\u200B宽", textFacts{runes: 2, refused: none, clean: true}},
		// Characters that show nothing by themselves count, but a value of
		// them alone is blank.
		{"\u3164\u2800\u115F\u1160\uFFA0\u034F\u17B4\uFE00\U000E0100", textFacts{runes: 9, blank: true, refused: none}},
		{"\u3164甲", textFacts{runes: 2, refused: none}},
		{"a\nb", textFacts{runes: 3, lineBreak: true, refused: none}},
		{"\n", textFacts{runes: 1, blank: true, lineBreak: true, refused: none}},
		{"\v\f\r", textFacts{runes: 3, blank: true, lineBreak: true, refused: none}},
		{"\t", textFacts{runes: 1, blank: true, control: true, refused: none}},
		{"\x00", textFacts{runes: 1, control: true, refused: none}},
		{"\x1c", textFacts{runes: 1, control: true, refused: none}},
		{"\u0085", textFacts{runes: 1, blank: true, lineBreak: true, refused: none}},
		{"\u0080\u009f", textFacts{runes: 2, control: true, refused: none}},
		{"\u2028x", textFacts{runes: 2, lineBreak: true, refused: none}},
		{"😀!", textFacts{runes: 2, emoji: true, refused: none}},
		// The zero width joiner is a formatting character, but reported as
		// the emoji it builds.
		{"\u200D", textFacts{runes: 1, emoji: true, refused: none}},
		{"a\u202Eb\u202Dc", textFacts{runes: 5, refused: refused(0x202E, -1, -1)}},
		{"\uE000\U00100000\uFFFF\uFDD0\u0378", textFacts{runes: 5, refused: refused(-1, 0xE000, 0xFFFF)}},
		{"\u3000\u200B\u2066", textFacts{runes: 2, refused: refused(0x2066, -1, -1), clean: true}},
	} {
		if got := inspect(c.s); got != c.want {
			t.Errorf("inspect(%q) = %+v, want %+v", c.s, got, c.want)
		}
	}
}
