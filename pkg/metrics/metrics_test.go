package metrics_test

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/campus-it/ucs/pkg/metrics"
)

// TestDeliverySecondsReadsLongDeliveries: a delivery held by a day's quota pause, or retried
// for days within nats.max_age (a week by default), reads as about its duration in the
// dashboard's quantiles (PromQL's histogram_quantile over ucs_delivery_seconds), not as the
// top bucket's bound.
func TestDeliverySecondsReadsLongDeliveries(t *testing.T) {
	for _, took := range []time.Duration{5 * time.Hour, 30 * time.Hour, 6 * 24 * time.Hour} {
		reg := prometheus.NewRegistry()
		m := metrics.NewWorker(reg)
		m.Delivered(took.Seconds())
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var h *dto.Histogram
		for _, f := range fams {
			if f.GetName() == "ucs_delivery_seconds" {
				h = f.GetMetric()[0].GetHistogram()
			}
		}
		if h == nil {
			t.Fatal("no ucs_delivery_seconds")
		}
		if q := quantile(0.5, h); q < took.Seconds()/3 {
			t.Errorf("a delivery of %s reads as %s in histogram_quantile", took, time.Duration(q*float64(time.Second)))
		}
	}
}

// quantile is PromQL's histogram_quantile over one histogram: linear within the bucket that
// holds the rank; an observation above the highest finite bound reads as that bound.
func quantile(q float64, h *dto.Histogram) float64 {
	rank := q * float64(h.GetSampleCount())
	lower, below := 0.0, 0.0
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), 1) {
			break
		}
		if c := float64(b.GetCumulativeCount()); c >= rank {
			return lower + (b.GetUpperBound()-lower)*(rank-below)/(c-below)
		}
		lower, below = b.GetUpperBound(), float64(b.GetCumulativeCount())
	}
	return lower
}
