// Command naive is the yardstick of the end-to-end benchmark: the least a delivery worker can do.
// A bare pull consumer takes each message from a JetStream stream, sends it to the platform with
// one HTTP POST, inserts one result document into MongoDB, and acknowledges the message. No
// binding lookup, no retries, no attempt records, no receipts, no metrics. It runs until it is
// stopped.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
)

func main() {
	natsURL := flag.String("nats", "", "NATS URL")
	stream := flag.String("stream", "NAIVE", "stream to consume")
	mongoURI := flag.String("mongo", "", "MongoDB URI")
	db := flag.String("db", "ucs", "database")
	platform := flag.String("platform", "", "the platform's base URL")
	appID := flag.String("appid", "", "the account's appid")
	secret := flag.String("secret", "", "the account's secret")
	template := flag.String("template", "", "template id")
	fields := flag.String("fields", "{}", "JSON object: data field → template keyword")
	openID := flag.String("openid", "", "the recipient's openid")
	conc := flag.Int("concurrency", 256, "messages handled at once")
	flag.Parse()
	var mapping map[string]string
	if err := json.Unmarshal([]byte(*fields), &mapping); err != nil {
		log.Fatal(err)
	}
	if err := run(*natsURL, *stream, *mongoURI, *db, *platform, *appID, *secret, *template, *openID, *conc, mapping); err != nil {
		log.Fatal(err)
	}
}

// run delivers messages until a signal stops it.
func run(natsURL, stream, mongoURI, db, platform, appID, secret, template, openID string, conc int, mapping map[string]string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "naive", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, MaxAckPending: 100_000,
	})
	if err != nil {
		return err
	}
	mc, err := mongo.Connect(ctx, options.Client().ApplyURI(mongoURI))
	if err != nil {
		return err
	}
	defer func() { _ = mc.Disconnect(context.Background()) }()
	col := mc.Database(db).Collection("naive_results")
	h := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	tok, err := token(h, platform, appID, secret)
	if err != nil {
		return err
	}
	sendURL := platform + "/cgi-bin/message/template/send?access_token=" + tok
	it, err := cons.Messages(jetstream.PullMaxMessages(conc))
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); it.Stop() }()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				msg, err := it.Next()
				if err != nil {
					return
				}
				if err := deliver(h, sendURL, col, msg.Data(), template, openID, mapping); err != nil {
					log.Printf("deliver: %v", err)
					_ = msg.Nak()
					continue
				}
				_ = msg.Ack()
			}
		}()
	}
	wg.Wait()
	return nil
}

// deliver sends one push and inserts its result.
func deliver(h *http.Client, sendURL string, col *mongo.Collection, data []byte, template, openID string, mapping map[string]string) error {
	var m struct {
		UcsID string            `json:"ucsId"`
		Data  map[string]string `json:"data"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	values := map[string]map[string]string{}
	for field, kw := range mapping {
		if v, ok := m.Data[field]; ok {
			values[kw] = map[string]string{"value": v}
		}
	}
	body, _ := json.Marshal(map[string]any{"touser": openID, "template_id": template, "client_msg_id": m.UcsID, "data": values})
	r, err := h.Post(sendURL, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer r.Body.Close()
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	var a struct {
		ErrCode int    `json:"errcode"`
		ErrMsg  string `json:"errmsg"`
		MsgID   int64  `json:"msgid"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return fmt.Errorf("answer %q: %w", raw, err)
	}
	if a.ErrCode != 0 {
		return fmt.Errorf("platform error %d: %s", a.ErrCode, a.ErrMsg)
	}
	_, err = col.InsertOne(context.Background(), bson.D{{Key: "_id", Value: m.UcsID}, {Key: "msgid", Value: a.MsgID},
		{Key: "state", Value: "sent"}, {Key: "at", Value: time.Now()}})
	return err
}

// token gets the account's access token from the platform's stable_token endpoint.
func token(h *http.Client, platform, appID, secret string) (string, error) {
	body, _ := json.Marshal(map[string]string{"grant_type": "client_credential", "appid": appID, "secret": secret})
	r, err := h.Post(platform+"/cgi-bin/stable_token", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer r.Body.Close()
	var a struct {
		AccessToken string `json:"access_token"`
		ErrCode     int    `json:"errcode"`
	}
	if err := json.NewDecoder(r.Body).Decode(&a); err != nil || a.AccessToken == "" {
		return "", fmt.Errorf("stable_token: errcode %d, %w", a.ErrCode, err)
	}
	return a.AccessToken, nil
}
