package keyword

import (
	"strings"
	"testing"
)

func TestKindOf(t *testing.T) {
	tests := []struct{ keyword, kind string }{
		{"thing1", "thing"},
		{"character_string12", "character_string"},
		{"time3", "time"},
		{"phone_number01", "phone_number"},
		{"const4", "const"},
		{"thing", "thing"},
	}
	for _, tt := range tests {
		if got := KindOf(tt.keyword); got != tt.kind {
			t.Errorf("KindOf(%q) = %q, want %q", tt.keyword, got, tt.kind)
		}
	}
}

func TestValidValue(t *testing.T) {
	tests := []struct {
		kind, value string
		want        bool
	}{
		// thing: 20 characters, any printable mix.
		{"thing", "高等数学期末考试", true},
		{"thing", "Exam: Calculus II, room 3-101", false}, // 29 characters
		{"thing", strings.Repeat("考", 20), true},
		{"thing", strings.Repeat("考", 21), false},
		{"thing", "第一行\n第二行", false},
		{"thing", "", false},
		{"thing", "tab\there", false},
		{"thing", "\xff\xfe", false},
		// number: digits, one decimal point.
		{"number", "12345", true},
		{"number", "3.14", true},
		{"number", "3.", false},
		{"number", ".5", false},
		{"number", "1.2.3", false},
		{"number", "-5", false},
		{"number", strings.Repeat("9", 32), true},
		{"number", strings.Repeat("9", 33), false},
		// letter
		{"letter", "ABCdef", true},
		{"letter", "ABC1", false},
		{"letter", "é", false},
		// symbol: 5 at most, no letters, digits or Chinese.
		{"symbol", "+-*/", true},
		{"symbol", "!!!!!!", false},
		{"symbol", "a!", false},
		// character_string: 32 of digits, letters, symbols; no Chinese.
		{"character_string", "01HZX3K9-2024/A#7", true},
		{"character_string", "测试单号", false},
		{"character_string", strings.Repeat("a", 32), true},
		{"character_string", strings.Repeat("a", 33), false},
		// time: a time of day, optionally after a date; periods with "~".
		{"time", "15:01", true},
		{"time", "15:01:59", true},
		{"time", "9:05", true},
		{"time", "2019年10月1日 15:01", true},
		{"time", "2019年10月1日15:01", true},
		{"time", "2024-07-05 16:16:42", true},
		{"time", "2024/07/05 16:16", true},
		{"time", "15:01~17:30", true},
		{"time", "2024-01-08 09:00 ~ 2024-01-08 11:00", true},
		{"time", "24:00", false},
		{"time", "12:60", false},
		{"time", "2024-07-05", false}, // no time of day
		{"time", "tomorrow 9:00", false},
		{"time", "15:01~", false},
		// date: a date, optionally followed by a time of day.
		{"date", "2019年10月1日", true},
		{"date", "2019年10月", true},
		{"date", "10月1日", true},
		{"date", "2018-01-01", true},
		{"date", "2018/01/01", true},
		{"date", "2018.01.01", true},
		{"date", "2018-01", true},
		{"date", "01-01", true},
		{"date", "2019年10月1日 15:01", true},
		{"date", "2018-01-01~2018-01-31", true},
		{"date", "2018-13-01", false},
		{"date", "2018-01-32", false},
		{"date", "15:01", false},
		{"date", "10月", false},
		{"date", "18-01-01", false},
		// amount: a currency symbol, 12 digits, decimals, 元.
		{"amount", "¥99.00", true},
		{"amount", "￥100元", true},
		{"amount", "$5", true},
		{"amount", "39.8元", true},
		{"amount", "¥" + strings.Repeat("9", 10), true},
		{"amount", "¥" + strings.Repeat("9", 11), false},
		{"amount", "¥12345678.90", true},
		{"amount", "¥123456789.01", false},
		{"amount", "人民币260.00元", false},
		{"amount", "¥¥5", false},
		{"amount", "five", false},
		// phone_number: 17 digits and symbols.
		{"phone_number", "+86-0766-66888866", true},
		{"phone_number", "(010) 6275 1234", true},
		{"phone_number", "+86-0766-668888661", false},
		{"phone_number", "ext.12", false},
		// car_number: 8, Chinese only first and last.
		{"car_number", "粤A8Z888挂", true},
		{"car_number", "京A12345", true},
		{"car_number", "粤A8Z8888挂", false},
		{"car_number", "A京12345", false},
		// name: 10 Chinese, or 20 letters/symbols; a mix counts as Chinese.
		{"name", "张三", true},
		{"name", "欧阳娜娜娜娜娜娜娜娜", true},
		{"name", "欧阳娜娜娜娜娜娜娜娜娜", false},
		{"name", "John Smith", true},
		{"name", "Maximilian Alexander", true},
		{"name", "Maximilian Alexanders", false},
		{"name", "张Tom", true},
		{"name", "张Tomasz Kowalski", false},
		{"name", "R2D2", false},
		// phrase: 5 Chinese characters.
		{"phrase", "配送中", true},
		{"phrase", "审核通过了吧啊", false},
		{"phrase", "ok", false},
		{"phrase", "已通过!", false},
		// const: 20 at most, may be empty.
		{"const", "", true},
		{"const", "课程取消申请单", true},
		{"const", strings.Repeat("x", 21), false},
		// short_thing: 5 characters of any printable kind.
		{"short_thing", "审批", true},
		{"short_thing", "D-3", true},
		{"short_thing", "审批中请等", true},
		{"short_thing", "审批中请稍等", false},
		// enum: the platform's to judge; 20 at most here.
		{"enum", "已发货", true},
		{"enum", "", true},
		{"enum", strings.Repeat("x", 21), false},
		// keyword (old industry templates): cut by the platform, not refused.
		{"keyword", strings.Repeat("考", 30), true},
		{"keyword", "第一行\n第二行", true},
		{"keyword", "a\u202eb", false},
		// unnamed kinds fall back to the thing rule.
		{"unknown", strings.Repeat("审", 20), true},
		{"unknown", strings.Repeat("审", 21), false},
	}
	for _, tt := range tests {
		if got := Valid(tt.kind, tt.value); got != tt.want {
			t.Errorf("Valid(%q, %q) = %v, want %v", tt.kind, tt.value, got, tt.want)
		}
	}
}

// FuzzValidValue feeds arbitrary values to every rule: none may panic, and
// no accepted value may hold a character of a refused class.
func FuzzValidValue(f *testing.F) {
	for _, s := range []string{"15:01", "2019年10月1日 15:01", "¥99.00元", "粤A8Z888挂", "a~b~c", "日日", "年月日", "::", "\u3000", "a\u200bb", "\ue000", "\ufffe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		for _, k := range Kinds() {
			v := value
			if k.Stripped {
				v = Strip(v)
			}
			if Valid(k.Name, value) && strings.ContainsFunc(v, func(r rune) bool { return !Allowed(r) }) {
				t.Fatalf("%s accepted %q", k.Name, value)
			}
		}
	})
}

func TestOf(t *testing.T) {
	for kw, want := range map[string]string{
		"thing1": "thing", "character_string12": "character_string", "short_thing3": "short_thing",
		"const4": "const", "enum": "enum", "enum2": "enum", "enum_string2": "enum_string", "enum_string": "", "keyword1": "keyword", "amount5": "amount",
		"thing": "", "first": "first", "remark": "remark", "remark2": "remark", "things1": "", "memo": "", "Thing1": "", "": "", "1": "",
	} {
		got := ""
		if k := Of(kw); k != nil {
			got = k.Name
		}
		if got != want {
			t.Errorf("Of(%q) = %q, want %q", kw, got, want)
		}
	}
}

func TestStrip(t *testing.T) {
	for in, want := range map[string]string{
		"第一行\n第二行":                       "第一行第二行",
		strings.Repeat("考", 25):          strings.Repeat("考", 20),
		"a\r\nb\u2028c":                  "abc",
		strings.Repeat("考", 19) + "\n考考": strings.Repeat("考", 20),
	} {
		if got := Strip(in); got != want {
			t.Errorf("Strip(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestKindsDocumented checks that every kind states its rule and a length.
func TestKindsDocumented(t *testing.T) {
	for _, k := range Kinds() {
		if k.Rule == "" || k.RuleZH == "" || k.MaxRunes <= 0 || k.valid == nil {
			t.Errorf("kind %q is not fully described", k.Name)
		}
		if !k.Checked && !strings.Contains(k.Rule, "only the platform can check") {
			t.Errorf("kind %q is not checked here and does not say so", k.Name)
		}
	}
}

// TestNewerHanIsChinese: the ideographs of Extension I (Unicode 15.1, newer than Go's tables),
// which the rules take as characters, are Chinese for the kinds that count Chinese too: a
// phrase, a car number's first place, a name of at most 10 of them.
func TestNewerHanIsChinese(t *testing.T) {
	const extI = "\U0002EBF0"
	for _, c := range []struct {
		kind, value string
		want        bool
	}{
		{"phrase", extI, true},
		{"phrase", "已" + extI, true},
		{"car_number", extI + "A12345", true},
		{"name", strings.Repeat(extI, 10), true},
		{"name", strings.Repeat(extI, 11), false},
	} {
		if got := Valid(c.kind, c.value); got != c.want {
			t.Errorf("Valid(%q, %+q) = %v, want %v", c.kind, c.value, got, c.want)
		}
	}
}
