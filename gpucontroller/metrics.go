package gpucontroller

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	admission    prometheus.Histogram
	cycleSeconds prometheus.Histogram
	pending      prometheus.Gauge
	writes       *prometheus.CounterVec
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
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpu_reservation_waiting_pods", Help: "Managed GPU pods not admitted."}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpu_reservation_writes_total", Help: "API writes by kind (admit, update, event, evict, mint, cancel) and result.",
		}, []string{"kind", "result"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpu_reservation_events_total", Help: "Reservation events written, by reason.",
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.admission, m.cycleSeconds, m.pending, m.writes, m.events)
	}
	return m
}

func (m *metrics) write(kind string, err error) {
	res := "ok"
	if err != nil {
		res = "error"
	}
	m.writes.WithLabelValues(kind, res).Inc()
}
