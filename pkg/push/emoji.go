package push

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/rangetable"
)

// The tables extendedPictographic and emojiComponents are generated from
// Unicode's emoji-data.txt (internal/emojigen); TestEmojiTableGenerated
// checks that emoji_table.go is what the data file gives.
//
//go:generate go run gen_emoji.go

// emojiTable is the union of Extended_Pictographic and the emoji components,
// which is what ContainsEmoji looks for and what the schema's pattern
// excludes. The platform removes these characters, so a message containing
// one would arrive with holes in it; the components (zero width joiner,
// variation selector 16, combining keycap, regional indicators, skin tone
// modifiers, tags) only make sense inside an emoji sequence, and alone they
// render as an empty box or a broken flag.
var emojiTable = rangetable.Merge(extendedPictographic, emojiComponents)

// ContainsEmoji reports whether s contains an emoji: a code point with the
// Unicode property Extended_Pictographic, or an emoji component (regional
// indicator, zero width joiner, variation selector 16, combining keycap, tag,
// skin tone modifier). Chinese text, CJK and full-width punctuation and
// ordinary symbols such as ℃, № and ① are not emoji; ©, ®, ™ and ★ are,
// because Extended_Pictographic says so (☆ is not).
func ContainsEmoji(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if isEmoji(r) {
			return true
		}
	}
	return false
}

// emojiBMP has a bit set for every code point of emojiTable below U+10000.
// Chinese text is all in that plane and holds no emoji, so a lookup there
// costs one load rather than a search of the table (BenchmarkContainsEmoji:
// two to three times faster on Chinese text). It is computed from the table,
// and TestEmojiTables checks every code point.
var emojiBMP = func() *[0x10000 / 64]uint64 {
	var m [0x10000 / 64]uint64
	for _, x := range emojiTable.R16 {
		for r := int(x.Lo); r <= int(x.Hi); r += int(x.Stride) {
			m[r/64] |= 1 << (r % 64)
		}
	}
	return &m
}()

// isEmoji reports whether r is in emojiTable.
func isEmoji(r rune) bool {
	if r >= 0 && r < 0x10000 {
		return emojiBMP[r/64]&(1<<(r%64)) != 0
	}
	return unicode.Is(emojiTable, r)
}
