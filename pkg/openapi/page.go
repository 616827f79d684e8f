package openapi

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"slices"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"

	"github.com/campus-it/ucs/pkg/pages"
)

// methods are the operations of a path item in the order the page lists them.
var methods = []string{"get", "post", "put", "patch", "delete", "head", "options", "trace"}

// markdown renders the descriptions, which OpenAPI writes in CommonMark; with GitHub's tables.
// goldmark leaves out raw HTML and unsafe links unless told otherwise, so a description cannot
// put markup or a script on the page.
var markdown = goldmark.New(goldmark.WithExtensions(extension.Table))

// Page reads a bundled description (see Bundle) into the sections of the documentation page:
// operations grouped by their first tag in the order of the document's tags, each with its
// parameters, body, responses and examples, then the component schemas. specURL is where the
// page links to the description itself.
func Page(doc []byte, specURL string) (pages.APIDocsData, error) {
	v, err := Parse(doc)
	if err != nil {
		return pages.APIDocsData{}, err
	}
	root, ok := v.(Object)
	if !ok {
		return pages.APIDocsData{}, errors.New("openapi: the description is not an object")
	}
	r := reader{root: root}
	info := obj(root.Get("info"))
	d := pages.APIDocsData{
		Title: str(info.Get("title")), Summary: str(info.Get("summary")), Version: str(info.Get("version")),
		Intro: r.md(info.Get("description")), SpecURL: specURL,
	}
	index := map[string]int{}
	for _, t := range arr(root.Get("tags")) {
		to := obj(t)
		name := str(to.Get("name"))
		index[name] = len(d.Tags)
		d.Tags = append(d.Tags, pages.APITag{ID: "tag-" + name, Name: r.tagTitle(to), Description: r.md(to.Get("description"))})
	}
	for _, p := range obj(root.Get("paths")) {
		item := obj(p.Value)
		shared := arr(item.Get("parameters"))
		for _, m := range methods {
			op, ok := item.Get(m).(Object)
			if !ok {
				continue
			}
			tag := "default"
			if ts := arr(op.Get("tags")); len(ts) > 0 {
				tag = str(ts[0])
			}
			i, ok := index[tag]
			if !ok {
				index[tag] = len(d.Tags)
				i = len(d.Tags)
				d.Tags = append(d.Tags, pages.APITag{ID: "tag-" + tag, Name: tag})
			}
			o, err := r.operation(p.Name, m, op, shared)
			if err != nil {
				return pages.APIDocsData{}, fmt.Errorf("openapi: %s %s: %w", strings.ToUpper(m), p.Name, err)
			}
			d.Tags[i].Operations = append(d.Tags[i].Operations, o)
		}
	}
	for _, s := range obj(obj(root.Get("components")).Get("schemas")) {
		so := obj(s.Value)
		d.Schemas = append(d.Schemas, pages.APISchema{
			ID: schemaAnchor(s.Name), Name: s.Name, Type: r.typeOf(so), Description: r.md(so.Get("description")),
			Fields: r.fields(so),
		})
	}
	return d, nil
}

type reader struct{ root Object }

func obj(v any) Object { o, _ := v.(Object); return o }
func arr(v any) []any  { a, _ := v.([]any); return a }
func str(v any) string { s, _ := v.(string); return s }

func schemaAnchor(name string) string { return "schema-" + name }

// tagTitle is a tag's x-displayName (Redoc's extension), else its name.
func (r reader) tagTitle(t Object) string {
	if n := str(t.Get("x-displayName")); n != "" {
		return n
	}
	return str(t.Get("name"))
}

func (r reader) md(v any) template.HTML {
	s := str(v)
	if s == "" {
		return ""
	}
	var b bytes.Buffer
	if err := markdown.Convert([]byte(s), &b); err != nil {
		return template.HTML(template.HTMLEscapeString(s))
	}
	// goldmark escapes text and omits raw HTML (no html.WithUnsafe), so its output is safe
	// to insert as it is.
	return template.HTML(b.String())
}

// resolve follows a local reference ("#/components/…") to what it names.
func (r reader) resolve(v any) (Object, string) {
	o := obj(v)
	for range 8 { // references to references, but never a loop
		ref := str(o.Get("$ref"))
		if !strings.HasPrefix(ref, "#/") {
			return o, ""
		}
		var cur any = r.root
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
			cur = obj(cur).Get(part)
		}
		next := obj(cur)
		if strings.HasPrefix(ref, "#/components/schemas/") {
			return next, strings.TrimPrefix(ref, "#/components/schemas/")
		}
		o = next
	}
	return o, ""
}

func (r reader) operation(path, method string, op Object, shared []any) (pages.APIOperation, error) {
	id := str(op.Get("operationId"))
	if id == "" {
		return pages.APIOperation{}, errors.New("no operationId")
	}
	o := pages.APIOperation{
		ID: "op-" + id, Method: strings.ToUpper(method), Path: path, Summary: str(op.Get("summary")),
		Description: r.md(op.Get("description")), Security: r.security(op),
	}
	for _, p := range append(slices.Clone(shared), arr(op.Get("parameters"))...) {
		po, _ := r.resolve(p)
		typ, link := r.typeLink(po.Get("schema"))
		o.Params = append(o.Params, pages.APIField{
			Name: str(po.Get("name")), In: str(po.Get("in")), Type: typ, TypeLink: link,
			Required: po.Get("required") == true, Description: r.md(po.Get("description")),
		})
	}
	if rb := op.Get("requestBody"); rb != nil {
		rbo, _ := r.resolve(rb)
		o.Body = r.content(obj(rbo.Get("content")))
	}
	for _, resp := range obj(op.Get("responses")) {
		ro, _ := r.resolve(resp.Value)
		res := pages.APIResponse{Status: resp.Name, Description: r.md(ro.Get("description")), Content: r.content(obj(ro.Get("content")))}
		for _, h := range obj(ro.Get("headers")) {
			ho, _ := r.resolve(h.Value)
			typ, link := r.typeLink(ho.Get("schema"))
			res.Headers = append(res.Headers, pages.APIField{Name: h.Name, In: "header", Type: typ, TypeLink: link, Description: r.md(ho.Get("description"))})
		}
		o.Responses = append(o.Responses, res)
	}
	return o, nil
}

// security says in words what token an operation needs: the scopes of its bearer requirement.
func (r reader) security(op Object) string {
	reqs := arr(op.Get("security"))
	if reqs == nil {
		reqs = arr(r.root.Get("security"))
	}
	var out []string
	for _, req := range reqs {
		for _, m := range obj(req) {
			switch scopes := arr(m.Value); {
			case m.Name == "bearerAuth" && len(scopes) > 0:
				s := make([]string, len(scopes))
				for i, x := range scopes {
					s[i] = str(x)
				}
				out = append(out, "Bearer, scope "+strings.Join(s, " "))
			case m.Name == "bearerAuth":
				out = append(out, "Bearer")
			case m.Name == "clientBasic":
				out = append(out, "client_id and client_secret, in the form or by HTTP Basic")
			}
		}
	}
	return strings.Join(out, "; ")
}

// content describes the first media type of a body: its schema's fields and its examples.
func (r reader) content(c Object) *pages.APIContent {
	if len(c) == 0 {
		return nil
	}
	mt := obj(c[0].Value)
	out := &pages.APIContent{ContentType: c[0].Name}
	schema, name := r.resolve(mt.Get("schema"))
	if name != "" {
		out.Schema, out.SchemaLink = name, schemaAnchor(name)
	}
	out.Fields = r.fields(schema)
	for _, e := range obj(mt.Get("examples")) {
		eo, _ := r.resolve(e.Value)
		ex := pages.APIExample{Name: e.Name, Summary: str(eo.Get("summary")), Value: show(eo.Get("value")), Request: r.request(obj(eo.Get("x-request")))}
		for _, h := range obj(eo.Get("x-response-headers")) {
			ex.Headers = append(ex.Headers, h.Name+": "+str(h.Value))
		}
		out.Examples = append(out.Examples, ex)
	}
	return out
}

// request shows the x-request of an answer's example: what to send to get it.
func (r reader) request(x Object) string {
	if x == nil {
		return ""
	}
	var lines []string
	if str(x.Get("token")) == "none" {
		lines = append(lines, "(不带令牌 no Authorization header)")
	} else if t := str(x.Get("token")); t != "" {
		lines = append(lines, "(令牌只有 a token with only scope "+t+")")
	}
	for _, h := range obj(x.Get("headers")) {
		lines = append(lines, h.Name+": "+str(h.Value))
	}
	if ct := str(x.Get("contentType")); ct != "" {
		lines = append(lines, "Content-Type: "+ct)
	}
	for _, p := range obj(x.Get("path")) {
		lines = append(lines, "{"+p.Name+"} = "+str(p.Value))
	}
	if ex := arr(x.Get("examples")); len(ex) > 0 {
		names := make([]string, len(ex))
		for i, n := range ex {
			names[i] = str(n)
		}
		lines = append(lines, "示例 the request examples: "+strings.Join(names, ", "))
	}
	if b := x.Get("body"); b != nil {
		lines = append(lines, show(b))
	}
	return strings.Join(lines, "\n")
}

// show writes an example value: a string as it is, anything else as indented JSON.
func show(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// fields lists the properties of a schema, with those of the schemas it is made of (allOf),
// the later ones overriding: an envelope whose data is a PushAnswer lists data as PushAnswer.
func (r reader) fields(s Object) []pages.APIField {
	var out []pages.APIField
	var required []string
	var walk func(s Object)
	walk = func(s Object) {
		for _, part := range arr(s.Get("allOf")) {
			po, _ := r.resolve(part)
			walk(po)
		}
		for _, q := range arr(s.Get("required")) {
			required = append(required, str(q))
		}
		for _, p := range obj(s.Get("properties")) {
			po := obj(p.Value)
			typ, link := r.typeLink(p.Value)
			f := pages.APIField{Name: p.Name, Type: typ, TypeLink: link, Description: r.md(po.Get("description"))}
			if f.Description == "" && link != "" {
				target, _ := r.resolve(p.Value)
				f.Description = r.md(target.Get("description"))
			}
			if i := slices.IndexFunc(out, func(x pages.APIField) bool { return x.Name == p.Name }); i >= 0 {
				// a narrowing (data: PushAnswer, code: "A00000") keeps the general description
				if f.Description == "" {
					f.Description = out[i].Description
				}
				out[i] = f
				continue
			}
			out = append(out, f)
		}
	}
	walk(s)
	for i := range out {
		out[i].Required = slices.Contains(required, out[i].Name)
	}
	return out
}

func (r reader) typeLink(v any) (string, string) {
	o := obj(v)
	if ref := str(o.Get("$ref")); strings.HasPrefix(ref, "#/components/schemas/") {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		return name, schemaAnchor(name)
	}
	return r.typeOf(o), ""
}

// typeOf says in a few words what values a schema allows.
func (r reader) typeOf(s Object) string {
	switch {
	case s == nil:
		return "any"
	case s.Get("$ref") != nil:
		t, _ := r.typeLink(s)
		return t
	case s.Get("const") != nil:
		return show(s.Get("const"))
	case s.Get("enum") != nil:
		var vs []string
		for _, e := range arr(s.Get("enum")) {
			vs = append(vs, show(e))
		}
		return strings.Join(vs, " | ")
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		if alts := arr(s.Get(k)); len(alts) > 0 {
			var vs []string
			for _, a := range alts {
				if t := r.typeOf(obj(a)); !slices.Contains(vs, t) {
					vs = append(vs, t)
				}
			}
			return strings.Join(vs, " | ")
		}
	}
	var t string
	switch tv := s.Get("type").(type) {
	case string:
		t = tv
	case []any:
		var ts []string
		for _, x := range tv {
			ts = append(ts, str(x))
		}
		t = strings.Join(ts, " | ")
	}
	if t == "array" {
		it, _ := r.typeLink(s.Get("items"))
		t = it + "[]"
		if mn, mx := s.Get("minItems"), s.Get("maxItems"); mn != nil || mx != nil {
			t += fmt.Sprintf(" (%v–%v)", orDash(mn), orDash(mx))
		}
	}
	if f := str(s.Get("format")); f != "" {
		t += " (" + f + ")"
	}
	if t == "" && s.Get("allOf") != nil {
		return "object"
	}
	if t == "" {
		return "any"
	}
	return t
}

func orDash(v any) any {
	if v == nil {
		return "…"
	}
	return v
}
