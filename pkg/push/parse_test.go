package push

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// A typical TDL body, used by tests and benchmarks.
const tdlBody = `{
  "userId": "2021012345",
  "type": "TDL",
  "url": "https://oa.example.edu.cn/todo/detail?id=88231&from=wx",
  "time": 1714800000,
  "data": {
    "header": "您有一条新的待办事项",
    "type": "公文审批",
    "list": "校长办公室发文",
    "step": "部门负责人审核",
    "content": "关于2024年暑期放假安排的通知",
    "remark": "请于三个工作日内处理"
  }
}`

type parseCase struct {
	name string
	body string
	// want lists the problems as "field: rule"; nil means Parse accepts.
	want []string
	// req, if set, is compared with the Request of an accepted body.
	req *Request
}

// body builds a push body from its parts; fields with a nil value are left
// out, and raw JSON is given as raw("...").
type raw string

func mkBody(fields ...any) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(fields); i += 2 {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:", fields[i])
		switch v := fields[i+1].(type) {
		case raw:
			b.WriteString(string(v))
		case string:
			b.WriteString(jsonString(v))
		case map[string]string:
			b.WriteByte('{')
			for j, k := range slices.Sorted(maps.Keys(v)) {
				if j > 0 {
					b.WriteByte(',')
				}
				b.WriteString(jsonString(k) + ":" + jsonString(v[k]))
			}
			b.WriteByte('}')
		default:
			panic(fmt.Sprintf("mkBody: %T", v))
		}
	}
	b.WriteByte('}')
	return b.String()
}

func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// minimal returns data with every main item of t set to a short value.
func minimal(t Type) map[string]string {
	d := map[string]string{}
	for _, f := range spec(string(t)).Fields {
		if f.Required {
			d[f.Name] = "值" + f.Name
		}
	}
	return d
}

func with(d map[string]string, kv ...string) map[string]string {
	d = maps.Clone(d)
	for i := 0; i+1 < len(kv); i += 2 {
		d[kv[i]] = kv[i+1]
	}
	return d
}

func without(d map[string]string, keys ...string) map[string]string {
	d = maps.Clone(d)
	for _, k := range keys {
		delete(d, k)
	}
	return d
}

func tdl(data map[string]string, extra ...any) string {
	return mkBody(append([]any{"userId", "u1", "type", "TDL", "data", data}, extra...)...)
}

func parseCases() []parseCase {
	typeList := "TDL, EN, JML, WR, JDS, FWR, MDAN, AR, OPPAN"
	d := minimal(TypeTDL)
	twenty := strings.Repeat("中", 20)
	cases := []parseCase{
		// Accepted bodies.
		{name: "typical TDL", body: tdlBody, req: &Request{
			UserID: "2021012345", Type: TypeTDL,
			URL: "https://oa.example.edu.cn/todo/detail?id=88231&from=wx",
			Data: map[string]string{
				"header": "您有一条新的待办事项", "type": "公文审批", "list": "校长办公室发文",
				"step": "部门负责人审核", "content": "关于2024年暑期放假安排的通知", "remark": "请于三个工作日内处理",
			},
			Time: time.Unix(1714800000, 0).UTC(),
		}},
		{name: "main items only", body: tdl(d), req: &Request{UserID: "u1", Type: TypeTDL, Data: d}},
		{name: "20 runes of Chinese", body: tdl(with(d, "content", twenty))},
		{name: "200 runes of header", body: tdl(with(d, "header", strings.Repeat("中", 200), "remark", strings.Repeat("a", 200)))},
		{name: "empty header and remark", body: tdl(with(d, "header", "", "remark", ""))},
		{name: "blank header", body: tdl(with(d, "header", "   "))},
		{name: "CJK punctuation and symbols", body: tdl(with(d, "content", "“通知”：《办法》【第①条】，温度℃。", "step", "№１２３　ＡＢＣ"))},
		{name: "escaped strings", body: `{"userId":"u\u0031","type":"T\u0044L","data":{"type":"\u4e2d\/\"\\","list":"a","step":"b","content":"\u00e9\ud840\udc0b"}}`,
			req: &Request{UserID: "u1", Type: TypeTDL, Data: map[string]string{"type": "中/\"\\", "list": "a", "step": "b", "content": "é𠀋"}}},
		{name: "more data keys than any type has", body: `{"userId":"u1","type":"TDL","data":{"type":"a","list":"b","step":"c","content":"d","k1":"1","k2":"2","k3":"3","k4":"4","k5":"5","k6":"6"}}`,
			want: []string{"data.k1: not a field of type TDL", "data.k2: not a field of type TDL", "data.k3: not a field of type TDL",
				"data.k4: not a field of type TDL", "data.k5: not a field of type TDL", "data.k6: not a field of type TDL"}},
		// A lone surrogate escape stands for no character: the text is not JSON we accept.
		{name: "lone high surrogate", body: `{"userId":"u1","type":"TDL","data":{"type":"a","list":"b","step":"c","content":"\ud83d"}}`, want: []string{"body: not valid JSON: \\ud83d at byte 80 is a lone surrogate escape, half of a UTF-16 pair, which stands for no character"}},
		{name: "lone low surrogate", body: `{"userId":"u1","type":"TDL","data":{"type":"a","list":"b","step":"c","content":"x\udc00y"}}`, want: []string{"body: not valid JSON: \\udc00 at byte 81 is a lone surrogate escape, half of a UTF-16 pair, which stands for no character"}},
		{name: "surrogates in the wrong order", body: `{"userId":"u1","type":"TDL","data":{"type":"a","list":"b","step":"c","content":"\udc00\ud800"}}`, want: []string{"body: not valid JSON: \\udc00 at byte 80 is a lone surrogate escape, half of a UTF-16 pair, which stands for no character"}},
		{name: "white space around", body: " \t\r\n" + tdl(d) + "\n\n"},
		{name: "userId characters", body: mkBody("userId", "A-z_0.9", "type", "TDL", "data", d)},
		{name: "userId of 64", body: mkBody("userId", strings.Repeat("1", 64), "type", "TDL", "data", d)},
		{name: "url null", body: tdl(d, "url", raw("null"))},
		{name: "url empty", body: tdl(d, "url", ""), req: &Request{UserID: "u1", Type: TypeTDL, Data: d}},
		{name: "url http", body: tdl(d, "url", "http://a")},
		{name: "url upper case scheme", body: tdl(d, "url", "HTTPS://Example.EDU.cn:8443/x")},
		{name: "url IPv4", body: tdl(d, "url", "http://10.0.0.1:80/?q#f")},
		{name: "url query only", body: tdl(d, "url", "https://a.b?x=1&y=%E4%B8%AD")},
		{name: "url fragment", body: tdl(d, "url", "https://a.b#/route/1")},
		{name: "url Chinese path", body: tdl(d, "url", "https://a.b/通知/详情")},
		{name: "url of 1024", body: tdl(d, "url", "https://a.b/"+strings.Repeat("x", 1024-len("https://a.b/")))},
		{name: "time null", body: tdl(d, "time", raw("null"))},
		{name: "time seconds string", body: tdl(d, "time", "1700000000"),
			req: &Request{UserID: "u1", Type: TypeTDL, Data: d, Time: time.Unix(1700000000, 0).UTC()}},
		{name: "time millis string", body: tdl(d, "time", "1700000000123"),
			req: &Request{UserID: "u1", Type: TypeTDL, Data: d, Time: time.UnixMilli(1700000000123).UTC()}},
		{name: "time millis number", body: tdl(d, "time", raw("1700000000123")),
			req: &Request{UserID: "u1", Type: TypeTDL, Data: d, Time: time.UnixMilli(1700000000123).UTC()}},
		{name: "time 1.7e9", body: tdl(d, "time", raw("1.7e9")),
			req: &Request{UserID: "u1", Type: TypeTDL, Data: d, Time: time.Unix(1700000000, 0).UTC()}},
		{name: "time 1.7E+12", body: tdl(d, "time", raw("1.7E+12")),
			req: &Request{UserID: "u1", Type: TypeTDL, Data: d, Time: time.UnixMilli(1700000000000).UTC()}},
		{name: "time with zero fraction", body: tdl(d, "time", raw("1700000000.000"))},
		{name: "time negative exponent", body: tdl(d, "time", raw("17000000000e-1"))},
		{name: "time lowest seconds", body: tdl(d, "time", raw("1e9"))},
		{name: "time highest seconds", body: tdl(d, "time", raw("9999999999"))},
		{name: "time lowest millis", body: tdl(d, "time", raw("1000000000000"))},
		{name: "time highest millis", body: tdl(d, "time", "9999999999999")},

		// Whole-body problems.
		{name: "empty", body: ``, want: []string{"body: not valid JSON"}},
		{name: "unclosed", body: `{"userId":"u1"`, want: []string{"body: not valid JSON"}},
		{name: "trailing comma", body: `{"userId":"u1",}`, want: []string{"body: not valid JSON"}},
		{name: "trailing garbage", body: tdl(d) + `x`, want: []string{"body: not valid JSON"}},
		{name: "two objects", body: `{}{}`, want: []string{"body: not valid JSON"}},
		{name: "single quotes", body: `{'userId':'u1'}`, want: []string{"body: not valid JSON"}},
		{name: "raw tab in string", body: "{\"userId\":\"u\t1\"}", want: []string{"body: not valid JSON"}},
		{name: "bad escape", body: `{"userId":"\x41"}`, want: []string{"body: not valid JSON"}},
		{name: "leading zero", body: `{"time":01}`, want: []string{"body: not valid JSON"}},
		{name: "bad value in unknown field", body: `{"x":[1,]}`, want: []string{"body: not valid JSON"}},
		{name: "array", body: `[1]`, want: []string{"body: must be a JSON object"}},
		{name: "string", body: `"x"`, want: []string{"body: must be a JSON object"}},
		{name: "invalid UTF-8", body: "{\"userId\":\"\xff\"}", want: []string{"body: not valid UTF-8"}},
		{name: "too large", body: tdl(with(d, "remark", strings.Repeat("a", MaxBodyBytes))), want: []string{"body: larger than 65536 bytes"}},
		{name: "empty object", body: `{}`, want: []string{"userId: required", "type: required", "data: required"}},

		// userId.
		{name: "userId null", body: mkBody("userId", raw("null"), "type", "TDL", "data", d), want: []string{"userId: required"}},
		{name: "userId empty", body: mkBody("userId", "", "type", "TDL", "data", d), want: []string{"userId: required"}},
		{name: "userId number", body: mkBody("userId", raw("2021012345"), "type", "TDL", "data", d), want: []string{"userId: must be a string"}},
		{name: "userId of 65", body: mkBody("userId", strings.Repeat("1", 65), "type", "TDL", "data", d), want: []string{"userId: 65 characters, at most 64"}},
		{name: "userId with space", body: mkBody("userId", "a b", "type", "TDL", "data", d), want: []string{"userId: may contain only letters, digits, '.', '_' and '-'"}},
		{name: "userId trailing newline", body: mkBody("userId", "u1\n", "type", "TDL", "data", d), want: []string{"userId: may contain only letters, digits, '.', '_' and '-'"}},
		{name: "userId Chinese", body: mkBody("userId", "张三", "type", "TDL", "data", d), want: []string{"userId: may contain only letters, digits, '.', '_' and '-'"}},
		{name: "userId twice", body: `{"userId":"a","userId":"b","type":"TDL","data":` + mkData(d) + `}`, want: []string{"userId: duplicate key"}},

		// type.
		{name: "type unknown", body: mkBody("userId", "u1", "type", "XYZ", "data", d), want: []string{`type: "XYZ" is not one of ` + typeList}},
		{name: "type lower case", body: mkBody("userId", "u1", "type", "tdl", "data", d), want: []string{`type: "tdl" is not one of ` + typeList}},
		{name: "type long", body: mkBody("userId", "u1", "type", strings.Repeat("X", 40)+"\n", "data", d), want: []string{`type: "` + strings.Repeat("X", 32) + `"… is not one of ` + typeList}},
		{name: "type number", body: mkBody("userId", "u1", "type", raw("1"), "data", d), want: []string{"type: must be a string"}},
		{name: "type empty", body: mkBody("userId", "u1", "type", "", "data", d), want: []string{"type: required"}},

		// url.
		{name: "url ftp", body: tdl(d, "url", "ftp://a.b/x"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url relative", body: tdl(d, "url", "/todo/1"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url scheme-relative", body: tdl(d, "url", "//a.b/x"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url no host", body: tdl(d, "url", "http://"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url no host but path", body: tdl(d, "url", "http:///x"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url user info", body: tdl(d, "url", "https://u:p@a.b/"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url space", body: tdl(d, "url", "https://a.b/x y"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url ideographic space", body: tdl(d, "url", "https://a.b/x\u3000y"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url trailing newline", body: tdl(d, "url", "https://a.b\n"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url newline", body: tdl(d, "url", "https://a.b/\n"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url empty port", body: tdl(d, "url", "https://a.b:/"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url long port", body: tdl(d, "url", "https://a.b:123456/"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url host ends in dot", body: tdl(d, "url", "https://a.b./"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url host starts with dash", body: tdl(d, "url", "https://-a.b/"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url IPv6", body: tdl(d, "url", "http://[2001:db8::1]:80/"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url unclosed IPv6", body: tdl(d, "url", "http://[::1/"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url bad escape", body: tdl(d, "url", "https://a.b/%zz"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url cut escape", body: tdl(d, "url", "https://a.b/%4"), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url backslash host", body: tdl(d, "url", `https://a.b\x`), want: []string{"url: must be an absolute http or https URL"}},
		{name: "url of 1025", body: tdl(d, "url", "https://a.b/"+strings.Repeat("x", 1025-len("https://a.b/"))), want: []string{"url: 1025 characters, at most 1024"}},
		{name: "url long and bad", body: tdl(d, "url", "ftp://a.b/"+strings.Repeat("x", 1100)), want: []string{"url: 1110 characters, at most 1024", "url: must be an absolute http or https URL"}},
		{name: "url number", body: tdl(d, "url", raw("1")), want: []string{"url: must be a string"}},

		// time.
		{name: "time fraction", body: tdl(d, "time", raw("1700000000.5")), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time tiny fraction", body: tdl(d, "time", raw("1700000000.0000000000000001")), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time 1.5", body: tdl(d, "time", raw("1.5")), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time short", body: tdl(d, "time", raw("123")), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time zero", body: tdl(d, "time", raw("0")), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time negative", body: tdl(d, "time", raw("-1700000000")), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time 11 digits", body: tdl(d, "time", raw("17000000000")), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time 14 digits", body: tdl(d, "time", raw("1e13")), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time huge exponent", body: tdl(d, "time", raw("1e400")), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time just below seconds", body: tdl(d, "time", raw("999999999")), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time leading zero string", body: tdl(d, "time", "0170000000"), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time 11 digit string", body: tdl(d, "time", "17000000000"), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time decimal string", body: tdl(d, "time", "1700000000.0"), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time empty string", body: tdl(d, "time", ""), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time trailing newline", body: tdl(d, "time", "1700000000\n"), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time spaced string", body: tdl(d, "time", " 1700000000"), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time bool", body: tdl(d, "time", raw("true")), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time object", body: tdl(d, "time", raw("{}")), want: []string{"time: must be Unix seconds (10 digits) or milliseconds (13 digits)"}},
		{name: "time twice", body: tdl(d, "time", raw("1700000000"), "time", raw("1700000001")), want: []string{"time: duplicate key"}},

		// data as a whole.
		{name: "data null", body: mkBody("userId", "u1", "type", "TDL", "data", raw("null")), want: []string{"data: required"}},
		{name: "data array", body: mkBody("userId", "u1", "type", "TDL", "data", raw(`["a"]`)), want: []string{"data: must be an object"}},
		{name: "data string", body: mkBody("userId", "u1", "type", "TDL", "data", raw(`"a"`)), want: []string{"data: must be an object"}},
		{name: "data twice", body: mkBody("userId", "u1", "type", "TDL", "data", d, "data", d), want: []string{"data: duplicate key"}},
		{name: "data empty", body: tdl(map[string]string{}), want: []string{"data.type: required", "data.list: required", "data.step: required", "data.content: required"}},

		// data fields.
		{name: "content too long", body: tdl(with(d, "content", strings.Repeat("通", 23))), want: []string{"data.content: 23 characters, at most 20"}},
		{name: "ASCII too long", body: tdl(with(d, "list", strings.Repeat("a", 21))), want: []string{"data.list: 21 characters, at most 20"}},
		{name: "header too long", body: tdl(with(d, "header", strings.Repeat("a", 201))), want: []string{"data.header: 201 characters, at most 200"}},
		{name: "header emoji", body: tdl(with(d, "header", "新通知😀")), want: []string{"data.header: contains emoji"}},
		{name: "remark emoji", body: tdl(with(d, "remark", "✅")), want: []string{"data.remark: contains emoji"}},
		{name: "flag", body: tdl(with(d, "content", "🇨🇳")), want: []string{"data.content: contains emoji"}},
		{name: "keycap", body: tdl(with(d, "content", "按1\uFE0F\u20E3")), want: []string{"data.content: contains emoji"}},
		{name: "copyright", body: tdl(with(d, "content", "©2024")), want: []string{"data.content: contains emoji"}},
		{name: "escaped emoji", body: `{"userId":"u1","type":"TDL","data":{"type":"\ud83d\ude00","list":"a","step":"b","content":"c"}}`, want: []string{"data.type: contains emoji"}},
		{name: "step newline", body: tdl(with(d, "step", "第一步\n第二步")), want: []string{"data.step: contains a line break"}},
		{name: "step CR", body: tdl(with(d, "step", "a\rb")), want: []string{"data.step: contains a line break"}},
		{name: "step line separator", body: tdl(with(d, "step", "a\u2028b")), want: []string{"data.step: contains a line break"}},
		{name: "step paragraph separator", body: tdl(with(d, "step", "a\u2029b")), want: []string{"data.step: contains a line break"}},
		{name: "step NEL", body: tdl(with(d, "step", "a\u0085b")), want: []string{"data.step: contains a line break"}},
		{name: "tab", body: tdl(with(d, "list", "a\tb")), want: []string{"data.list: contains a control character"}},
		{name: "NUL", body: tdl(with(d, "list", "a\x00b")), want: []string{"data.list: contains a control character"}},
		{name: "DEL", body: tdl(with(d, "list", "a\x7fb")), want: []string{"data.list: contains a control character"}},
		{name: "C1 control", body: tdl(with(d, "list", "a\u009bb")), want: []string{"data.list: contains a control character"}},
		{name: "control in remark", body: tdl(with(d, "remark", "\x1b[31m")), want: []string{"data.remark: contains a control character"}},
		{name: "blank main item", body: tdl(with(d, "type", "   ")), want: []string{"data.type: must not be blank"}},
		{name: "ideographic space only", body: tdl(with(d, "type", "\u3000")), want: []string{"data.type: must not be blank"}},
		{name: "empty main item", body: tdl(with(d, "type", "")), want: []string{"data.type: must not be blank"}},

		// Characters the platform refuses (package keyword): spaces are sent as
		// U+0020, invisible characters removed and not counted, the rest refused
		// with their code point.
		{name: "full-width and no-break spaces sent as spaces", body: tdl(with(d, "content", "\u3000\u3000请假\u00a0申请\u2003待办", "remark", "备注\u3000")),
			req: &Request{UserID: "u1", Type: TypeTDL, Data: with(d, "content", "  请假 申请 待办", "remark", "备注 ")}},
		{name: "invisible characters removed", body: tdl(with(d, "content", "\ufeff零\u200b宽\u00ad字\u2060符\u200c", "header", "\u200b")),
			req: &Request{UserID: "u1", Type: TypeTDL, Data: with(d, "content", "零宽字符", "header", "")}},
		{name: "twenty characters and invisible ones", body: tdl(with(d, "content", twenty+"\u200b\u00ad\ufeff")),
			req: &Request{UserID: "u1", Type: TypeTDL, Data: with(d, "content", twenty)}},
		{name: "twenty characters and a full-width space", body: tdl(with(d, "content", twenty+"\u3000")), want: []string{"data.content: 21 characters, at most 20"}},
		{name: "zero width space only", body: tdl(with(d, "type", "\u200b")), want: []string{"data.type: must not be blank"}},
		{name: "invisible and spaces only", body: tdl(with(d, "type", "\u00ad \u3000\ufeff")), want: []string{"data.type: must not be blank"}},
		{name: "right-to-left override", body: tdl(with(d, "content", "附件\u202egpj.exe")), want: []string{"data.content: contains a formatting character (U+202E)"}},
		{name: "bidi isolate in remark", body: tdl(with(d, "remark", "a\u2066b\u2069")), want: []string{"data.remark: contains a formatting character (U+2066)"}},
		{name: "left-to-right mark", body: tdl(with(d, "content", "a\u200eb")), want: []string{"data.content: contains a formatting character (U+200E)"}},
		{name: "private use", body: tdl(with(d, "content", "a\ue000b\U000F0000")), want: []string{"data.content: contains a private-use character (U+E000)"}},
		{name: "noncharacter", body: tdl(with(d, "content", "a\uffff")), want: []string{"data.content: contains a code point that is not a character (U+FFFF)"}},
		{name: "unassigned", body: tdl(with(d, "content", "\U00050000")), want: []string{"data.content: contains a code point that is not a character (U+50000)"}},
		{name: "every refusal at once", body: tdl(with(d, "content", "\u200b\t\n\u202e\ue000\ufdd0😀"+twenty)), want: []string{
			"data.content: contains a line break", "data.content: contains a control character",
			"data.content: contains a formatting character (U+202E)", "data.content: contains a private-use character (U+E000)",
			"data.content: contains a code point that is not a character (U+FDD0)", "data.content: contains emoji",
			"data.content: 26 characters, at most 20"}},
		{name: "refusals in an unknown type's data", body: mkBody("userId", "u1", "type", "X", "data", map[string]string{"a": "\u202e", "b": "\u200b"}),
			want: []string{`type: "X" is not one of ` + typeList, "data.a: contains a formatting character (U+202E)"}},
		{name: "newline only", body: tdl(with(d, "type", "\n")), want: []string{"data.type: must not be blank", "data.type: contains a line break"}},
		{name: "every content rule", body: tdl(with(d, "content", strings.Repeat("长", 20)+"\n\t😀")), want: []string{
			"data.content: contains a line break", "data.content: contains a control character",
			"data.content: contains emoji", "data.content: 23 characters, at most 20"}},
		{name: "number value", body: `{"userId":"u1","type":"TDL","data":{"type":1,"list":"a","step":"b","content":"c"}}`, want: []string{"data.type: must be a string"}},
		{name: "null header", body: `{"userId":"u1","type":"TDL","data":{"header":null,"type":"t","list":"a","step":"b","content":"c"}}`,
			req: &Request{UserID: "u1", Type: TypeTDL, Data: map[string]string{"type": "t", "list": "a", "step": "b", "content": "c"}}},
		{name: "null remark and header", body: `{"userId":"u1","type":"TDL","data":{"header":null,"type":"t","list":"a","step":"b","content":"c","remark":null}}`},
		{name: "null main item", body: `{"userId":"u1","type":"TDL","data":{"type":"t","list":null,"step":"b","content":"c"}}`, want: []string{"data.list: required"}},
		{name: "missing main items", body: tdl(without(d, "list", "content")), want: []string{"data.list: required", "data.content: required"}},
		{name: "unknown data keys", body: tdl(with(d, "zz", "1", "foo", "2", "a b", "3")), want: []string{
			`data."a b": not a field of type TDL`, "data.foo: not a field of type TDL", "data.zz: not a field of type TDL"}},
		{name: "field of another type", body: tdl(with(d, "deadline", "明天")), want: []string{"data.deadline: not a field of type TDL"}},
		{name: "data key twice", body: `{"userId":"u1","type":"TDL","data":{"type":"t","list":"a","step":"b","content":"c","step":"d"}}`, want: []string{"data.step: duplicate key"}},
		{name: "unknown data key twice", body: `{"userId":"u1","type":"TDL","data":{"type":"t","list":"a","step":"b","content":"c","x":"1","x":"2"}}`, want: []string{"data.x: not a field of type TDL"}},

		// Without a usable type, data is still checked for what holds for every type.
		{name: "no type, bad data", body: mkBody("userId", "u1", "data", raw(`{"z":"😀","b":1,"a":"x\ny","c":"fine","a2":"`+strings.Repeat("x", 300)+`"}`)), want: []string{
			"type: required", "data.a: contains a line break", "data.b: must be a string", "data.z: contains emoji"}},
		{name: "bad type, duplicate data key", body: mkBody("userId", "u1", "type", "X", "data", raw(`{"k":"1","k":"2"}`)), want: []string{
			`type: "X" is not one of ` + typeList, "data.k: duplicate key"}},

		// Unknown top-level keys.
		{name: "unknown keys", body: tdl(d, "zeta", raw("1"), "alpha", raw(`{"deep":[1,{"x":null}]}`), "alpha", raw("2"), "user id", "x"), want: []string{
			"alpha: not a field of a push body", `"user id": not a field of a push body`, "zeta: not a field of a push body"}},
		{name: "userid in wrong case", body: mkBody("userid", "u1", "type", "TDL", "data", d), want: []string{
			"userId: required", "userid: not a field of a push body"}},

		// Everything at once, in the documented order.
		{name: "all problems", body: `{"zz":1,"data":{"remark":"\n","content":"` + strings.Repeat("x", 21) + `","foo":"😀","type":"a"},` +
			`"time":"123","url":"ftp://x","type":"TDL","aa":2,"userId":"a b"}`, want: []string{
			"userId: may contain only letters, digits, '.', '_' and '-'",
			"url: must be an absolute http or https URL",
			"time: must be Unix seconds (10 digits) or milliseconds (13 digits)",
			"data.list: required",
			"data.step: required",
			"data.content: 21 characters, at most 20",
			"data.remark: contains a line break",
			"data.foo: not a field of type TDL",
			"aa: not a field of a push body",
			"zz: not a field of a push body",
		}},
	}
	// Every type accepts its main items and its full set of fields, and
	// wants each of its main items.
	for _, t := range typeTable {
		m := minimal(t.Type)
		full := with(m, "header", "标题", "remark", "备注")
		cases = append(cases,
			parseCase{name: string(t.Type) + " minimal", body: mkBody("userId", "u1", "type", string(t.Type), "data", m),
				req: &Request{UserID: "u1", Type: t.Type, Data: m}},
			parseCase{name: string(t.Type) + " full", body: mkBody("userId", "u1", "type", string(t.Type), "data", full, "url", "https://a.b/", "time", "1700000000")},
		)
		var want []string
		for _, f := range t.Fields {
			if f.Required {
				want = append(want, "data."+f.Name+": required")
			}
		}
		cases = append(cases, parseCase{name: string(t.Type) + " header only", body: mkBody("userId", "u1", "type", string(t.Type), "data", map[string]string{"header": "h"}), want: want})
	}
	return cases
}

func mkData(d map[string]string) string {
	s := mkBody("data", d)
	return s[len(`{"data":`) : len(s)-1]
}

func TestParse(t *testing.T) {
	for _, c := range parseCases() {
		t.Run(c.name, func(t *testing.T) {
			req, err := Parse([]byte(c.body))
			if c.want == nil {
				if err != nil {
					t.Fatalf("Parse: %v\nbody: %s", err, c.body)
				}
				if c.req != nil && !equalRequest(req, *c.req) {
					t.Errorf("Parse = %+v, want %+v", req, *c.req)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse error = %v (%T), want *ValidationError\nbody: %s", err, err, c.body)
			}
			var got []string
			for _, p := range ve.Problems {
				got = append(got, p.String())
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("problems:\n got  %q\n want %q", got, c.want)
			}
			if want := strings.Join(c.want, "; "); err.Error() != want {
				t.Errorf("Error() = %q, want %q", err.Error(), want)
			}
		})
	}
}

func equalRequest(a, b Request) bool {
	return a.UserID == b.UserID && a.Type == b.Type && a.URL == b.URL &&
		maps.Equal(a.Data, b.Data) && a.Time.Equal(b.Time) && a.Time.Location() == b.Time.Location()
}

// TestParseDepth pins encoding/json's nesting limit, which decides whether
// a body is "not valid JSON".
func TestParseDepth(t *testing.T) {
	for depth, want := range map[int]string{
		maxDepth:     "x: not a field of a push body",
		maxDepth + 1: "body: not valid JSON",
	} {
		// The body object is one level, the arrays the rest.
		n := depth - 1
		body := `{"x":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`
		if _, err := Parse([]byte(body)); err == nil || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("depth %d: %v, want %s", depth, err, want)
		}
		if json.Valid([]byte(body)) != (depth <= maxDepth) {
			t.Errorf("depth %d: encoding/json's limit is not maxDepth", depth)
		}
	}
}

func TestIntegral(t *testing.T) {
	for lit, want := range map[string]int64{
		"1700000000": 1700000000, "1.7e9": 1700000000, "1.7E+9": 1700000000, "17e8": 1700000000,
		"0.17e10": 1700000000, "00": -1, "0": -1, "0.0e5": -1, "1.5": -1, "1e-1": -1,
		"1e13": -1, "9999999999999": 9999999999999, "99999999999990e-1": 9999999999999,
		"1700000000.0000000000000001": -1, "-1": -1, "1e999999999999999999999": -1,
		"1e-999999999999999999999": -1, "10000000000000000000000e-10": 1000000000000,
	} {
		got, ok := integral(lit)
		if !ok {
			got = -1
		}
		if got != want {
			t.Errorf("integral(%s) = %d, want %d", lit, got, want)
		}
	}
}

func TestRequestMessage(t *testing.T) {
	req, err := Parse([]byte(tdlBody))
	if err != nil {
		t.Fatal(err)
	}
	accepted := time.UnixMilli(1714800001234)
	m := req.Message("01HX0000000000000000000000", "oa", accepted)
	want := Message{
		UcsID: "01HX0000000000000000000000", ClientID: "oa", UserID: "2021012345", Type: TypeTDL,
		URL: req.URL, Data: req.Data, Time: 1714800000000, Accepted: 1714800001234,
	}
	if !equalMessage(m, want) {
		t.Errorf("Message = %+v, want %+v", m, want)
	}
	d := minimal(TypeEN)
	req, err = Parse([]byte(mkBody("userId", "u", "type", "EN", "data", d)))
	if err != nil {
		t.Fatal(err)
	}
	if m := req.Message("x", "y", accepted); m.Time != 0 || m.URL != "" {
		t.Errorf("Message without time and url = %+v", m)
	}
}

func TestValidationErrorText(t *testing.T) {
	e := &ValidationError{Problems: []Problem{{Field: "userId", Rule: "required"}, {Field: "data.content", Rule: "23 characters, at most 20"}}}
	if got, want := e.Error(), "userId: required; data.content: 23 characters, at most 20"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := (Problem{Field: "a", Rule: "b"}).String(); got != "a: b" {
		t.Errorf("String() = %q", got)
	}
}

// TestParseKeepsNoBody: the api parses from a pooled buffer and reuses it.
func TestParseKeepsNoBody(t *testing.T) {
	buf := []byte(tdlBody)
	req, err := Parse(buf)
	if err != nil {
		t.Fatal(err)
	}
	// Deep copies: a string that aliased buf would change with it.
	want := Request{UserID: strings.Clone(req.UserID), Type: Type(strings.Clone(string(req.Type))), URL: strings.Clone(req.URL), Time: req.Time, Data: map[string]string{}}
	for k, v := range req.Data {
		want.Data[strings.Clone(k)] = strings.Clone(v)
	}
	for i := range buf {
		buf[i] = 'x'
	}
	if !equalRequest(req, want) {
		t.Errorf("Request changed with the body buffer: %+v", req)
	}
}

// TestProblemListsAreCapped: an error lists at most MaxListedProblems problems and counts the
// rest, so that no body makes an answer or a log line larger than itself.
func TestProblemListsAreCapped(t *testing.T) {
	var ps []Problem
	for i := range 25 {
		ps = append(ps, Problem{Field: fmt.Sprintf("k%02d", i), Rule: ruleUnknown})
	}
	for n, want := range map[int]string{0: "", 1: "k00: " + ruleUnknown, 20: "k19: " + ruleUnknown, 21: "… and 1 more problem", 25: "… and 5 more problems"} {
		ve := &ValidationError{Problems: ps[:n]}
		lines := ve.Lines()
		if len(lines) != min(n, MaxListedProblems+1) || n > 0 && lines[len(lines)-1] != want {
			t.Errorf("%d problems: lines %q, want %d ending in %q", n, lines, min(n, MaxListedProblems+1), want)
		}
		if got := ve.Error(); got != strings.Join(lines, "; ") {
			t.Errorf("%d problems: Error() = %q, want the lines joined", n, got)
		}
	}
}
