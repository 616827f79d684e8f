package service

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
)

// TestSideListenersCloseIdleConnections: a worker's probes and metrics listener (and the
// profiles') closes a connection that asked once and then says nothing, after sideIdle (120 s;
// 300 ms here), as the front end's does: it had no idle limit, so whoever reached the port
// could hold any number of connections, each a file descriptor of the worker.
func TestSideListenersCloseIdleConnections(t *testing.T) {
	defer func(d time.Duration) { sideIdle = d }(sideIdle)
	sideIdle = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := sideServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }), time.Second)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: worker\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(c)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	embeddedtest.Eventually(t, 5*time.Second, "the idle connection closed by the server", func() bool {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := rd.ReadByte()
		return errors.Is(err, io.EOF)
	})
}
