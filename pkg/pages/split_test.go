package pages

import "testing"

func TestSplitLanguages(t *testing.T) {
	tests := []struct {
		in   string
		want bilingual
	}{
		{"无效的请求 Invalid request", bilingual{"无效的请求", "Invalid request"}},
		{"学工号或密码错误。 Wrong user number or password.", bilingual{"学工号或密码错误。", "Wrong user number or password."}},
		{"账号 2021001 已锁定 Account 2021001 is locked", bilingual{"账号 2021001 已锁定", "Account 2021001 is locked"}},
		{"回调地址未登记（invalid_redirect_uri）\nThe address isn’t registered.", bilingual{"回调地址未登记（invalid_redirect_uri）", "The address isn’t registered."}},
		{"Invalid request", bilingual{ZH: "Invalid request"}},
		{"学工号 2021001 不存在", bilingual{ZH: "学工号 2021001 不存在"}},
		{"尝试 3 次", bilingual{ZH: "尝试 3 次"}},
		{"请稍后再试 3", bilingual{ZH: "请稍后再试 3"}},
		{"", bilingual{}},
	}
	for _, tt := range tests {
		if got := splitLanguages(tt.in); got != tt.want {
			t.Errorf("splitLanguages(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}
