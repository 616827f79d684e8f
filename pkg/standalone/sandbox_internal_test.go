package standalone

import (
	"reflect"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/pages"
	"github.com/campus-it/ucs/pkg/platform/simulator"
)

// TestPhoneMessage checks how a phone draws a template message under the platform's rules:
// the type's title and main items in the type's order with their labels; no first line or
// remark, whether the configuration maps them or the template merely has them; emoji removed;
// keywords the configuration does not know shown by name.
func TestPhoneMessage(t *testing.T) {
	it := func(label, value string) pages.PhoneItem { return pages.PhoneItem{Label: label, Value: value} }
	templates := map[string]sandboxTemplate{
		"tpl-en": {Type: "EN", Fields: map[string]string{"first": "header", "thing9": "name", "thing1": "class", "time2": "time", "keyword4": "remark"}},
	}
	at := time.Date(2026, 11, 23, 9, 30, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		msg   simulator.SentMessage
		title string
		items []pages.PhoneItem
	}{
		{"mapped", simulator.SentMessage{TemplateID: "tpl-en", Data: map[string]string{"first": "您有一场考试", "thing9": "高等数学😀", "thing1": "数学1班",
			"time2": "2026-01-08 09:00", "keyword4": "带好证件"}, URL: "https://x.edu", At: at},
			"考试通知", []pages.PhoneItem{it("考试名称", "高等数学"), it("考试班级或课程", "数学1班"), it("考试时间", "2026-01-08 09:00")}},
		{"unknown template", simulator.SentMessage{TemplateID: "tpl-other", Data: map[string]string{"first": "标题", "thing2": "乙", "thing1": "🎉甲", "remark": "备注"}, At: at},
			"tpl-other", []pages.PhoneItem{it("thing1", "甲"), it("thing2", "乙")}},
	} {
		got := phoneMessage(c.msg, templates)
		if got.Title != c.title || !reflect.DeepEqual(got.Items, c.items) {
			t.Errorf("%s: %q %q, want %q %q", c.name, got.Title, got.Items, c.title, c.items)
		}
		if got.At != "11-23 17:30:00" || got.Link != (c.msg.URL != "") {
			t.Errorf("%s: at %q, link %v", c.name, got.At, got.Link)
		}
	}
}
