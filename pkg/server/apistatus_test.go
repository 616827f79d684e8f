package server_test

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/standalone"
)

// describedStatuses maps "METHOD /path" (realm filled in) to the statuses its description
// lists.
func describedStatuses(t *testing.T, e *env) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for _, o := range operations(t, e.description(t), e.cfg.OAuth.Realm) {
		resp, _ := o.op["responses"].(map[string]any)
		for code := range resp {
			n, err := strconv.Atoi(code)
			if err != nil {
				t.Errorf("%s %s: response %q is not a status", o.method, o.path, code)
				continue
			}
			out[o.method+" "+o.path] = append(out[o.method+" "+o.path], n)
		}
	}
	return out
}

// TestOpenAPIDescribesEveryStatus: what a handler answers is described for its operation,
// the way a client generator or a contract test (Schemathesis) checks it. Every operation is
// called as a newcomer would call it first (no token, no body, an unknown id), every
// operation under /auth/realms/{realm} with a realm that does not exist, and the callback's
// refusals are provoked one by one.
func TestOpenAPIDescribesEveryStatus(t *testing.T) {
	st, err := standalone.Start(context.Background(), standalone.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	e := &env{t: t, url: st.Info.BaseURL, api: st.API, cfg: st.Config}
	described := describedStatuses(t, e)
	realm := "/auth/realms/" + e.cfg.OAuth.Realm
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	call := func(method, path string) int {
		t.Helper()
		req, _ := http.NewRequest(method, e.url+strings.NewReplacer("{ucsId}", "01KAAAAAAAAAAAAAAAAAAAAAAA").Replace(path), nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	ops := make([]string, 0, len(described))
	for op := range described {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	realmOps := 0
	for _, op := range ops {
		method, path, _ := strings.Cut(op, " ")
		if got := call(method, path); !slices.Contains(described[op], got) {
			t.Errorf("%s without token or body: %d, described %v", op, got, described[op])
		}
		if rest, ok := strings.CutPrefix(path, realm+"/"); ok {
			realmOps++
			if got := call(method, "/auth/realms/no-such-realm/"+rest); got != http.StatusNotFound || !slices.Contains(described[op], got) {
				t.Errorf("%s with an unknown realm: %d, described %v", op, got, described[op])
			}
		}
	}
	if realmOps < 18 {
		t.Errorf("only %d operations under %s", realmOps, realm)
	}
}

// TestCallbackStatusesDescribed: the callback's refusals (a replayed address check, an event
// signed by an address check's query, a receipt for a message not recorded as sent) are answered with statuses its
// description lists.
func TestCallbackStatusesDescribed(t *testing.T) {
	e := newEnv(t)
	described := describedStatuses(t, e)
	check := func(op string, got int, want int) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %d, want %d", op, got, want)
		}
		if !slices.Contains(described[op], got) {
			t.Errorf("%s answers %d, described %v", op, got, described[op])
		}
	}
	now := e.clock.Now().Unix()
	q := e.plainQuery(cbToken, "status-event")
	check("POST "+callbackPath, e.callback(q, followEvent("oA", "subscribe", now)).status, 200)
	q = e.plainQuery(cbToken, "status-check")
	check("GET "+callbackPath, e.do("GET", callbackPath+"?"+q+"&echostr=abc", "", "", "").status, 200)
	check("GET "+callbackPath, e.do("GET", callbackPath+"?"+q+"&echostr=abc", "", "", "").status, http.StatusConflict)
	// An address check's signed query taken to sign an event.
	check("POST "+callbackPath, e.callback(q, followEvent("oA", "subscribe", now+1)).status, http.StatusConflict)
	receipt := e.callback(e.plainQuery(cbToken, "status-receipt"), receiptEvent("oA", 4242, simulator.StatusSuccess)).status
	if !slices.Contains(described["POST "+callbackPath], receipt) {
		t.Errorf("a receipt for a message not recorded as sent: %d, described %v", receipt, described["POST "+callbackPath])
	}
}
