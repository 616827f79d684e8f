package server_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

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
