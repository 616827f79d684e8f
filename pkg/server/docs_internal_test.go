package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestDescribedCodesAreTheServers: the envelope codes the OpenAPI description lists are
// exactly those the error handler answers, each with its HTTP status; and the description
// says so in its introduction too.
func TestDescribedCodesAreTheServers(t *testing.T) {
	d, err := newAPIDocs("ucs", "")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Info struct {
			Description string `json:"description"`
		} `json:"info"`
		Components struct {
			Schemas struct {
				Code struct {
					OneOf []struct {
						Const       string `json:"const"`
						Description string `json:"description"`
					} `json:"oneOf"`
				} `json:"Code"`
			} `json:"schemas"`
			Parameters struct {
				Realm struct {
					Schema struct {
						Enum []string `json:"enum"`
					} `json:"schema"`
				} `json:"realm"`
			} `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(d.spec, &doc); err != nil {
		t.Fatal(err)
	}
	described := map[Code]string{}
	for _, c := range doc.Components.Schemas.Code.OneOf {
		described[Code(c.Const)] = c.Description
	}
	for code, status := range statusOf {
		desc, ok := described[code]
		if !ok {
			t.Errorf("code %s (HTTP %d) is not described", code, status)
			continue
		}
		if !strings.HasPrefix(desc, fmt.Sprintf("HTTP %d:", status)) {
			t.Errorf("code %s is described %q; the server answers it with HTTP %d", code, desc, status)
		}
		if row := fmt.Sprintf("| `%s` | %d |", code, status); !strings.Contains(doc.Info.Description, row) {
			t.Errorf("the introduction's table lacks %q", row)
		}
		delete(described, code)
	}
	for code := range described {
		t.Errorf("code %s is described but never answered", code)
	}
	if e := doc.Components.Parameters.Realm.Schema.Enum; len(e) != 1 || e[0] != "ucs" {
		t.Errorf("realm parameter allows %v, want the server's realm [ucs]", e)
	}
}
