package lifecycle

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the spawn and stop counters the service exports.
type Metrics struct {
	spawns       *prometheus.CounterVec
	spawnSeconds prometheus.Histogram
	stops        prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		spawns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spawner_spawns_total", Help: "Spawns by result: ready, failed, timeout, error.",
		}, []string{"result"}),
		spawnSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "spawner_spawn_duration_seconds", Help: "Time from start request to a ready pod.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}),
		stops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spawner_stops_total", Help: "Stops requested by the hub.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.spawns, m.spawnSeconds, m.stops)
	}
	return m
}
