package push

import "testing"

func TestRemoveEmoji(t *testing.T) {
	for in, want := range map[string]string{
		"张三的请假申请待您审批": "张三的请假申请待您审批",
		"会议😀开始":       "会议开始",
		"家庭👨‍👩‍👧合影":   "家庭合影", // a ZWJ sequence leaves nothing behind
		"🇨🇳国旗":        "国旗",
		"1️⃣号楼":       "1号楼", // the keycap's digit is ordinary text
		"温度 30℃ ☆":    "温度 30℃ ☆",
		"":            "",
	} {
		if got := RemoveEmoji(in); got != want {
			t.Errorf("RemoveEmoji(%q) = %q, want %q", in, got, want)
		}
	}
}
