package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"go.yaml.in/yaml/v3"
)

// message is a queued push as the front end stores it: the push body's fields, its ucsId, its
// client and when it was accepted.
func message(id string) []byte {
	b, _ := json.Marshal(map[string]any{
		"ucsId": id, "clientId": "demo-app", "userId": "2020000001", "type": "TDL", "accepted": time.Now().UnixMilli(),
		"data": map[string]string{"header": "您有一条待办", "type": "请假审批", "list": "学生请假", "step": "辅导员审批",
			"content": "张三的请假申请待您审批", "remark": "请尽快处理"},
	})
	return b
}

// connectJS connects to NATS at url and returns its JetStream context; close js.Conn().
func connectJS(url string) (jetstream.JetStream, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return js, nil
}

// bareBatches publishes n messages like the front end's with a bare nats.go client, in atomic
// batches of 1,000 from conc publishers at once, to a stream of its own on the stack's NATS
// server, and returns messages/s. With like, the stream has the limits of the stack's push
// stream (its byte bound, age and dedupe window); without, only what atomic batches and one
// message a subject need. With fast, the batches are published by fast ingest (the stream's
// allow_batched) rather than atomically: the design the front end does not use, measured so
// that the note can give both designs' figures.
func bareBatches(natsURL string, n, conc int, like, fast bool) (float64, error) {
	js, err := connectJS(natsURL)
	if err != nil {
		return 0, err
	}
	defer js.Conn().Close()
	ctx := context.Background()
	cfg := jetstream.StreamConfig{
		Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy, AllowAtomicPublish: true, AllowBatchPublish: fast,
		AllowDirect: true, MaxMsgsPerSubject: 1, DiscardNewPerSubject: true, Discard: jetstream.DiscardNew,
	}
	publish := publishAtomic
	if fast {
		publish = publishFast
	}
	if like {
		name, err := js.StreamNameBySubject(ctx, "ucs.push.mp.x.y")
		if err != nil {
			return 0, fmt.Errorf("the stack's push stream: %w", err)
		}
		st, err := js.Stream(ctx, name)
		if err != nil {
			return 0, err
		}
		push := st.CachedInfo().Config
		cfg.MaxBytes, cfg.MaxAge, cfg.Duplicates, cfg.Discard = push.MaxBytes, push.MaxAge, push.Duplicates, push.Discard
	}
	cfg.Name, cfg.Subjects = "BENCH_BARE", []string{"bench.bare.>"}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		return 0, err
	}
	defer func() { _ = js.DeleteStream(ctx, "BENCH_BARE") }()
	batches := make([][]*nats.Msg, n/1000)
	for b := range batches {
		for range 1000 {
			id := ulid.Make().String()
			batches[b] = append(batches[b], &nats.Msg{Subject: "bench.bare.demo-app." + id, Data: message(id)})
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	t0 := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < len(batches); i = int(next.Add(1)) - 1 {
				if err := publish(js, batches[i]); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(t0)
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(len(batches)*1000) / took.Seconds(), nil
}

func publishAtomic(js jetstream.JetStream, msgs []*nats.Msg) error {
	b, err := jetstreamext.NewBatchPublisher(js)
	if err != nil {
		return err
	}
	for _, m := range msgs[:len(msgs)-1] {
		if err := b.AddMsg(m); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = b.CommitMsg(ctx, msgs[len(msgs)-1])
	return err
}

// publishFast publishes msgs as one fast-ingest batch: each message is stored as it arrives,
// and the server acknowledges them in steps; a failure leaves the messages before it stored.
func publishFast(js jetstream.JetStream, msgs []*nats.Msg) error {
	b, err := jetstreamext.NewFastPublisher(js)
	if err != nil {
		return err
	}
	for _, m := range msgs[:len(msgs)-1] {
		if _, err := b.AddMsg(m); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = b.CommitMsg(ctx, msgs[len(msgs)-1])
	return err
}

// naivePipeline queues n messages like the front end's on a stream of its own, delivers them
// with two naive worker processes through the stack's simulator and store, and returns
// messages/s from their start until the last was acknowledged.
func naivePipeline(info standaloneInfo, data, tools string, n int) (float64, error) {
	var wcfg struct {
		MongoDB struct {
			Database string `yaml:"database"`
		} `yaml:"mongodb"`
		Platform struct {
			Templates map[string]struct {
				TemplateID string            `yaml:"template_id"`
				Fields     map[string]string `yaml:"fields"`
			} `yaml:"templates"`
		} `yaml:"platform"`
	}
	raw, err := os.ReadFile(filepath.Join(data, "worker.yaml"))
	if err != nil {
		return 0, err
	}
	if err := yaml.Unmarshal(raw, &wcfg); err != nil {
		return 0, err
	}
	tpl := wcfg.Platform.Templates["TDL"]
	var openID string
	for _, b := range info.Bindings {
		if b.UserID == "2020000001" {
			openID = b.OpenID
		}
	}
	if tpl.TemplateID == "" || openID == "" {
		return 0, errors.New("naive pipeline: no TDL template or no binding of 2020000001 in the stack's files")
	}
	fields, _ := json.Marshal(tpl.Fields)
	js, err := connectJS(info.NATSURL)
	if err != nil {
		return 0, err
	}
	defer js.Conn().Close()
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "NAIVE", Subjects: []string{"naive.>"}, Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy,
	})
	if err != nil {
		return 0, err
	}
	defer func() { _ = js.DeleteStream(ctx, "NAIVE") }()
	var futs []jetstream.PubAckFuture
	for i := range n {
		id := ulid.Make().String()
		f, err := js.PublishAsync("naive."+id, message(id))
		if err != nil {
			return 0, err
		}
		futs = append(futs, f)
		if i%4096 == 4095 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return 0, err
		}
	}
	args := []string{"-nats", info.NATSURL, "-mongo", info.MongoDBURI, "-db", wcfg.MongoDB.Database,
		"-platform", info.PlatformURL, "-appid", info.Platform.AppID, "-secret", info.Platform.Secret,
		"-template", tpl.TemplateID, "-fields", string(fields), "-openid", openID}
	t0 := time.Now()
	procs := []*proc{start(filepath.Join(tools, "naive"), args...), start(filepath.Join(tools, "naive"), args...)}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		si, err := st.Info(ctx)
		if err == nil && si.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("naive pipeline: messages left after 10 minutes (%w)", err)
		}
		time.Sleep(50 * time.Millisecond) // polling the stream's count, with a deadline
	}
	took := time.Since(t0)
	log.Printf("naive pipeline: %d messages in %s", n, took.Round(time.Millisecond))
	return float64(n) / took.Seconds(), nil
}
