package server

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/openapi"
	"github.com/campus-it/ucs/pkg/pages"
	"github.com/campus-it/ucs/schemas"
)

// Paths of the API documentation: the OpenAPI description and the page made from it.
const (
	OpenAPIPath = "/v1/meta/openapi.json"
	DocsPath    = "/v1/meta/docs"
)

// apiDocs is the description this server serves and the page read from it, made once: both
// depend only on the embedded description and the realm.
type apiDocs struct {
	spec []byte
	page pages.APIDocsData
}

// newAPIDocs fills the realm this server answers for into the description: the realm
// parameter of the /auth/realms/{realm} paths allows that one value.
func newAPIDocs(realm, publicURL string) (*apiDocs, error) {
	v, err := openapi.Parse(schemas.OpenAPI())
	if err != nil {
		return nil, err
	}
	root, _ := v.(openapi.Object)
	comps, _ := root.Get("components").(openapi.Object)
	params, _ := comps.Get("parameters").(openapi.Object)
	rp, _ := params.Get("realm").(openapi.Object)
	schema, _ := rp.Get("schema").(openapi.Object)
	if schema == nil {
		return nil, fmt.Errorf("server: the OpenAPI description has no realm parameter")
	}
	schema.Set("enum", []any{realm})
	// The operations' paths are relative to the public address, which may have a path of its
	// own (a gateway's prefix): the server URL is that path, resolved against the address the
	// description was fetched from.
	if base := basePath(publicURL); base != "/" {
		if servers, _ := root.Get("servers").([]any); len(servers) > 0 {
			if s0, _ := servers[0].(openapi.Object); s0 != nil {
				s0.Set("url", base)
			}
		}
	}
	spec, err := openapi.Marshal(root)
	if err != nil {
		return nil, err
	}
	page, err := openapi.Page(spec, OpenAPIPath)
	if err != nil {
		return nil, err
	}
	return &apiDocs{spec: spec, page: page}, nil
}

// basePath is the path of the public address publicURL, "/" if it has none.
func basePath(publicURL string) string {
	u, err := url.Parse(publicURL)
	if err != nil || strings.TrimRight(u.Path, "/") == "" {
		return "/"
	}
	return strings.TrimRight(u.Path, "/")
}

// OpenAPIDescription returns the OpenAPI description as a front end of realm serves it at
// OpenAPIPath, for tools that check it outside a running service (scripts/lint-openapi).
func OpenAPIDescription(realm string) ([]byte, error) {
	d, err := newAPIDocs(realm, "")
	if err != nil {
		return nil, err
	}
	return d.spec, nil
}

// openAPI serves the OpenAPI description: no token, like the metadata dictionary.
func (s *Server) openAPI(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.Blob(http.StatusOK, "application/json", s.docs.spec)
}

// apiDocsPage serves the documentation page, with the pages' security headers: it runs no
// script and loads nothing from elsewhere.
func (s *Server) apiDocsPage(c echo.Context) error {
	return s.page(c, http.StatusOK, func(b *bytes.Buffer, nonce string) error {
		d := s.docs.page
		d.Nonce = nonce
		return pages.APIDocs(b, d)
	})
}
