package server

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/platform/keyword"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/schemas"
)

type metaField struct {
	Name     string `json:"name"`
	Main     bool   `json:"main"`
	Required bool   `json:"required"`
	MaxChars int    `json:"maxChars"`
	DescZH   string `json:"descZh"`
	DescEN   string `json:"descEn"`
	// Keyword is the template keyword the field is sent as, where the account's templates map
	// it (platform.templates.<TYPE>.fields).
	Keyword *metaKeyword `json:"keyword,omitempty"`
}

// metaKeyword is the keyword a field is mapped to, with its kind's rule, which the push
// validation enforces.
type metaKeyword struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	MaxChars int    `json:"maxChars"`
	Rule     string `json:"rule"`
	RuleZH   string `json:"ruleZh"`
	// Checked is false for const and enum keywords, whose values only the platform can check.
	Checked bool `json:"checked"`
}

type metaType struct {
	Type      string      `json:"type"`
	MeaningZH string      `json:"meaningZh"`
	MeaningEN string      `json:"meaningEn"`
	Fields    []metaField `json:"fields"`
}

// metaChars is a class of characters the platform refuses, and what the service does about it.
type metaChars struct {
	Class string `json:"class"`
	// Treatment is refuse (the push is refused, naming the field and the code point), space
	// (sent as U+0020) or remove (dropped before sending, not counted).
	Treatment string `json:"treatment"`
	DescZH    string `json:"descZh"`
	DescEN    string `json:"descEn"`
}

type metaTypes struct {
	Types      []metaType  `json:"types"`
	Rules      []string    `json:"rules"`
	Characters []metaChars `json:"characters"`
}

// metaRules states the content rules in words, as the validation enforces them.
var metaRules = []string{
	"userId, type and data are required; url and time are optional",
	"every value in data is a string without emoji, line breaks, control or formatting characters, private-use characters or code points that are not characters (the platform refuses them): such a push is refused, naming the field and the code point",
	"in data, spaces other than U+0020 (such as the full-width space U+3000) are sent as U+0020, and invisible characters (U+00AD, U+180E, U+200B, U+200C, U+2060 to U+2064, U+FEFF) are removed before sending and not counted; characters lists every class",
	"main items (every data field but header and remark) are required and at most 20 characters",
	"a field mapped to a template keyword (fields[].keyword) must obey the rule of the keyword's kind as well (thing, number, letter, symbol, character_string, time, date, amount, phone_number, car_number, name, phrase, short_thing, const, enum, and keyword, first and remark of the old industry templates); const and enum values only the platform can check",
	"header and remark are at most 200 characters; the platform does not show them",
	"url is an absolute http or https URL",
	"time is Unix seconds (10 digits) or milliseconds (13 digits), as a number or a string of digits",
	"the body is at most 65536 bytes of JSON text in UTF-8, without a lone surrogate escape such as \\ud800, and without Content-Encoding",
	"an error lists at most 20 problems, then the count of the others",
}

// metaCharacters is the table of package keyword as the dictionary shows it.
var metaCharacters = func() []metaChars {
	var out []metaChars
	for _, c := range keyword.Classes() {
		out = append(out, metaChars{Class: c.Name, Treatment: c.Treatment.String(), DescZH: c.DescZH, DescEN: c.DescEN})
	}
	return out
}()

// metaTypes is the metadata dictionary of push types: no token needed.
func (s *Server) metaTypes(c echo.Context) error {
	var out metaTypes
	for _, t := range push.Types() {
		mt := metaType{Type: string(t.Type), MeaningZH: t.MeaningZH, MeaningEN: t.MeaningEN}
		for _, f := range t.Fields {
			mf := metaField{Name: f.Name, Main: f.Main, Required: f.Required, MaxChars: f.MaxRunes, DescZH: f.DescZH, DescEN: f.DescEN}
			if name, k := s.cfg.Push.Keyword(t.Type, f.Name); k != nil {
				mf.Keyword = &metaKeyword{Name: name, Kind: k.Name, MaxChars: k.MaxRunes, Rule: k.Rule, RuleZH: k.RuleZH, Checked: k.Checked}
			}
			mt.Fields = append(mt.Fields, mf)
		}
		out.Types = append(out.Types, mt)
	}
	out.Rules = metaRules
	out.Characters = metaCharacters
	return s.ok(c, out)
}

// metaSchema serves the JSON Schema of the push body.
func (s *Server) metaSchema(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/schema+json", schemas.Push())
}
