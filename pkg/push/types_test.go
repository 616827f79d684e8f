package push

import (
	"slices"
	"testing"
)

func TestTypes(t *testing.T) {
	want := []Type{TypeTDL, TypeEN, TypeJML, TypeWR, TypeJDS, TypeFWR, TypeMDAN, TypeAR, TypeOPPAN}
	ts := Types()
	var got []Type
	for _, s := range ts {
		got = append(got, s.Type)
		if s.MeaningZH == "" || s.MeaningEN == "" {
			t.Errorf("%s: meaning missing", s.Type)
		}
		if len(s.Fields) > maxFields {
			t.Errorf("%s: %d fields, the parser keeps room for %d", s.Type, len(s.Fields), maxFields)
		}
		names := map[string]bool{}
		for i, f := range s.Fields {
			if names[f.Name] {
				t.Errorf("%s: field %s twice", s.Type, f.Name)
			}
			names[f.Name] = true
			if f.DescZH == "" || f.DescEN == "" {
				t.Errorf("%s.%s: description missing", s.Type, f.Name)
			}
			extra := f.Name == "header" || f.Name == "remark"
			if f.Main == extra || f.Required != f.Main {
				t.Errorf("%s.%s: Main %v Required %v", s.Type, f.Name, f.Main, f.Required)
			}
			if want := map[bool]int{true: 200, false: 20}[extra]; f.MaxRunes != want {
				t.Errorf("%s.%s: MaxRunes %d, want %d", s.Type, f.Name, f.MaxRunes, want)
			}
			if (i == 0) != (f.Name == "header") || (i == len(s.Fields)-1) != (f.Name == "remark") {
				t.Errorf("%s: header must come first and remark last", s.Type)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("Types() = %v, want %v", got, want)
	}
	// The interface's table fixes the fields of the first four types.
	for typ, fields := range map[Type][]string{
		TypeTDL: {"header", "type", "list", "step", "content", "remark"},
		TypeEN:  {"header", "name", "class", "time", "remark"},
		TypeJML: {"header", "class", "info", "remark"},
		TypeWR:  {"header", "title", "date", "content", "remark"},
	} {
		s, _ := LookupType(string(typ))
		var names []string
		for _, f := range s.Fields {
			names = append(names, f.Name)
		}
		if !slices.Equal(names, fields) {
			t.Errorf("%s fields = %v, want %v", typ, names, fields)
		}
	}
}

func TestTypesAreCopies(t *testing.T) {
	ts := Types()
	ts[0].Type = "XX"
	ts[0].Fields[1].MaxRunes = 1000
	s, ok := LookupType("TDL")
	if !ok || s.Fields[1].MaxRunes != 20 || Types()[0].Type != TypeTDL {
		t.Fatal("changing the result of Types changed the rules")
	}
	s.Fields[1].MaxRunes = 1000
	if s2, _ := LookupType("TDL"); s2.Fields[1].MaxRunes != 20 {
		t.Fatal("changing the result of LookupType changed the rules")
	}
}

func TestLookupType(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{{"TDL", true}, {"OPPAN", true}, {"tdl", false}, {"", false}, {"TDL ", false}} {
		s, ok := LookupType(c.in)
		if ok != c.ok || ok && string(s.Type) != c.in || !ok && s.Type != "" {
			t.Errorf("LookupType(%q) = %v, %v", c.in, s.Type, ok)
		}
	}
}
