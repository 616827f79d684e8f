package server_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/campus-it/ucs/pkg/server"
)

// TestResultsBodyAgreesWithDescription: the served description says ucsIds is an array of
// strings; the server and the description's validator judge each body the same way (a null
// id, like a number, is refused).
func TestResultsBodyAgreesWithDescription(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	spec := e.do("GET", server.OpenAPIPath, "", "", "").body
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, body := range []string{
		`{"ucsIds":["01KAW3J5M7Q9S2V4X6Z8B0D2F4"]}`,
		`{"ucsIds":[1]}`,
		`{"ucsIds":[null]}`,
		`{"ucsIds":["01KAW3J5M7Q9S2V4X6Z8B0D2F4",null]}`,
	} {
		a := e.do("POST", "/v1/infra/notification/mp/results", "application/json", tok, body)
		req, _ := http.NewRequest(http.MethodPost, "http://x/v1/infra/notification/mp/results", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", tok)
		ok, verrs := v.ValidateHttpRequest(req)
		if (a.status == http.StatusOK) != ok {
			var msgs []string
			for _, ve := range verrs {
				msgs = append(msgs, ve.Message+": "+ve.Reason)
				for _, f := range ve.SchemaValidationErrors {
					msgs = append(msgs, f.FieldPath+": "+f.Reason)
				}
			}
			t.Errorf("%s: the front end answers %d %s; the served description's validator accepts it: %v %v", body, a.status, a.body, ok, msgs)
		}
	}
}

type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// TestPushRefusesDeclaredOversizeBeforeContinue: a push, a batch and a results lookup whose
// declared Content-Length is past their limit are answered 413 before the body is read, so a
// client that sends Expect: 100-continue uploads nothing (RFC 9110 §10.1.1).
func TestPushRefusesDeclaredOversizeBeforeContinue(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	for _, p := range []string{"/v1/infra/notification/mp/batch", "/v1/infra/notification/mp/results", "/v1/infra/notification/mp"} {
		size := 20 << 20
		cr := &countingReader{r: strings.NewReader(strings.Repeat(" ", size))}
		req, _ := http.NewRequest(http.MethodPost, e.url+p, cr)
		req.ContentLength = int64(size)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", tok)
		req.Header.Set("Expect", "100-continue")
		cl := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Second}}
		resp, err := cl.Do(req)
		if err != nil {
			t.Errorf("POST %s: %v after the client sent %d bytes", p, err, cr.n.Load())
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || cr.n.Load() != 0 {
			t.Errorf("POST %s, Content-Length %d, Expect: 100-continue: %d %s; the client sent %d bytes of the body, want 413 before any byte", p, size, resp.StatusCode, b, cr.n.Load())
		}
	}
}
