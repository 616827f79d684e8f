package server_test

import (
	"bufio"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawAnswer sends req as written, header lines a Go client would not write included, and reads
// the answer.
func rawAnswer(t *testing.T, base, req string) (rawReply, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return rawReply{StatusCode: resp.StatusCode, Header: resp.Header}, string(b)
}

// rawReply is what a test reads of rawAnswer's answer besides its body.
type rawReply struct {
	StatusCode int
	Header     http.Header
}

// TestTwoAuthorizationHeadersRefused: a request may carry one Authorization header (RFC 9110
// §5.3). With two, a proxy that checked one line and the server that read the other would
// disagree on who asks: the request is refused as malformed, whichever line comes first.
func TestTwoAuthorizationHeadersRefused(t *testing.T) {
	e := newEnv(t)
	tok := e.token("pusher", pushSecret)
	lookup := "GET /v1/infra/notification/mp/01KAAAAAAAAAAAAAAAAAAAAAAA HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
	for _, order := range [][2]string{{tok, "Bearer junk"}, {"Bearer junk", tok}} {
		resp, body := rawAnswer(t, e.url, lookup+"Authorization: "+order[0]+"\r\nAuthorization: "+order[1]+"\r\n\r\n")
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_request"`) {
			t.Errorf("Authorization %.11s… then %.11s…: %d %s %s; want 401 invalid_request", order[0], order[1], resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
		}
	}
	if resp, body := rawAnswer(t, e.url, lookup+"Authorization: "+tok+"\r\n\r\n"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the token alone: %d %s, want the lookup's 404", resp.StatusCode, body)
	}
	// The token endpoint's Basic credentials likewise.
	form := "grant_type=client_credentials"
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("pusher:"+pushSecret))
	resp, body := rawAnswer(t, e.url, "POST /v1/token HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\n"+
		"Authorization: "+basic+"\r\nAuthorization: Basic eDp5\r\nContent-Length: "+strconv.Itoa(len(form))+"\r\n\r\n"+form)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "invalid_request") {
		t.Errorf("the token endpoint with two Authorization headers: %d %s, want 400 invalid_request", resp.StatusCode, body)
	}
}

// TestPercentEncodedUnreservedPath: /v1/%74oken is /v1/token (RFC 3986 §6.2.2.2), as a client
// or proxy that encodes more than it must sends it, and …/mp/%62atch is the batch interface,
// not a lookup that allows no POST.
func TestPercentEncodedUnreservedPath(t *testing.T) {
	e := newEnv(t)
	form := "grant_type=client_credentials&client_id=pusher&client_secret=" + pushSecret
	for _, p := range []string{"/v1/token", "/v1/%74oken", "/v%31/token", "/%76%31/%74%6F%6B%65%6E"} {
		resp, body := rawAnswer(t, e.url, "POST "+p+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nConnection: close\r\nContent-Length: "+strconv.Itoa(len(form))+"\r\n\r\n"+form)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("POST %s: %d %s; want 200 as for /v1/token", p, resp.StatusCode, body)
		}
	}
	tok := e.token("pusher", pushSecret)
	resp, body := rawAnswer(t, e.url, "POST /v1/infra/notification/mp/%62atch HTTP/1.1\r\nHost: x\r\nAuthorization: "+tok+"\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "messages") {
		t.Errorf("POST …/mp/%%62atch {}: %d Allow=%q %s; want the batch interface's 400 for a body without messages", resp.StatusCode, resp.Header.Get("Allow"), body)
	}
	// An encoded '/' is no separator: no route is made of it.
	if resp, body := rawAnswer(t, e.url, "POST /v1%2Ftoken HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nConnection: close\r\nContent-Length: "+strconv.Itoa(len(form))+"\r\n\r\n"+form); resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /v1%%2Ftoken: %d %s, want 404", resp.StatusCode, body)
	}
}
