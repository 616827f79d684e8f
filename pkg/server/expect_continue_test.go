package server_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// TestFormEndpointsRefuseOversizedBodyBeforeContinue: a client that declares a body larger than
// the endpoint takes and asks "Expect: 100-continue" is refused before it sends the body, as the
// push, batch and results endpoints do: the token, revocation, introspection and userinfo
// endpoints, which take at most 16 KiB of form, answer a declared 64 MiB with 400 at once, not
// with "100 Continue".
func TestFormEndpointsRefuseOversizedBodyBeforeContinue(t *testing.T) {
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = e.api.Serve(ctx, ln) }()
	oidc := "/auth/realms/campus/protocol/openid-connect"
	for _, path := range []string{"/v1/token", oidc + "/token", oidc + "/revoke", oidc + "/token/introspect", oidc + "/userinfo"} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("POST " + path + " HTTP/1.1\r\nHost: x\r\n" +
			"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 67108864\r\nExpect: 100-continue\r\n\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		status, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil {
			t.Errorf("%s: no answer to the headers: %v", path, err)
			continue
		}
		if !strings.HasPrefix(status, "HTTP/1.1 400 ") {
			t.Errorf("%s: a declared 64 MiB form (at most 16 KiB taken) was answered %q; want 400 before the body is sent", path, strings.TrimSpace(status))
		}
	}
}
