package push

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode"
)

// TestParserKeywordKinds: with class mapped to a character_string keyword and
// time to a time keyword, values the platform would answer 47003 are refused
// at the front end, naming the field, the kind and its rule.
func TestParserKeywordKinds(t *testing.T) {
	p, err := NewParser(map[string]map[string]string{"EN": {"name": "thing1", "class": "character_string2", "time": "time3"}})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"userId":"2020000001","type":"EN","data":{"name":"高等数学期末考试","class":"高等数学一班","time":"下周一上午第三节"}}`
	_, err = p.Parse([]byte(body))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Parse: %v, want a refusal", err)
	}
	want := []string{
		"data.class: character_string allows only letters, digits and symbols, at most 32",
		"data.time: time allows a 24-hour time (15:01 or 15:01:59), a date may precede it (2019年10月1日 15:01, 2019-10-01 15:01); a period joins two with ~",
	}
	if got := ve.Lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, pr := range ve.Problems {
		if pr.Kind() != "keyword" {
			t.Errorf("%v: kind %q, want keyword", pr, pr.Kind())
		}
	}
	// Without the mapping the same body passes: the interface's rules alone.
	if _, err := Parse([]byte(body)); err != nil {
		t.Fatalf("Parse without keywords: %v", err)
	}
	ok := `{"userId":"2020000001","type":"EN","data":{"name":"高等数学期末考试","class":"MATH-101/A","time":"2024-07-05 08:00"}}`
	if _, err := p.Parse([]byte(ok)); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	// A value already refused by the interface's rules gets no second problem.
	long := `{"userId":"2020000001","type":"EN","data":{"name":"x","class":"高等数学一班高等数学一班高等数学一班高等数","time":"15:01"}}`
	_, err = p.Parse([]byte(long))
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Kind() != "length" {
		t.Fatalf("Parse: %v, want one length problem", err)
	}
	// Cleaned characters are cleaned before the kind's rule: the platform
	// gets "MATH 101".
	if req, err := p.Parse([]byte(`{"userId":"u","type":"EN","data":{"name":"x","class":"MATH\u3000101","time":"15:01"}}`)); err != nil || req.Data["class"] != "MATH 101" {
		t.Fatalf("Parse: %v %q", err, req.Data["class"])
	}
}

func TestNewParserRefuses(t *testing.T) {
	_, err := NewParser(map[string]map[string]string{
		"EN":  {"name": "thing1", "class": "things2", "time": "memo", "room": "thing4"},
		"XX":  {"a": "thing1"},
		"TDL": {"list": "thing2", "content": "thing2"},
	})
	if err == nil {
		t.Fatal("NewParser accepted unknown kinds")
	}
	for _, want := range []string{
		`EN.fields.class: keyword "things2" is of no known kind`,
		`EN.fields.time: keyword "memo" is of no known kind`,
		"EN.fields.room: not a field of type EN",
		"TDL.fields: content and list both map to thing2",
		"XX: unknown push type",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	var p *Parser
	if name, k := p.Keyword(TypeEN, "class"); name != "" || k != nil {
		t.Fatal("a nil Parser maps a keyword")
	}
}

// TestIndustryKeywordNotCut: an old industry template's keyword shows 20
// characters, and the platform cuts the rest; a field mapped to one (here the
// header, 200 characters by the interface's rules) is refused beyond them,
// never accepted to reach the user cut short.
func TestIndustryKeywordNotCut(t *testing.T) {
	p, err := NewParser(map[string]map[string]string{"TDL": {"header": "keyword1", "type": "keyword2", "list": "keyword3", "step": "keyword4", "content": "keyword5"}})
	if err != nil {
		t.Fatal(err)
	}
	body := func(header string) []byte {
		return []byte(`{"userId":"2020000001","type":"TDL","data":{"header":"` + header + `","type":"请假审批","list":"学生请假","step":"辅导员审批","content":"张三的请假申请待您审批"}}`)
	}
	_, err = p.Parse(body(strings.Repeat("期末考试安排调整通知", 2) + "请"))
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Field != "data.header" || ve.Problems[0].Kind() != "keyword" {
		t.Fatalf("a 21-character header on keyword1: %v, want one keyword problem of data.header", err)
	}
	if _, err := p.Parse(body(strings.Repeat("期末考试安排调整通知", 2))); err != nil {
		t.Fatalf("a 20-character header on keyword1: %v", err)
	}
}

// TestParserTakesEnumStringKeyword: the platform's template list names an enumerated keyword
// enum_string<N> (keywordCode "enum_string2.DATA", with its enumValueList); a data field maps
// to it, and several values joined by commas are taken.
func TestParserTakesEnumStringKeyword(t *testing.T) {
	p, err := NewParser(map[string]map[string]string{"EN": {"name": "thing1", "class": "enum_string2", "time": "time3"}})
	if err != nil {
		t.Fatalf("NewParser refused a mapping to enum_string2: %v", err)
	}
	body := `{"userId":"2020000001","type":"EN","data":{"name":"高等数学期末考试","class":"客厅,保姆房","time":"15:01"}}`
	if _, err := p.Parse([]byte(body)); err != nil {
		t.Fatalf("Parse: %v", err)
	}
}

// TestVariationSelectorAloneIsBlank: a required main item made only of a
// variation selector shows nothing, and the rule "must not be blank" covers the
// variation selectors: every one of Unicode's Variation_Selector property, the
// Mongolian free variation selectors U+180B–U+180D and U+180F among them.
func TestVariationSelectorAloneIsBlank(t *testing.T) {
	var rs []rune
	for _, r16 := range unicode.Variation_Selector.R16 {
		for r := rune(r16.Lo); r <= rune(r16.Hi); r += rune(r16.Stride) {
			if r != 0xFE0F { // an emoji component, refused as emoji
				rs = append(rs, r)
			}
		}
	}
	for _, r := range rs {
		body := tdl(with(minimal(TypeTDL), "content", string(r)))
		_, err := Parse([]byte(body))
		var ve *ValidationError
		if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].String() != "data.content: must not be blank" {
			t.Errorf("content %U alone: Parse = %v, want data.content: must not be blank", r, err)
		}
		if schemaAccepts(t, []byte(body)) {
			t.Errorf("content %U alone: push.schema.json accepts it as a non-blank main item", r)
		}
	}
}

// TestMainItemNotSentAsUnshownKeyword: the old industry templates' first
// and remark keywords are no longer shown by the platform. A main item mapped
// to one of them reaches the user as nothing at all, which the keyword rules
// exist to prevent ("a user must never read a value cut short unseen"): the
// mapping must be refused, as a keyword of no kind is.
func TestMainItemNotSentAsUnshownKeyword(t *testing.T) {
	for _, kw := range []string{"first", "remark"} {
		p, err := NewParser(map[string]map[string]string{"TDL": {"content": kw, "type": "keyword1", "list": "keyword2", "step": "keyword3"}})
		if err == nil {
			body := tdl(with(minimal(TypeTDL), "content", "关于暑期放假安排的通知"))
			_, perr := p.Parse([]byte(body))
			t.Errorf("NewParser takes TDL content → %s (a keyword the platform does not show); Parse then = %v: the user gets the message without its content", kw, fmt.Sprint(perr))
		} else if !strings.Contains(err.Error(), "TDL.fields.content: a main item cannot go to "+kw) {
			t.Errorf("NewParser refuses TDL content → %s with %v", kw, err)
		}
	}
}

// TestEmptyOptionalMappedFieldNotGiven: an optional field (header, remark) given as "" is
// accepted by push.schema.json and by the interface (the OpenAPI description's WR example sends
// "remark": ""). Mapped to a keyword of a kind that takes no empty value, it is not given: the
// body is accepted and the keyword not sent, rather than refused by a rule "" seems to meet. A
// value of removed characters alone (U+200B) is empty too.
func TestEmptyOptionalMappedFieldNotGiven(t *testing.T) {
	p, err := NewParser(map[string]map[string]string{
		"WR":  {"title": "thing1", "date": "date2", "content": "thing3", "remark": "thing4"},
		"TDL": {"header": "thing9", "type": "thing1", "list": "thing2", "step": "thing3", "content": "thing4"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ body, field string }{
		{`{"userId":"T2019001","type":"WR","data":{"header":"工作提醒","title":"提交本周周报","date":"2026-11-27","content":"请于周五前在系统中提交","remark":""}}`, "remark"},
		{`{"userId":"u1","type":"TDL","data":{"header":"","type":"请假审批","list":"学生请假","step":"辅导员审批","content":"张三的请假申请"}}`, "header"},
		{`{"userId":"u1","type":"TDL","data":{"header":"\u200b","type":"请假审批","list":"学生请假","step":"辅导员审批","content":"张三的请假申请"}}`, "header"},
	} {
		if !schemaAccepts(t, []byte(c.body)) {
			t.Fatalf("push.schema.json refuses %s", c.body)
		}
		req, err := p.Parse([]byte(c.body))
		if err != nil {
			t.Errorf("the schema accepts, the account's parser refuses:\n  %s\n  %v", c.body, err)
			continue
		}
		if v, ok := req.Data[c.field]; ok {
			t.Errorf("%s: data.%s = %q is sent; an empty optional keyword is not given", c.body, c.field, v)
		}
	}
	// A required field given empty stays refused.
	if _, err := p.Parse([]byte(`{"userId":"u1","type":"TDL","data":{"type":"请假审批","list":"学生请假","step":"辅导员审批","content":""}}`)); err == nil {
		t.Error("an empty required content is accepted")
	}
}
