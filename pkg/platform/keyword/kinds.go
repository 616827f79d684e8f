package keyword

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The keyword value rules of category templates ("类目模板") and subscription
// templates, as the platform documents them in its table of parameter kinds
// ("订阅消息参数值内容限制说明", on the page "发送订阅消息" of the mini program
// server API, developers.weixin.qq.com/miniprogram/dev/OpenApiDoc/
// mp-message-management/subscribe-message/sendMessage.html, which the
// official account's template message documentation refers category
// templates to). Each keyword is named by its kind followed by digits
// (thing1, character_string2, time3); the kind decides what its value may
// hold. Kinds lists them with their rules; what the table does not say is
// marked where it is decided:
//
//   - short_thing is not in the table; the platform holds it to 5
//     characters of the thing alphabet.
//   - const and enum values must be among those approved for the template,
//     which only the platform knows: they cannot be checked here, beyond the
//     character classes and 20 characters.
//   - keyword (keyword1, keyword2, … of the old industry templates) has no
//     rule that refuses: since the announcement of 2023-05-04 ("关于规范公众号
//     模板消息的再次公告") the platform shows at most 20 characters of each and
//     removes line breaks itself (Strip); it removes their first and remark
//     lines altogether.
//
// "Symbols" are the common characters other than Chinese, letters and digits.
// No value of any kind may hold a character of the classes in chars.go (line
// breaks, controls, spaces other than U+0020, formatting characters, private
// use, code points that are not characters). Lengths count characters
// (runes), not bytes.

// Kind is one kind of template keyword and the rule of its values.
type Kind struct {
	// Name is the kind as keyword names start with it: thing, time, ….
	Name string
	// MaxRunes is the longest value in characters; for time, date and amount
	// the longest the format allows.
	MaxRunes int
	// Rule says in words what a value may hold, after the kind's name:
	// "character_string allows only letters, digits and symbols, at most 32".
	Rule string
	// RuleZH is Rule as the platform's table says it.
	RuleZH string
	// Checked is false for the kinds whose values only the platform can
	// check (const, enum): the front end holds them to the character
	// classes and MaxRunes only.
	Checked bool
	// Stripped is true for the old industry templates' keywords, whose
	// over-long values and line breaks the platform cuts instead of
	// refusing them.
	Stripped bool
	// Unshown is true for the old industry templates' first and remark,
	// which the platform takes whatever they hold, empty too, and no
	// longer shows.
	Unshown bool
	valid   func(s string, n int) bool
}

// String returns the kind's name and rule, as a refusal states it.
func (k *Kind) String() string { return k.Name + " " + k.Rule }

// kinds is the table, in the order of the platform's documentation.
var kinds = []Kind{
	{Name: "thing", MaxRunes: 20, Checked: true,
		Rule: "allows Chinese, letters, digits and symbols, at most 20", RuleZH: "20个以内字符，可汉字、数字、字母或符号组合",
		valid: func(_ string, n int) bool { return n <= 20 }},
	{Name: "number", MaxRunes: 32, Checked: true,
		Rule: "allows only digits, with at most one decimal point, at most 32", RuleZH: "32位以内数字，只能数字，可带小数",
		valid: func(s string, n int) bool { return n <= 32 && isDecimal(s) }},
	{Name: "letter", MaxRunes: 32, Checked: true,
		Rule: "allows only letters, at most 32", RuleZH: "32位以内字母，只能字母",
		valid: func(s string, n int) bool { return n <= 32 && allRunes(s, isASCIILetter) }},
	{Name: "symbol", MaxRunes: 5, Checked: true,
		Rule: "allows only symbols, at most 5", RuleZH: "5位以内符号，只能符号",
		valid: func(s string, n int) bool { return n <= 5 && allRunes(s, isSymbol) }},
	{Name: "character_string", MaxRunes: 32, Checked: true,
		Rule: "allows only letters, digits and symbols, at most 32", RuleZH: "32位以内数字、字母或符号，可数字、字母或符号组合",
		valid: func(s string, n int) bool {
			return n <= 32 && allRunes(s, func(r rune) bool { return isASCIILetter(r) || isASCIIDigit(r) || isSymbol(r) })
		}},
	{Name: "time", MaxRunes: 41, Checked: true,
		Rule:   "allows a 24-hour time (15:01 or 15:01:59), a date may precede it (2019年10月1日 15:01, 2019-10-01 15:01); a period joins two with ~",
		RuleZH: "24小时制时间格式（支持+年月日），支持填时间段，两个时间点之间用“~”符号连接",
		valid:  func(s string, _ int) bool { return validPeriod(s, true) }},
	{Name: "date", MaxRunes: 41, Checked: true,
		Rule:   "allows a date (2019年10月1日, 2019年10月, 10月1日, 2019-10-01, 2019/10/01, 2019.10.01, 2019-10, 10-01), a 24-hour time may follow it; a period joins two with ~",
		RuleZH: "年月日格式（支持+24小时制时间），支持填时间段，两个时间点之间用“~”符号连接",
		valid:  func(s string, _ int) bool { return validPeriod(s, false) }},
	{Name: "amount", MaxRunes: 13, Checked: true,
		Rule:   "allows a currency symbol and at most 10 digits, decimals included, and may end in 元 (¥99.00, 39.8元)",
		RuleZH: "1个币种符号+10位以内纯数字，可带小数，结尾可带“元”",
		valid:  func(s string, _ int) bool { return validAmount(s) }},
	{Name: "phone_number", MaxRunes: 17, Checked: true,
		Rule: "allows only digits and symbols, at most 17", RuleZH: "17位以内，数字、符号",
		valid: func(s string, n int) bool {
			return n <= 17 && allRunes(s, func(r rune) bool { return isASCIIDigit(r) || isSymbol(r) })
		}},
	{Name: "car_number", MaxRunes: 8, Checked: true,
		Rule: "allows letters and digits, Chinese only first and last, at most 8", RuleZH: "8位以内，第一位与最后一位可为汉字，其余为字母或数字",
		valid: validCarNumber},
	{Name: "name", MaxRunes: 20, Checked: true,
		Rule:   "allows at most 10 Chinese characters, or at most 20 letters and symbols; a mix of Chinese and letters is held to 10",
		RuleZH: "10个以内纯汉字或20个以内纯字母或符号；中文和字母混合按中文名算，10个字内",
		valid:  validName},
	{Name: "phrase", MaxRunes: 5, Checked: true,
		Rule: "allows only Chinese characters, at most 5", RuleZH: "5个以内汉字",
		valid: func(s string, n int) bool { return n <= 5 && allRunes(s, isHan) }},
	{Name: "short_thing", MaxRunes: 5, Checked: true,
		Rule: "allows Chinese, letters, digits and symbols, at most 5", RuleZH: "5个以内字符（平台参数表未列出）",
		valid: func(_ string, n int) bool { return n <= 5 }},
	{Name: "const", MaxRunes: 20,
		Rule:   "allows only the values approved for the template, which only the platform can check; here at most 20 characters",
		RuleZH: "常量：只能填模板审核通过的值，无法在本地校验",
		valid:  func(_ string, n int) bool { return n <= 20 }},
	{Name: "enum", MaxRunes: 20,
		Rule:   "allows only the template's enumerated values, which only the platform can check; here at most 20 characters",
		RuleZH: "枚举值：只能上传枚举值范围内的字段值，无法在本地校验",
		valid:  func(_ string, n int) bool { return n <= 20 }},
	// The templates' list names the same kind enum_string<N> (keywordCode "enum_string2.DATA",
	// with its enumValueList); several values are sent joined by commas.
	{Name: "enum_string", MaxRunes: 20,
		Rule:   "allows only the template's enumerated values, several joined by commas, which only the platform can check; here at most 20 characters",
		RuleZH: "枚举值：只能上传枚举值范围内的字段值（多个以逗号分隔），无法在本地校验",
		valid:  func(_ string, n int) bool { return n <= 20 }},
	{Name: "keyword", MaxRunes: 20, Checked: true, Stripped: true,
		Rule:   "(old industry template) shows at most 20 characters and no line breaks; the platform cuts the rest",
		RuleZH: "行业模板关键词：单个字段不超过20个字，不支持换行，超出部分由平台去除（2023年5月4日公告）",
		valid:  func(string, int) bool { return true }},
	{Name: "first", MaxRunes: 200, Checked: true, Stripped: true, Unshown: true,
		Rule:   "(old industry template) is the first line, which the platform no longer shows",
		RuleZH: "行业模板首行内容：平台已去除，不再显示（2023年5月4日公告）",
		valid:  func(string, int) bool { return true }},
	{Name: "remark", MaxRunes: 200, Checked: true, Stripped: true, Unshown: true,
		Rule:   "(old industry template) is the remark, which the platform no longer shows",
		RuleZH: "行业模板备注：平台已去除，不再显示（2023年5月4日公告）",
		valid:  func(string, int) bool { return true }},
}

// Kinds returns a copy of the table of keyword kinds.
func Kinds() []Kind { return append([]Kind(nil), kinds...) }

// Lookup returns the kind named kind, or nil if the platform documents no
// such kind.
func Lookup(kind string) *Kind {
	for i := range kinds {
		if kinds[i].Name == kind {
			return &kinds[i]
		}
	}
	return nil
}

// KindOf returns the kind of a keyword name: the name without its trailing
// digits, so "thing4" is of kind "thing".
func KindOf(keyword string) string {
	return strings.TrimRight(keyword, "0123456789")
}

// Of returns the kind of a keyword name, or nil if its kind is not known.
// A known kind's name must be followed by digits, except those the platform
// also names without: enum (enum.DATA), const, and the old industry
// templates' first and remark.
func Of(keyword string) *Kind {
	k := Lookup(KindOf(keyword))
	if k == nil {
		return nil
	}
	switch {
	case k.Name != keyword:
		return k
	case k.Name == "enum", k.Name == "const", k.Name == "first", k.Name == "remark":
		return k
	}
	return nil
}

// Valid reports whether the platform accepts value for a keyword of kind;
// invalid UTF-8 is never accepted. Kinds the table does not name are held to
// the thing rule. The values of a Stripped kind are valid whatever their
// length and line breaks: the platform cuts them (Strip).
func Valid(kind, value string) bool {
	k := Lookup(kind)
	if k == nil {
		k = &kinds[0]
	}
	if k.Stripped {
		value = Strip(value)
	}
	// The character classes hold for every kind, whatever its own rule
	// would make of the character (a time's TrimSpace would take U+3000).
	if !utf8.ValidString(value) || !allRunes(value, Allowed) {
		return false
	}
	n := utf8.RuneCountInString(value)
	if n == 0 {
		return !k.Checked || k.Unshown // an empty const or enum is the platform's to judge
	}
	return k.valid(value, n)
}

// Cut reports whether the platform shows less of value than was sent, for a
// keyword of kind: an old industry template's keyword (kind "keyword") past 20
// characters or holding a line break (Strip).
func Cut(kind, value string) bool { return kind == "keyword" && Strip(value) != value }

// Strip returns what the platform shows of a value of an old industry
// template's keyword: line breaks removed, at most 20 characters.
func Strip(value string) string {
	value = strings.Map(func(r rune) rune {
		if unicode.Is(lineBreaks, r) {
			return -1
		}
		return r
	}, value)
	if utf8.RuneCountInString(value) <= 20 {
		return value
	}
	n := 0
	for i := range value {
		if n == 20 {
			return value[:i]
		}
		n++
	}
	return value
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
func isHan(r rune) bool         { return unicode.Is(unicode.Han, r) || unicode.Is(newerHan, r) }

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

// validAmount: a currency symbol, digits (10 at most, decimals included)
// with an optional decimal part, and an optional trailing 元. The table
// reads "1个币种符号+10位以内纯数字"; the symbol is optional here because the
// platform accepts amounts without one (13.10, 39.8元) in the field.
func validAmount(s string) bool {
	if r, size := utf8.DecodeRuneInString(s); unicode.Is(unicode.Sc, r) {
		s = s[size:]
	}
	s = strings.TrimSuffix(s, "元")
	if !isDecimal(s) {
		return false
	}
	return len(s)-strings.Count(s, ".") <= 10
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
