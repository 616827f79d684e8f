package openapi

import (
	"fmt"
	"strings"
)

// Bundle returns doc with each component schema that is only a reference to another file
// ({"$ref": "push.schema.json"}) replaced by that file's schema, read by read. The file's $defs
// become components named "<component>.<def>" and its "#/$defs/…" references point there. Its
// $schema and $id are dropped: an $id inside the document would make those references resolve
// against the file's address instead of the document.
//
// So a schema has one source (the file, which its own tests keep right) and the served
// document still stands alone, for tools that do not follow references to other files.
func Bundle(doc []byte, read func(name string) ([]byte, error)) ([]byte, error) {
	root, err := Parse(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	ro, _ := root.(Object)
	comps, _ := ro.Get("components").(Object)
	all, _ := comps.Get("schemas").(Object)
	var out Object
	for _, m := range all {
		s, _ := m.Value.(Object)
		file, _ := s.Get("$ref").(string)
		if len(s) != 1 || file == "" || strings.HasPrefix(file, "#") {
			out = append(out, m)
			continue
		}
		b, err := read(file)
		if err != nil {
			return nil, fmt.Errorf("openapi: components.schemas.%s: %w", m.Name, err)
		}
		v, err := Parse(b)
		if err != nil {
			return nil, fmt.Errorf("openapi: %s: %w", file, err)
		}
		schema, ok := v.(Object)
		if !ok {
			return nil, fmt.Errorf("openapi: %s: not a schema object", file)
		}
		defs, _ := schema.Get("$defs").(Object)
		for _, k := range []string{"$defs", "$schema", "$id"} {
			schema.Delete(k)
		}
		prefix := "#/components/schemas/" + m.Name + "."
		out = append(out, Member{m.Name, rewriteRefs(schema, prefix)})
		for _, d := range defs {
			out = append(out, Member{m.Name + "." + d.Name, rewriteRefs(d.Value, prefix)})
		}
	}
	comps.Set("schemas", out)
	return Marshal(root)
}

// rewriteRefs points every "#/$defs/<name>" reference in v to prefix+name.
func rewriteRefs(v any, prefix string) any {
	switch t := v.(type) {
	case Object:
		for i, m := range t {
			if s, ok := m.Value.(string); ok && m.Name == "$ref" && strings.HasPrefix(s, "#/$defs/") {
				t[i].Value = prefix + strings.TrimPrefix(s, "#/$defs/")
				continue
			}
			t[i].Value = rewriteRefs(m.Value, prefix)
		}
	case []any:
		for i, x := range t {
			t[i] = rewriteRefs(x, prefix)
		}
	}
	return v
}
