package server_test

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

// countingBody is a request body of n bytes that counts how many of them were read.
type countingBody struct {
	head, tail string
	n, pos     int64
	read       *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	total := int64(len(b.head)) + b.n + int64(len(b.tail))
	if b.pos >= total {
		return 0, io.EOF
	}
	i := 0
	for i < len(p) && b.pos < total {
		switch {
		case b.pos < int64(len(b.head)):
			p[i] = b.head[b.pos]
		case b.pos < int64(len(b.head))+b.n:
			p[i] = 'x'
		default:
			p[i] = b.tail[b.pos-int64(len(b.head))-b.n]
		}
		i++
		b.pos++
	}
	b.read.Add(int64(i))
	return i, nil
}

// TestPagesReadNoBody: a GET of a sign-in page (the account page, not signed in: no client, no
// cookie, no token) takes no body, yet the login form's page read c.FormValue("username"),
// which parses a multipart/form-data body of any method, 32 MiB in memory and the rest in
// temporary files: one request of 48 MiB cost 128 MiB. Every form the service takes is capped
// at maxFormBytes (16 KiB); a GET's body is not read at all.
func TestPagesReadNoBody(t *testing.T) {
	e := newSignInEnv(t)
	const size = 48 << 20
	var read atomic.Int64
	body := &countingBody{
		head: "--B\r\nContent-Disposition: form-data; name=\"username\"; filename=\"u\"\r\n\r\n",
		tail: "\r\n--B--\r\n", n: size, read: &read,
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req, err := http.NewRequest(http.MethodGet, e.issuer+"/account", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body.head)) + size + int64(len(body.tail))
	req.Header.Set("Content-Type", "multipart/form-data; boundary=B")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	runtime.ReadMemStats(&after)
	t.Logf("answer %d (%d bytes of page, login form: %v); body bytes the server read: %d MiB; allocated meanwhile: %d MiB",
		resp.StatusCode, len(b), strings.Contains(string(b), `name="username"`), read.Load()>>20, (after.TotalAlloc-before.TotalAlloc)>>20)
	// What the connection's buffers take before the server answers and closes it (a few MiB)
	// is sent all the same; the body read whole is 48 MiB.
	if got := read.Load(); got > 16<<20 {
		t.Fatalf("a GET of the account page read %d MiB of a body it has no use for (forms are capped at 16 KiB)", got>>20)
	}
}
