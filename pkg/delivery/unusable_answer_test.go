package delivery_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
)

// TestAnswerThatIsNoJSONIsNotNamedUnreachable: a gateway or captive portal between the worker and
// the platform answers the send with 200 and an HTML page. The call got an answer, yet the push's
// lastError (what its caller reads) says the platform "could not be reached", which sends an
// operator to look for a network or DNS fault rather than at the proxy answering in its place.
func TestAnswerThatIsNoJSONIsNotNamedUnreachable(t *testing.T) {
	r := newRig(t)
	var sends atomic.Int64
	pc := r.platformBehind(func(w http.ResponseWriter, req *http.Request) bool {
		if !strings.Contains(req.URL.Path, "/message/template/send") {
			return false
		}
		sends.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, "<html><body>Please sign in to the campus network</body></html>")
		return true
	})
	slow := delivery.RetryPolicy{Initial: time.Hour, Max: 9 * time.Minute, Multiplier: 2, MaxAttempts: 5}
	r.startWorkerWith(slow, func(c *delivery.Config) { c.Platform = pc })
	id := r.publish("u-follows", "JML", jml)
	var last string
	embeddedtest.Eventually(t, 15*time.Second, "the first attempt's error is recorded", func() bool {
		res, err := r.st.Current(context.Background(), id)
		last = res.LastError
		return err == nil && res.Attempts == 1 && last != ""
	})
	if strings.Contains(last, "could not be reached") {
		t.Fatalf("the platform's address answered 200 with an HTML page (%d send calls), but lastError = %q", sends.Load(), last)
	}
}
