package server

import (
	"net/http"

	"github.com/labstack/echo/v4"

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
}

type metaType struct {
	Type      string      `json:"type"`
	MeaningZH string      `json:"meaningZh"`
	MeaningEN string      `json:"meaningEn"`
	Fields    []metaField `json:"fields"`
}

type metaTypes struct {
	Types []metaType `json:"types"`
	Rules []string   `json:"rules"`
}

// metaRules states the content rules in words, as the validation enforces them.
var metaRules = []string{
	"userId, type and data are required; url and time are optional",
	"every value in data is a string without emoji, line breaks or other control characters",
	"main items (every data field but header and remark) are required and at most 20 characters",
	"header and remark are at most 200 characters; the platform does not show them",
	"url is an absolute http or https URL",
	"time is Unix seconds (10 digits) or milliseconds (13 digits), as a number or a string of digits",
	"the body is at most 65536 bytes of JSON",
}

// metaTypes is the metadata dictionary of push types: no token needed.
func (s *Server) metaTypes(c echo.Context) error {
	var out metaTypes
	for _, t := range push.Types() {
		mt := metaType{Type: string(t.Type), MeaningZH: t.MeaningZH, MeaningEN: t.MeaningEN}
		for _, f := range t.Fields {
			mt.Fields = append(mt.Fields, metaField{Name: f.Name, Main: f.Main, Required: f.Required, MaxChars: f.MaxRunes, DescZH: f.DescZH, DescEN: f.DescEN})
		}
		out.Types = append(out.Types, mt)
	}
	out.Rules = metaRules
	return s.ok(c, out)
}

// metaSchema serves the JSON Schema of the push body.
func (s *Server) metaSchema(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/schema+json", schemas.Push())
}
