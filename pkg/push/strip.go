package push

import "strings"

// RemoveEmoji returns s without its emoji (the code points ContainsEmoji finds), as the
// platform shows a value: it removes them outright rather than putting a box in their place.
// s is returned as is when it holds none.
func RemoveEmoji(s string) string {
	if !ContainsEmoji(s) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isEmoji(r) {
			return -1
		}
		return r
	}, s)
}
