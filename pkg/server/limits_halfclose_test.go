package server_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
)

// grantHalfClosed asks base for a client credentials token over a connection whose write side
// the client closes once the request is sent (TCP half-close, shutdown(SHUT_WR)): net/http
// then cancels the request's context, and still writes the answer, which the client reads.
func grantHalfClosed(t *testing.T, base, id, secret, xff string) int {
	t.Helper()
	u, _ := url.Parse(base)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	body := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}}.Encode()
	req := "POST /v1/token HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Type: application/x-www-form-urlencoded\r\n" +
		"X-Forwarded-For: " + xff + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && !strings.Contains(string(b), "access_token") {
		t.Fatalf("200 without a token: %s", b)
	}
	return resp.StatusCode
}

// TestRateLimitsHoldForHalfClosedRequests: the token endpoint's per-client and per-address
// limits (a burst of 10 and 6 here, with no refill to speak of) hold for a client that
// half-closes its connection after each request; it still reads every answer. The
// cancelled context made the shared bucket's read fail, which the guard took for NATS being
// away, and every request was granted.
func TestRateLimitsHoldForHalfClosedRequests(t *testing.T) {
	e := newEnvWith(t, func(c *config.Config) {
		c.OAuth.TrustedProxies = []string{"127.0.0.0/8"}
		c.OAuth.RateLimits.PerClient, c.OAuth.RateLimits.PerClientBurst = 0.01, 10
		c.OAuth.RateLimits.PerAddress, c.OAuth.RateLimits.PerAddressBurst = 0.01, 6
	})
	granted := map[int]int{}
	for range 40 {
		granted[grantHalfClosed(t, e.url, "pusher", pushSecret, "10.5.0.1")]++
	}
	if granted[200] > 6 {
		t.Errorf("one address, burst 6, no refill: %d of 40 half-closed requests granted (%v)", granted[200], granted)
	}
	granted = map[int]int{}
	for i := range 40 {
		granted[grantHalfClosed(t, e.url, "other", pushSecret, "10.6.0."+strconv.Itoa(i))]++
	}
	if granted[200] > 10 {
		t.Errorf("one client, burst 10, no refill: %d of 40 half-closed requests granted (%v)", granted[200], granted)
	}
}
