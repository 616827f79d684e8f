package delivery_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/store"
)

// BenchmarkDelivery measures messages delivered per second by one worker process (concurrency
// 256, the default): fetch from the durable consumer, binding lookup (cached), send to the simulator over
// loopback, outcome recorded in the store before the ack. The messages are queued first; the
// timer covers only their delivery.
func BenchmarkDelivery(b *testing.B) {
	r := newRig(b)
	ctx := context.Background()
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = push.NewID(time.Now())
		m := push.Message{UcsID: ids[i], ClientID: "c1", UserID: "u-follows", Type: "JML",
			Data: map[string]string{"class": "课程", "info": fmt.Sprintf("作业%d", i)}, Accepted: time.Now().UnixMilli()}
		if err := r.pub.Publish(ctx, m, queue.PublishOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	r.startWorker(delivery.RetryPolicy{Initial: time.Second, Max: time.Second, MaxAttempts: 3}, 256)
	deadline := time.Now().Add(5 * time.Minute)
	for len(r.sim.Sent()) < b.N {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d delivered", len(r.sim.Sent()), b.N)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Accepted by the platform; wait for the last outcome to be recorded too.
	for {
		res, err := r.st.Current(ctx, ids[len(ids)-1])
		if err == nil && res.State == store.StateSent {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
