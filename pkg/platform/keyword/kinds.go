package keyword

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The keyword value rules of category templates ("类目模板", the template
// rules in force since 2023), as the platform documents them in the
// template message interface and its parameter table. Each keyword is named
// by its kind followed by digits (thing1, character_string2, time3); the
// kind decides what its value may hold:
//
//	thing             20 characters at most: Chinese, digits, letters, symbols
//	number            32 at most: digits, may carry a decimal point
//	letter            32 at most: letters only
//	symbol            5 at most: symbols only
//	character_string  32 at most: digits, letters, symbols (no Chinese)
//	time              24-hour time (HH:MM or HH:MM:SS), a date may precede it;
//	                  a period joins two points with "~"
//	date              a date (y年m月d日, y年m月, m月d日 or joined by - / .), a
//	                  time may follow; a period joins two points with "~"
//	amount            one currency symbol + 12 digits at most, may carry
//	                  decimals, may end in 元
//	phone_number      17 at most: digits and symbols
//	car_number        8 at most: the first and last may be Chinese, the
//	                  others letters or digits
//	name              10 Chinese characters at most, or 20 letters/symbols at
//	                  most; a mix of Chinese and letters counts as Chinese
//	phrase            5 Chinese characters at most
//	const             20 at most, may be empty (the platform also requires
//	                  the value to be one approved for the template, which
//	                  the simulator does not model)
//
// "Symbols" are the common characters other than Chinese, letters and digits.
// No value of any kind may hold a character of the classes in chars.go (line
// breaks, controls, spaces other than U+0020, formatting characters, private
// use, code points that are not characters). Lengths count characters
// (runes), not bytes. Kinds the table does not name are held to the thing
// rule.

// KindOf returns the kind of a keyword name: the name without its trailing
// digits, so "thing4" is of kind "thing".
func KindOf(keyword string) string {
	return strings.TrimRight(keyword, "0123456789")
}

// Valid reports whether the platform accepts value for a keyword of kind;
// invalid UTF-8 is never accepted.
func Valid(kind, value string) bool {
	// The character classes hold for every kind, whatever its own rule
	// would make of the character (a time's TrimSpace would take U+3000).
	if !utf8.ValidString(value) || !allRunes(value, Allowed) {
		return false
	}
	n := utf8.RuneCountInString(value)
	if kind == "const" {
		return n <= 20
	}
	if n == 0 {
		return false
	}
	switch kind {
	case "number":
		return n <= 32 && isDecimal(value)
	case "letter":
		return n <= 32 && allRunes(value, isASCIILetter)
	case "symbol":
		return n <= 5 && allRunes(value, isSymbol)
	case "character_string":
		return n <= 32 && allRunes(value, func(r rune) bool { return isASCIILetter(r) || isASCIIDigit(r) || isSymbol(r) })
	case "time":
		return validPeriod(value, true)
	case "date":
		return validPeriod(value, false)
	case "amount":
		return validAmount(value)
	case "phone_number":
		return n <= 17 && allRunes(value, func(r rune) bool { return isASCIIDigit(r) || isSymbol(r) })
	case "car_number":
		return validCarNumber(value, n)
	case "name":
		return validName(value, n)
	case "phrase":
		return n <= 5 && allRunes(value, isHan)
	default: // thing and kinds the table does not name
		return n <= 20
	}
}

func allRunes(s string, ok func(rune) bool) bool {
	for _, r := range s {
		if !ok(r) {
			return false
		}
	}
	return true
}

func isASCIIDigit(r rune) bool  { return r >= '0' && r <= '9' }
func isASCIILetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }
func isHan(r rune) bool         { return unicode.Is(unicode.Han, r) }

// isSymbol is a printable character that is not Chinese, a letter or a digit.
func isSymbol(r rune) bool {
	return Allowed(r) && !isHan(r) && !unicode.IsLetter(r) && !unicode.IsDigit(r)
}

// isDecimal is digits with at most one decimal point inside them.
func isDecimal(s string) bool {
	intPart, frac, hasDot := strings.Cut(s, ".")
	if intPart == "" || !allRunes(intPart, isASCIIDigit) {
		return false
	}
	return !hasDot || (frac != "" && allRunes(frac, isASCIIDigit))
}

// validAmount: an optional currency symbol, digits (12 at most, decimals
// included) with an optional decimal part, and an optional trailing 元.
func validAmount(s string) bool {
	if r, size := utf8.DecodeRuneInString(s); unicode.Is(unicode.Sc, r) {
		s = s[size:]
	}
	s = strings.TrimSuffix(s, "元")
	if !isDecimal(s) {
		return false
	}
	return len(s)-strings.Count(s, ".") <= 12
}

func validCarNumber(s string, n int) bool {
	if n > 8 {
		return false
	}
	i := 0
	for _, r := range s {
		edge := i == 0 || i == n-1
		if !(isASCIILetter(r) || isASCIIDigit(r) || edge && isHan(r)) {
			return false
		}
		i++
	}
	return true
}

func validName(s string, n int) bool {
	han := false
	for _, r := range s {
		switch {
		case isHan(r):
			han = true
		case isASCIILetter(r) || isSymbol(r):
		default:
			return false
		}
	}
	if han {
		return n <= 10
	}
	return n <= 20
}

// validPeriod checks a time (needTime) or date value: one point, or two
// joined by "~".
func validPeriod(s string, needTime bool) bool {
	from, to, isPeriod := strings.Cut(s, "~")
	if !validPoint(strings.TrimSpace(from), needTime) {
		return false
	}
	return !isPeriod || validPoint(strings.TrimSpace(to), needTime)
}

// validPoint checks one point in time: a date, a time of day, or a date and
// a time. A time value needs the time of day, a date value needs the date.
func validPoint(s string, needTime bool) bool {
	var datePart, timePart string
	if d, t, ok := strings.Cut(s, " "); ok {
		datePart, timePart = d, strings.TrimSpace(t)
	} else if i := strings.Index(s, "日"); i >= 0 && i+len("日") < len(s) {
		datePart, timePart = s[:i+len("日")], s[i+len("日"):]
	} else if strings.Contains(s, ":") {
		timePart = s
	} else {
		datePart = s
	}
	if needTime && timePart == "" || !needTime && datePart == "" {
		return false
	}
	return (datePart == "" || validDate(datePart)) && (timePart == "" || validClock(timePart))
}

// validClock is HH:MM or HH:MM:SS on a 24-hour clock; the hour may have one
// digit.
func validClock(s string) bool {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return false
	}
	if h, ok := smallNumber(parts[0], 1, 2); !ok || h > 23 {
		return false
	}
	for _, p := range parts[1:] {
		if v, ok := smallNumber(p, 2, 2); !ok || v > 59 {
			return false
		}
	}
	return true
}

// validDate accepts y年m月d日, y年m月, m月d日, and y-m-d, y-m, m-d with "-",
// "/" or "." between the parts. A year has four digits.
func validDate(s string) bool {
	if strings.ContainsAny(s, "年月日") {
		return validChineseDate(s)
	}
	var parts []string
	for _, sep := range []string{"-", "/", "."} {
		if strings.Contains(s, sep) {
			parts = strings.Split(s, sep)
			break
		}
	}
	switch len(parts) {
	case 3:
		return isYear(parts[0]) && isMonth(parts[1]) && isDay(parts[2])
	case 2:
		if len(parts[0]) == 4 {
			return isYear(parts[0]) && isMonth(parts[1])
		}
		return isMonth(parts[0]) && isDay(parts[1])
	}
	return false
}

func validChineseDate(s string) bool {
	y, rest, hasYear := strings.Cut(s, "年")
	if !hasYear {
		rest = s
	} else if !isYear(y) {
		return false
	}
	m, rest, hasMonth := strings.Cut(rest, "月")
	if !hasMonth || !isMonth(m) {
		return false
	}
	if rest == "" {
		return hasYear // y年m月; a lone m月 is not a date
	}
	d, tail, hasDay := strings.Cut(rest, "日")
	return hasDay && tail == "" && isDay(d)
}

func isYear(s string) bool  { _, ok := smallNumber(s, 4, 4); return ok }
func isMonth(s string) bool { v, ok := smallNumber(s, 1, 2); return ok && v >= 1 && v <= 12 }
func isDay(s string) bool   { v, ok := smallNumber(s, 1, 2); return ok && v >= 1 && v <= 31 }

// smallNumber parses an ASCII number of minLen to maxLen digits.
func smallNumber(s string, minLen, maxLen int) (int, bool) {
	if len(s) < minLen || len(s) > maxLen {
		return 0, false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		if !isASCIIDigit(rune(s[i])) {
			return 0, false
		}
		v = v*10 + int(s[i]-'0')
	}
	return v, true
}
