package platform_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSendTemplate measures the client and the simulator together over
// loopback HTTP: what one worker process can push through the platform
// client when the platform answers at once. Each send has its own
// idempotency key, so none is de-duplicated.
func BenchmarkSendTemplate(b *testing.B) {
	e := newEnv(b, envOptions{})
	ctx := context.Background()
	if _, err := e.client.SendTemplate(ctx, exam(follower, "warm-up")); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	b.SetParallelism(8) // workers send with many goroutines per core
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		m := exam(follower, "")
		for pb.Next() {
			m.ClientMsgID = "ucs-" + strconv.FormatInt(seq.Add(1), 10)
			if _, err := e.client.SendTemplate(ctx, m); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "sends/s")
	b.StopTimer()
	if st := e.sim.Stats(); st.TokenRequests != 1 {
		b.Errorf("%d token requests", st.TokenRequests)
	}
}
