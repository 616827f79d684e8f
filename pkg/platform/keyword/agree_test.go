package keyword_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/platform/keyword"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"golang.org/x/text/unicode/rangetable"
)

// tdlKeywords maps the main items of a TDL push onto thing keywords, as the
// standalone templates and deployments/config.example.yaml do.
var tdlKeywords = map[string]string{"type": "thing1", "list": "thing2", "step": "thing3", "content": "thing4"}

// sender sends TDL data to a simulator over HTTP with the service's own
// platform client, and answers the platform's errcode (0: accepted).
type sender func(t *testing.T, data map[string]string) int

func newSender(t *testing.T) sender {
	const appID, secret, openid, tpl = "wx-agree", "agree-secret-0123456789", "o-agree", "tpl-TDL"
	sim := simulator.New(simulator.Config{AppID: appID, Secret: secret, Seed: 1})
	sim.AddTemplate(tpl, []string{"thing1", "thing2", "thing3", "thing4"})
	sim.AddFollower(openid)
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { srv.Close(); sim.Close() })
	c, err := platform.New(platform.Config{APIBase: srv.URL, AppID: appID, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return func(t *testing.T, data map[string]string) int {
		t.Helper()
		kw := map[string]string{}
		for field, k := range tdlKeywords {
			kw[k] = data[field]
		}
		_, err := c.SendTemplate(context.Background(), platform.TemplateMessage{ToUser: openid, TemplateID: tpl, Data: kw})
		var pe *platform.Error
		switch {
		case err == nil:
			return 0
		case errors.As(err, &pe):
			return pe.Code
		}
		t.Fatalf("send: %v", err)
		return -1
	}
}

// edgeValues are the values every class is tried with: each range's first
// and last code point and their neighbours outside it, inside text and
// alone; the characters the attack pass found, also at the length limit.
func edgeValues() []string {
	var runes []rune
	for _, c := range keyword.Classes() {
		// The edges of each run of consecutive code points of the class.
		rangetable.Visit(c.Table, func(r rune) {
			if !c.Contains(r - 1) {
				runes = append(runes, r-1, r)
			}
			if !c.Contains(r + 1) {
				runes = append(runes, r, r+1)
			}
		})
	}
	named := []rune{0x3000, 0x00A0, 0x00AD, 0x200B, 0x202E, 0xFEFF, 0x2060, 0xE000, 0xF0000, 0xFDD0, 0xFFFE, 0xFFFF, 0x200D, '\t', '\n'}
	runes = append(runes, named...)
	slices.Sort(runes)
	runes = slices.Compact(runes)
	var out []string
	for _, r := range runes {
		if r < 0 || r > unicode.MaxRune || 0xD800 <= r && r <= 0xDFFF {
			continue // no string holds it; lone surrogate escapes are a body error
		}
		out = append(out, string(r), "前"+string(r)+"后")
	}
	nineteen := strings.Repeat("考", 19)
	for _, r := range named {
		out = append(out, nineteen+string(r), nineteen+"考"+string(r), string(r)+string(r)+"审批")
	}
	return append(out, nineteen+"考", nineteen+"考考", " ", "审 批")
}

// TestFrontEndAndPlatformAgree feeds the edge cases of every class of the
// table through the push validation and through the simulator, over HTTP with
// the workers' platform client, and checks that they agree: whatever the
// platform refuses, the front end refuses with a field error or changes
// before sending; whatever the front end accepts, the platform accepts as
// sent. The front end is stricter only where it means to be: emoji, which
// the platform would silently remove, and blank main items.
func TestFrontEndAndPlatformAgree(t *testing.T) {
	send := newSender(t)
	base := map[string]string{"type": "请假审批", "list": "学生请假", "step": "辅导员审批"}
	var refused, cleaned, stricter int
	for _, v := range edgeValues() {
		data := map[string]string{"content": v}
		for k, x := range base {
			data[k] = x
		}
		body, err := json.Marshal(map[string]any{"userId": "2020000001", "type": "TDL", "data": data})
		if err != nil {
			t.Fatal(err)
		}
		req, perr := push.Parse(body)
		raw := send(t, data)
		if (raw == 0) != keyword.Valid("thing", v) {
			t.Fatalf("%q: the simulator answers %d, but the table says Valid=%v", v, raw, keyword.Valid("thing", v))
		}
		if raw != 0 && raw != 47003 {
			t.Fatalf("%q: the simulator answers %d", v, raw)
		}
		if perr == nil {
			if code := send(t, req.Data); code != 0 {
				t.Fatalf("%q: the front end accepts it as %q, the platform answers %d", v, req.Data["content"], code)
			}
			if raw != 0 {
				if req.Data["content"] == v {
					t.Fatalf("%q: the platform refuses it, the front end sends it unchanged", v)
				}
				cleaned++
			}
			continue
		}
		var ve *push.ValidationError
		if !errors.As(perr, &ve) {
			t.Fatalf("%q: %v", v, perr)
		}
		for _, p := range ve.Problems {
			if p.Field != "data.content" {
				t.Fatalf("%q: problem %v names another field", v, p)
			}
		}
		if raw == 47003 {
			refused++
			continue
		}
		// Refused here, accepted there: only on purpose.
		for _, p := range ve.Problems {
			if k := p.Kind(); k != "emoji" && k != "blank" {
				t.Fatalf("%q: the platform accepts it, the front end refuses: %v", v, ve)
			}
		}
		stricter++
	}
	if refused == 0 || cleaned == 0 || stricter == 0 {
		t.Fatalf("cases did not reach every outcome: %d refused by both, %d cleaned, %d refused on purpose", refused, cleaned, stricter)
	}
	t.Logf("%d values: %d refused by both, %d cleaned before sending, %d refused by the front end alone (emoji, blank)",
		len(edgeValues()), refused, cleaned, stricter)
}

// kindSamples are values of every kind, right and wrong, near each limit.
func kindSamples() []string {
	out := []string{
		"高等数学一班", "下周一上午第三节", "高等数学期末考试", "Calculus II", "CS-101/A#7", "01HZX3K9-2024/A#7",
		"15:01", "9:05", "15:01:59", "24:00", "2019年10月1日 15:01", "2019年10月1日15:01", "2024-07-05 16:16:42",
		"2024/07/05 16:16", "15:01~17:30", "2024-01-08 09:00 ~ 2024-01-08 11:00", "2024-07-05", "2019年10月1日",
		"2019年10月", "10月1日", "10月", "2018.01.01", "01-01", "2018-13-01", "2018-01-01~2018-01-31",
		"¥99.00", "￥100元", "$5", "39.8元", "13.10", "¥1234567890", "¥12345678901", "¥12345678.90", "人民币5元", "¥¥5",
		"+86-0766-66888866", "(010) 6275 1234", "+86-0766-668888661", "ext.12",
		"粤A8Z888挂", "京A12345", "粤A8Z8888挂", "A京12345",
		"张三", "欧阳娜娜娜娜娜娜娜娜", "欧阳娜娜娜娜娜娜娜娜娜", "John Smith", "Maximilian Alexander", "张Tom", "R2D2",
		"配送中", "审核通过了吧", "ok", "已通过!", "D-3", "审批中请等", "审批中请稍等",
		"12345", "3.14", "3.", "-5", "ABCdef", "ABC1", "+-*/", "!!!!!!", "a!",
		strings.Repeat("a", 20), strings.Repeat("9", 20), "x", "1", "考",
	}
	// The character classes are one table for every kind: TestFrontEndAndPlatformAgree walks
	// their edges with thing; here a few of each class, inside values of every alphabet.
	for _, r := range []rune{0x3000, 0x00A0, 0x200B, 0xFEFF, 0x202E, 0x200D, 0xE000, 0xFFFE, '\t', '\n', 0x85, 0x2028} {
		for _, v := range []string{"A1", "15:01", "张三", "¥5", "粤A8", "+86"} {
			out = append(out, v+string(r), string(r)+v)
		}
	}
	return out
}

// TestEveryKindAgrees maps a main item of a push type onto a keyword of each
// kind in turn and feeds the samples of every kind through the push
// validation with that mapping and through the simulator: whatever the front
// end accepts, the platform accepts, and the front end refuses with the
// kind's rule only what the platform refuses too.
func TestEveryKindAgrees(t *testing.T) {
	const appID, secret, openid = "wx-agree", "agree-secret-0123456789", "o-agree"
	sim := simulator.New(simulator.Config{AppID: appID, Secret: secret, Seed: 1})
	sim.AddFollower(openid)
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { srv.Close(); sim.Close() })
	c, err := platform.New(platform.Config{APIBase: srv.URL, AppID: appID, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	send := func(tpl, kw, v string) int {
		_, err := c.SendTemplate(context.Background(), platform.TemplateMessage{ToUser: openid, TemplateID: tpl,
			Data: map[string]string{kw: v, "thing2": "高等数学", "thing3": "明天"}})
		var pe *platform.Error
		switch {
		case err == nil:
			return 0
		case errors.As(err, &pe):
			return pe.Code
		}
		t.Fatalf("send: %v", err)
		return -1
	}
	for _, k := range keyword.Kinds() {
		kw := k.Name + "1"
		if push.NotShown(kw) {
			continue // no main item may go to a keyword the platform no longer shows
		}
		tpl := "tpl-" + k.Name
		sim.AddTemplate(tpl, []string{kw, "thing2", "thing3"})
		p, err := push.NewParser(map[string]map[string]string{"EN": {"name": kw, "class": "thing2", "time": "thing3"}})
		if err != nil {
			t.Fatal(err)
		}
		var accepted, refusedBoth, stricter int
		for _, v := range kindSamples() {
			body, _ := json.Marshal(map[string]any{"userId": "2020000001", "type": "EN",
				"data": map[string]string{"name": v, "class": "高等数学", "time": "明天"}})
			req, perr := p.Parse(body)
			raw := send(tpl, kw, v)
			if perr == nil {
				if code := send(tpl, kw, req.Data["name"]); code != 0 {
					t.Fatalf("%s: the front end accepts %q as %q, the platform answers %d", k.Name, v, req.Data["name"], code)
				}
				accepted++
				continue
			}
			var ve *push.ValidationError
			if !errors.As(perr, &ve) {
				t.Fatalf("%s: %q: %v", k.Name, v, perr)
			}
			if raw != 0 {
				refusedBoth++
				continue
			}
			for _, pr := range ve.Problems {
				switch {
				case k.Stripped:
					// On purpose: what the platform would cut silently, the
					// front end refuses, so that nothing is lost unseen.
				case pr.Kind() == "emoji" || pr.Kind() == "blank" || pr.Kind() == "length":
					// On purpose: the interface's own limits of a main item.
				default:
					t.Fatalf("%s: the platform accepts %q, the front end refuses: %v", k.Name, v, ve)
				}
			}
			stricter++
		}
		if accepted == 0 {
			t.Errorf("%s: no sample accepted", k.Name)
		}
		if k.Checked && !k.Stripped && refusedBoth == 0 {
			t.Errorf("%s: no sample refused by both", k.Name)
		}
		t.Logf("%-16s %3d accepted, %3d refused by both, %3d refused by the front end alone", k.Name, accepted, refusedBoth, stricter)
	}
}
