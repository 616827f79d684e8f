package server_test

import (
	"io"

	"github.com/campus-it/ucs/pkg/config"
	"net/http"
	"strings"
	"testing"
)

// hammer sends the same request from parallel goroutines for b.N requests over loopback HTTP,
// fails on any status but 200, and reports the rate under unit.
func hammer(b *testing.B, parallelism int, method, url, ctype, auth, body, unit string) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(method, url, strings.NewReader(body))
			if ctype != "" {
				req.Header.Set("Content-Type", ctype)
			}
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
}

// BenchmarkPushAccept measures the whole accept path of a push over loopback HTTP: bearer check
// (cached), validation, and publish to JetStream with the PubAck awaited; nothing is written to
// the store.
func BenchmarkPushAccept(b *testing.B) {
	e := newEnv(b)
	hammer(b, 16, "POST", e.url+"/v1/infra/notification/mp", "application/json", e.token("pusher", pushSecret), goodBody, "pushes/s")
}

// BenchmarkLookup measures GET by ucsId of a queued push that no worker has received: a direct
// get from the stream (not cached: only final results are).
func BenchmarkLookup(b *testing.B) {
	e := newEnv(b)
	tok := e.token("pusher", pushSecret)
	a := e.do("POST", "/v1/infra/notification/mp", "application/json", tok, goodBody)
	id := a.json(b)["data"].(map[string]any)["ucsId"].(string)
	hammer(b, 8, "GET", e.url+"/v1/infra/notification/mp/"+id, "", tok, "", "lookups/s")
}

// BenchmarkTokenGrant measures client credentials grants over HTTP (hash check and ES256
// signing), with the rate limits and brute-force detection off, and on (limits high enough
// not to refuse: what is measured is their cost).
func BenchmarkTokenGrant(b *testing.B) {
	body := "grant_type=client_credentials&client_id=pusher&client_secret=" + pushSecret
	b.Run("limits_off", func(b *testing.B) {
		e := newEnvWith(b, func(c *config.Config) {
			c.OAuth.RateLimits.Disabled, c.OAuth.BruteForce.Disabled = true, true
		})
		hammer(b, 1, "POST", e.url+"/v1/token", form, "", body, "tokens/s")
	})
	b.Run("limits_on", func(b *testing.B) {
		e := newEnvWith(b, func(c *config.Config) {
			c.OAuth.RateLimits.PerAddress, c.OAuth.RateLimits.PerAddressBurst = 50_000, 100_000
			c.OAuth.RateLimits.PerClient, c.OAuth.RateLimits.PerClientBurst = 50_000, 100_000
		})
		hammer(b, 1, "POST", e.url+"/v1/token", form, "", body, "tokens/s")
	})
}

// BenchmarkBatchPush measures batches of 1,000 pushes over loopback HTTP: validation of each
// item and an asynchronous publish of each to JetStream, answered once every PubAck is in.
func BenchmarkBatchPush(b *testing.B) {
	e := newEnv(b)
	items := make([]string, 1000)
	for i := range items {
		items[i] = goodItemN(i)
	}
	hammer(b, 4, "POST", e.url+"/v1/infra/notification/mp/batch", "application/json", e.token("pusher", pushSecret), batchBody(items...), "batches/s")
}
