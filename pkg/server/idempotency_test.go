package server_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/campus-it/ucs/schemas"
)

// TestIdempotencyKeyAsDescribed: the front end accepts exactly the Idempotency-Key values
// that the served description's pattern allows (printable ASCII without space).
func TestIdempotencyKeyAsDescribed(t *testing.T) {
	var doc struct {
		Components struct {
			Parameters map[string]struct {
				Schema struct {
					Pattern string `json:"pattern"`
				} `json:"schema"`
			} `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(schemas.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	described := regexp.MustCompile(doc.Components.Parameters["IdempotencyKey"].Schema.Pattern)
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	for i, key := range []string{"a b", "exam notice", "!", "~", "k~!{}", strings.Repeat("k", 128), strings.Repeat("k", 129), "é", "a\tb"} {
		a := e.doWith("POST", "/v1/infra/notification/mp", tok, goodItemN(i+1), map[string]string{"Idempotency-Key": key})
		if accepted, want := a.status == 200, described.MatchString(key); accepted != want {
			t.Errorf("Idempotency-Key %q: %d %s; the description's pattern %s matches: %v", key, a.status, a.body, described, want)
		}
	}
}
