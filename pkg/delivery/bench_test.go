package delivery_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/delivery"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
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
	// Eventually polls every 20 ms: within 2% of a run of a second or more.
	embeddedtest.Eventually(b, 5*time.Minute, fmt.Sprintf("all %d delivered", b.N), func() bool { return len(r.sim.Sent()) >= b.N })
	// Accepted by the platform; wait for the last outcome to be recorded too.
	embeddedtest.Eventually(b, time.Minute, "the last outcome is recorded", func() bool {
		res, err := r.st.Current(ctx, ids[len(ids)-1])
		return err == nil && res.State == push.StateSent
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
