package pages

import (
	"html/template"
	"io"
	"strings"
)

// apiDocsTmpl is its own page, not one of the layout's sign-in cards: a reference document
// needs the width of a desktop screen and a table of contents beside the text.
var apiDocsTmpl = template.Must(template.New("apidocs.html").
	Funcs(template.FuncMap{"lower": strings.ToLower}).
	ParseFS(templateFS, "templates/apidocs.html"))

// APIDocsData is what the API documentation page shows: the OpenAPI description, read into
// sections.
type APIDocsData struct {
	Title   string
	Summary string
	Version string
	Intro   template.HTML // the description's introduction, already rendered from Markdown
	SpecURL string        // where the OpenAPI description itself is served
	Tags    []APITag
	Schemas []APISchema
	Nonce   string // CSP nonce of the page's <style>; the one given to Headers
}

// APITag is a group of operations.
type APITag struct {
	ID, Name    string
	Description template.HTML
	Operations  []APIOperation
}

// APIOperation is one method on one path.
type APIOperation struct {
	ID           string // anchor
	Method, Path string
	Summary      string
	Description  template.HTML
	Security     string // what token it needs, in words; empty: none
	Params       []APIField
	Body         *APIContent
	Responses    []APIResponse
}

// APIField is a parameter, a header or a property of a schema.
type APIField struct {
	Name, In, Type string
	TypeLink       string // anchor of the schema the type names, if any
	Required       bool
	Description    template.HTML
}

// APIContent is a request or response body.
type APIContent struct {
	ContentType string
	Schema      string // name of the component schema, if the body is one
	SchemaLink  string
	Fields      []APIField
	Examples    []APIExample
}

// APIExample is one named example, with the request that produces it when it is an answer.
type APIExample struct {
	Name, Summary string
	Request       string // what to send to get this answer; empty for a request example
	Value         string // indented JSON, or the text itself
	Headers       []string
}

// APIResponse is one status of an operation.
type APIResponse struct {
	Status      string
	Description template.HTML
	Headers     []APIField
	Content     *APIContent
}

// APISchema is a component schema.
type APISchema struct {
	ID, Name    string
	Type        string
	Description template.HTML
	Fields      []APIField
}

// APIDocs writes the API documentation page. It loads nothing from elsewhere and runs no
// script: a page that works offline and under the strictest Content-Security-Policy.
func APIDocs(w io.Writer, d APIDocsData) error { return render(w, apiDocsTmpl, d) }
