package push

import (
	"slices"
	"unicode/utf8"
)

// runeRange is an inclusive range of code points.
type runeRange struct{ lo, hi rune }

// extendedPictographic lists the code points with the Unicode property
// Extended_Pictographic=Yes, from emoji-data.txt (Emoji 15.1; the property
// has not changed since Emoji 13 because its reserved blocks are included),
// with adjacent ranges joined. The platform removes these characters, so a
// message containing one would arrive with holes in it.
var extendedPictographic = []runeRange{
	{0x00A9, 0x00A9}, {0x00AE, 0x00AE},
	{0x203C, 0x203C}, {0x2049, 0x2049}, {0x2122, 0x2122}, {0x2139, 0x2139},
	{0x2194, 0x2199}, {0x21A9, 0x21AA}, {0x231A, 0x231B}, {0x2328, 0x2328},
	{0x2388, 0x2388}, {0x23CF, 0x23CF}, {0x23E9, 0x23F3}, {0x23F8, 0x23FA},
	{0x24C2, 0x24C2}, {0x25AA, 0x25AB}, {0x25B6, 0x25B6}, {0x25C0, 0x25C0},
	{0x25FB, 0x25FE}, {0x2600, 0x2605}, {0x2607, 0x2612}, {0x2614, 0x2685},
	{0x2690, 0x2705}, {0x2708, 0x2712}, {0x2714, 0x2714}, {0x2716, 0x2716},
	{0x271D, 0x271D}, {0x2721, 0x2721}, {0x2728, 0x2728}, {0x2733, 0x2734},
	{0x2744, 0x2744}, {0x2747, 0x2747}, {0x274C, 0x274C}, {0x274E, 0x274E},
	{0x2753, 0x2755}, {0x2757, 0x2757}, {0x2763, 0x2767}, {0x2795, 0x2797},
	{0x27A1, 0x27A1}, {0x27B0, 0x27B0}, {0x27BF, 0x27BF}, {0x2934, 0x2935},
	{0x2B05, 0x2B07}, {0x2B1B, 0x2B1C}, {0x2B50, 0x2B50}, {0x2B55, 0x2B55},
	{0x3030, 0x3030}, {0x303D, 0x303D}, {0x3297, 0x3297}, {0x3299, 0x3299},
	{0x1F000, 0x1F0FF}, {0x1F10D, 0x1F10F}, {0x1F12F, 0x1F12F}, {0x1F16C, 0x1F171},
	{0x1F17E, 0x1F17F}, {0x1F18E, 0x1F18E}, {0x1F191, 0x1F19A}, {0x1F1AD, 0x1F1E5},
	{0x1F201, 0x1F20F}, {0x1F21A, 0x1F21A}, {0x1F22F, 0x1F22F}, {0x1F232, 0x1F23A},
	{0x1F23C, 0x1F23F}, {0x1F249, 0x1F3FA}, {0x1F400, 0x1F53D}, {0x1F546, 0x1F64F},
	{0x1F680, 0x1F6FF}, {0x1F774, 0x1F77F}, {0x1F7D5, 0x1F7FF}, {0x1F80C, 0x1F80F},
	{0x1F848, 0x1F84F}, {0x1F85A, 0x1F85F}, {0x1F888, 0x1F88F}, {0x1F8AE, 0x1F8FF},
	{0x1F90C, 0x1F93A}, {0x1F93C, 0x1F945}, {0x1F947, 0x1FAFF}, {0x1FC00, 0x1FFFD},
}

// emojiComponents are the code points that only make sense inside an emoji
// sequence (UTS #51 Emoji_Component, less the ASCII keycap bases #, * and
// digits, which are ordinary text on their own). The platform strips them
// along with the pictograph, and alone they render as an empty box or a
// broken flag.
var emojiComponents = []runeRange{
	{0x200D, 0x200D},   // ZERO WIDTH JOINER, glues ZWJ sequences
	{0x20E3, 0x20E3},   // COMBINING ENCLOSING KEYCAP
	{0xFE0F, 0xFE0F},   // VARIATION SELECTOR-16, emoji presentation
	{0x1F1E6, 0x1F1FF}, // regional indicators, pairs make flags
	{0x1F3FB, 0x1F3FF}, // skin tone modifiers
	{0xE0020, 0xE007F}, // tags, used by subdivision flags
}

// emojiRanges is the union of the two tables, sorted and coalesced, which is
// what ContainsEmoji searches and what the schema's pattern excludes.
var emojiRanges = mergeRanges(extendedPictographic, emojiComponents)

func mergeRanges(tables ...[]runeRange) []runeRange {
	var all []runeRange
	for _, t := range tables {
		all = append(all, t...)
	}
	slices.SortFunc(all, func(a, b runeRange) int { return int(a.lo - b.lo) })
	out := all[:0]
	for _, r := range all {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return slices.Clip(out)
}

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

// isEmoji reports whether r is in emojiRanges.
func isEmoji(r rune) bool {
	switch {
	case r < 0xA9:
		return false
	case r > 0x3299 && r < 0x1F000:
		// CJK ideographs, kana, hangul and full-width forms all live
		// here, and the only emoji code point among them is VS16.
		return r == 0xFE0F
	}
	lo, hi := 0, len(emojiRanges)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		switch {
		case r < emojiRanges[m].lo:
			hi = m
		case r > emojiRanges[m].hi:
			lo = m + 1
		default:
			return true
		}
	}
	return false
}
