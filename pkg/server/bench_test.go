package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkPushAccept measures the whole accept path of a push over loopback HTTP: bearer check
// (cached), validation, publish to JetStream with the PubAck awaited, and the queued record
// written to the store (embedded FerretDB) through group commit.
func BenchmarkPushAccept(b *testing.B) {
	e := newEnv(b)
	tok := e.token("pusher", pushSecret)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", e.url+"/v1/infra/notification/mp", strings.NewReader(goodBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", tok)
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pushes/s")
}

// BenchmarkLookup measures GET by ucsId of a queued push (not cached: only final results are).
func BenchmarkLookup(b *testing.B) {
	e := newEnv(b)
	tok := e.token("pusher", pushSecret)
	a := e.do("POST", "/v1/infra/notification/mp", "application/json", tok, goodBody)
	id := a.json(b)["data"].(map[string]any)["ucsId"].(string)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("GET", e.url+"/v1/infra/notification/mp/"+id, nil)
			req.Header.Set("Authorization", tok)
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}

// BenchmarkTokenGrant measures client credentials grants over HTTP (hash check and ES256 signing).
func BenchmarkTokenGrant(b *testing.B) {
	e := newEnv(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	body := "grant_type=client_credentials&client_id=pusher&client_secret=" + pushSecret
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", e.url+"/v1/token", strings.NewReader(body))
			req.Header.Set("Content-Type", form)
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}
