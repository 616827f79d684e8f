package schemas

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// load builds the document model with libopenapi, failing on any reference it cannot resolve.
func load(t *testing.T, spec []byte, cfg *datamodel.DocumentConfiguration) (libopenapi.Document, *v3.Document) {
	t.Helper()
	doc, err := libopenapi.NewDocumentWithConfiguration(spec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); v != "3.1.0" {
		t.Fatalf("openapi %q, want 3.1.0", v)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("building the model: %v", err)
	}
	return doc, &m.Model
}

// TestOpenAPIValid checks the served (bundled) description against the OpenAPI 3.1 schema,
// resolves every reference in it, and checks that every example value of a request or a
// response is valid for the schema it illustrates, so that no example tells a developer
// something the interface would refuse or never answer.
func TestOpenAPIValid(t *testing.T) {
	doc, m := load(t, OpenAPI(), &datamodel.DocumentConfiguration{})
	if ok, errs := schema_validation.ValidateOpenAPIDocument(doc); !ok {
		for _, e := range errs {
			t.Errorf("%s: %s (line %d)", e.Message, e.Reason, e.SpecLine)
			for _, f := range e.SchemaValidationErrors {
				t.Errorf("  %s %s: %s", f.FieldPath, f.KeywordLocation, f.Reason)
			}
		}
	}
	if v, errs := validator.NewValidator(doc); len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	} else if ok, errs := v.ValidateDocument(); !ok {
		t.Errorf("validator: %v", errs)
	}

	sv := schema_validation.NewSchemaValidator()
	checked := 0
	check := func(where string, mt *v3.MediaType) {
		if mt == nil || mt.Schema == nil || mt.Examples == nil {
			return
		}
		s := mt.Schema.Schema()
		for name, ex := range mt.Examples.FromOldest() {
			if ex.Value == nil {
				t.Errorf("%s example %s has no value", where, name)
				continue
			}
			var v any
			if err := ex.Value.Decode(&v); err != nil {
				t.Fatal(err)
			}
			checked++
			if ok, errs := sv.ValidateSchemaObject(s, v); !ok {
				for _, e := range errs {
					reasons := []string{e.Reason}
					for _, f := range e.SchemaValidationErrors {
						reasons = append(reasons, f.FieldPath+": "+f.Reason)
					}
					t.Errorf("%s example %s does not fit its schema: %s", where, name, strings.Join(reasons, "; "))
				}
			}
		}
	}
	for path, item := range m.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			where := strings.ToUpper(method) + " " + path
			if op.RequestBody != nil {
				for ct, mt := range op.RequestBody.Content.FromOldest() {
					check(where+" request "+ct, mt)
				}
			}
			for code, r := range op.Responses.Codes.FromOldest() {
				for ct, mt := range r.Content.FromOldest() {
					check(fmt.Sprintf("%s %s %s", where, code, ct), mt)
				}
			}
		}
	}
	if checked < 40 {
		t.Errorf("only %d examples checked; the walk missed some", checked)
	}
}

// TestOpenAPISourceStandsAlone: openapi.json as kept in the repository, with its relative
// reference to push.schema.json, is a valid description too, so an editor or a tool pointed
// at the file sees what the service serves.
func TestOpenAPISourceStandsAlone(t *testing.T) {
	raw, err := FS.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"$ref": "push.schema.json"`) {
		t.Fatal("openapi.json no longer refers to push.schema.json: the push rules would have two sources")
	}
	doc, m := load(t, raw, &datamodel.DocumentConfiguration{BasePath: ".", AllowFileReferences: true})
	if ok, errs := schema_validation.ValidateOpenAPIDocument(doc); !ok {
		t.Errorf("openapi.json: %v", errs)
	}
	push := m.Components.Schemas.GetOrZero("PushBody").Schema()
	if push == nil || push.Properties == nil || push.Properties.GetOrZero("userId") == nil {
		t.Fatal("PushBody does not resolve to push.schema.json")
	}
}

// TestOpenAPIBundlesThePushSchema: the served description carries push.schema.json's rules
// themselves, not a copy that could drift: every $defs entry became a component.
func TestOpenAPIBundlesThePushSchema(t *testing.T) {
	_, m := load(t, OpenAPI(), &datamodel.DocumentConfiguration{})
	var names []string
	for name := range m.Components.Schemas.KeysFromOldest() {
		names = append(names, name)
	}
	for _, want := range []string{"PushBody", "PushBody.text", "PushBody.mainItem", "PushBody.TDL", "PushBody.OPPAN"} {
		if !slices.Contains(names, want) {
			t.Errorf("component %s missing; have %v", want, names)
		}
	}
	if strings.Contains(string(OpenAPI()), "$defs") || strings.Contains(string(OpenAPI()), `"push.schema.json"`) {
		t.Error("the served description still refers to $defs or to push.schema.json")
	}
	b := OpenAPI()
	b[0] = 'x'
	if OpenAPI()[0] != '{' {
		t.Error("OpenAPI() returns shared bytes")
	}
}
