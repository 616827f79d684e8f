package platform_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/platform"
)

// TestAPIBaseEmptyFragmentRefused: New refuses an api_base ending in a bare "#", which
// net/url reads as an empty fragment: the paths appended to it would travel in the fragment,
// which is never sent, and the token call would go to the API's root "/".
func TestAPIBaseEmptyFragmentRefused(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer srv.Close()
	c, err := platform.New(platform.Config{APIBase: srv.URL + "/#", AppID: "wx1", Secret: "s"})
	if err != nil {
		return // refused: as it should be
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = c.Ready(ctx)
	mu.Lock()
	defer mu.Unlock()
	t.Fatalf("platform.New accepted api_base %q; its calls went to %q, not /cgi-bin/stable_token", srv.URL+"/#", paths)
}
