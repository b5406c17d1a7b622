package gpucontroller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	admission    prometheus.Histogram
	cycleSeconds prometheus.Histogram
	applySeconds prometheus.Histogram
	pending      prometheus.Gauge
	writes       *prometheus.CounterVec
	writeSeconds *prometheus.HistogramVec
	events       *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		admission: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpu_reservation_admission_wait_seconds",
			Help:    "From the informer delivering a GPU pod to its admission PATCH being acknowledged.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}),
		cycleSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gpu_reservation_cycle_seconds", Help: "Time to snapshot the caches and decide (no writes).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gpu_reservation_apply_seconds", Help: "Time to write one cycle's plan (the next cycle waits for it).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpu_reservation_waiting_pods", Help: "Managed GPU pods not admitted."}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpu_reservation_writes_total", Help: "API writes by kind (admit, update, event, evict, mint, cancel) and result.",
		}, []string{"kind", "result"}),
		writeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gpu_reservation_write_seconds", Help: "API write latency by kind, client rate limiter wait included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"kind"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpu_reservation_events_total", Help: "Reservation events written, by reason.",
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.admission, m.cycleSeconds, m.applySeconds, m.pending, m.writes, m.writeSeconds, m.events)
	}
	return m
}

// write counts one API write that started at start (zero: not timed).
func (m *metrics) write(kind string, start time.Time, err error) {
	if !start.IsZero() {
		m.writeSeconds.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	}
	res := "ok"
	if err != nil {
		res = "error"
	}
	m.writes.WithLabelValues(kind, res).Inc()
}
