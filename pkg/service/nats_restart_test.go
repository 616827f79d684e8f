package service_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/embedded"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/service"
)

// call sends a request, with header's name and value pairs, and returns the status and the
// JSON answer.
func call(t *testing.T, method, u, ctype, auth, body string, header ...string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// TestNATSRestartedWithoutItsData: the NATS server comes back at its address without its
// JetStream files (a pod whose volume was lost). Front end and worker reconnect by themselves;
// the front end makes the push stream, the key-value buckets and the stream of platform events
// again and the worker its consumer, so pushes are taken (with an Idempotency-Key too),
// delivered, and their receipts applied again without a restart of either. (A restart that
// keeps the files is checked first.)
func TestNATSRestartedWithoutItsData(t *testing.T) {
	dir := t.TempDir()
	port := embeddedtest.FreePort(t)
	n, err := embedded.StartNATS(embedded.NATSOptions{Dir: dir, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown() })
	f := embeddedtest.FerretDB(t)
	sim := simulator.New(simulator.Config{AppID: "wxrs", Secret: "wxrssecret"})
	t.Cleanup(sim.Close)
	sim.AddTemplate("tpl-JML", []string{"thing1", "thing2"})
	sim.AddFollower("oRS")
	psrv := httptest.NewServer(sim.Handler())
	t.Cleanup(psrv.Close)
	cfg := &config.Config{
		NATS:     config.NATS{URL: n.URL()},
		MongoDB:  config.MongoDB{URI: f.URI(), Database: embeddedtest.DBName(t)},
		Bindings: []config.Binding{{UserID: "2020000001", OpenID: "oRS"}},
		OAuth: config.OAuth{Clients: []config.Client{{ClientID: "app", ClientSecret: "app-secret-0123456789",
			Grants: []string{"client_credentials"}, Scopes: []string{"notification.mp"}}}},
		Platform: config.Platform{APIBase: psrv.URL, AppID: "wxrs", Secret: "wxrssecret", CallbackToken: "cbtoken",
			Templates: map[string]config.Template{"JML": {TemplateID: "tpl-JML", Fields: map[string]string{"class": "thing1", "info": "thing2"}}}},
		Worker:        config.Worker{Concurrency: 4, AckWait: config.Duration(5 * time.Second)},
		ShutdownGrace: config.Duration(5 * time.Second),
	}
	api, base, stop := serving(t, cfg)
	t.Cleanup(api.Close)
	t.Cleanup(func() { _ = stop() })
	w, err := service.NewWorker(context.Background(), cfg, service.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wstop := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { _ = w.Run(wctx); close(ran) }()
	t.Cleanup(func() { wstop(); <-ran; w.Close() })

	st, m := call(t, "POST", base+"/v1/token", "application/x-www-form-urlencoded", "",
		url.Values{"grant_type": {"client_credentials"}, "client_id": {"app"}, "client_secret": {"app-secret-0123456789"}}.Encode())
	if st != 200 {
		t.Fatalf("token: %d %v", st, m)
	}
	tok := "Bearer " + m["access_token"].(string)
	body := `{"userId":"2020000001","type":"JML","data":{"class":"课程","info":"作业"}}`
	pushAndWait := func(what string, header ...string) string {
		t.Helper()
		var id string
		embeddedtest.Eventually(t, 40*time.Second, what+": a push accepted", func() bool {
			st, m := call(t, "POST", base+"/v1/infra/notification/mp", "application/json", tok, body, header...)
			if st == 200 {
				id = m["data"].(map[string]any)["ucsId"].(string)
			}
			return st == 200
		})
		embeddedtest.Eventually(t, 40*time.Second, what+": the push sent", func() bool {
			st, m := call(t, "GET", base+"/v1/infra/notification/mp/"+id, "", tok, "")
			if st != 200 {
				return false
			}
			state, _ := m["data"].(map[string]any)["state"].(string)
			return state == "sent" || state == "delivered"
		})
		return id
	}
	pushAndWait("before the restarts")

	n.Shutdown()
	if n, err = embedded.StartNATS(embedded.NATSOptions{Dir: dir, Port: port}); err != nil {
		t.Fatal(err)
	}
	pushAndWait("after NATS restarted with its files")

	n.Shutdown()
	if n, err = embedded.StartNATS(embedded.NATSOptions{Dir: t.TempDir(), Port: port}); err != nil {
		t.Fatal(err)
	}
	pushAndWait("after NATS restarted without them")
	id := pushAndWait("a push with an Idempotency-Key", "Idempotency-Key", "restart-key-1")
	if st, m := call(t, "POST", base+"/v1/infra/notification/mp", "application/json", tok, body,
		"Idempotency-Key", "restart-key-1"); st != 200 || m["data"].(map[string]any)["ucsId"] != id {
		t.Fatalf("the key's retry: %d %v, want 200 with ucsId %s", st, m, id)
	}
	sent := sim.Sent()
	receipt := `<xml><ToUserName><![CDATA[gh_1]]></ToUserName><FromUserName><![CDATA[oRS]]></FromUserName>` +
		`<CreateTime>` + strconv.FormatInt(time.Now().Unix(), 10) + `</CreateTime><MsgType><![CDATA[event]]></MsgType>` +
		`<Event><![CDATA[TEMPLATESENDJOBFINISH]]></Event><MsgID>` + strconv.FormatInt(sent[len(sent)-1].MsgID, 10) +
		`</MsgID><Status><![CDATA[success]]></Status></xml>`
	nonce := 0
	embeddedtest.Eventually(t, 40*time.Second, "the receipt taken", func() bool {
		nonce++
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		q := url.Values{"signature": {simulator.Sign("cbtoken", ts, strconv.Itoa(nonce))}, "timestamp": {ts}, "nonce": {strconv.Itoa(nonce)}}
		st, _ := call(t, "POST", base+"/v1/infra/notification/mp/callback?"+q.Encode(), "text/xml", "", receipt)
		return st == 200
	})
	embeddedtest.Eventually(t, 40*time.Second, "the receipt applied", func() bool {
		st, m := call(t, "GET", base+"/v1/infra/notification/mp/"+id, "", tok, "")
		return st == 200 && m["data"].(map[string]any)["state"] == "delivered"
	})
}
