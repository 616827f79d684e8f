package emojigen

import (
	"strings"
	"testing"
	"unicode"
)

func TestParse(t *testing.T) {
	data := "# Used with Emoji Version 99.0 and subsequent minor revisions\n# Date: 2099-01-01\n" +
		"0023          ; Emoji_Component      # E0.0 hash sign\n" +
		"00A9          ; Extended_Pictographic# E0.6 copyright\n" +
		"200D          ; Emoji_Component      # E0.0 zero width joiner\n" +
		"1F000..1F003  ; Extended_Pictographic# E5.1 mahjong\n" +
		"1F600         ; Emoji_Presentation   # not read\n"
	tab, err := Parse([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if tab.Version != "99.0" || tab.Date != "2099-01-01" {
		t.Errorf("version %q, date %q", tab.Version, tab.Date)
	}
	for r, want := range map[rune][2]bool{
		'#': {false, false}, 0xA9: {true, false}, 0x200D: {false, true},
		0x1F000: {true, false}, 0x1F003: {true, false}, 0x1F004: {false, false}, 0x1F600: {false, false},
	} {
		if got := [2]bool{unicode.Is(tab.ExtendedPictographic, r), unicode.Is(tab.Components, r)}; got != want {
			t.Errorf("%U: pictographic, component = %v, want %v", r, got, want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	head := "# Used with Emoji Version 15.0\n00A9 ; Extended_Pictographic\n200D ; Emoji_Component\n"
	for name, data := range map[string]string{
		"no property":     head + "1F600\n",
		"bad code point":  head + "1F6G0 ; Extended_Pictographic\n",
		"reversed range":  head + "1F600..1F5FF ; Extended_Pictographic\n",
		"beyond Unicode":  head + "110000 ; Extended_Pictographic\n",
		"no version":      strings.TrimPrefix(head, "# Used with Emoji Version 15.0\n"),
		"no components":   "# Used with Emoji Version 15.0\n00A9 ; Extended_Pictographic\n",
		"no pictographic": "# Used with Emoji Version 15.0\n200D ; Emoji_Component\n",
	} {
		if _, err := Parse([]byte(data)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
