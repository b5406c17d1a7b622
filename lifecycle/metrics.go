package lifecycle

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

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

// CountRequests returns a client-go transport wrapper that counts Kubernetes
// API requests by HTTP method, so that API writes per spawn can be measured,
// and the watches opened by resource: an informer opens one when it starts
// and again whenever the API server ends its watch (a timeout, or a watcher
// closed for falling behind), so a rise in a quiet window is a restart.
func CountRequests(reg prometheus.Registerer) func(http.RoundTripper) http.RoundTripper {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spawner_kube_api_requests_total", Help: "Kubernetes API requests by HTTP method (POST, PUT, PATCH, DELETE are writes), Lease traffic excepted.",
	}, []string{"method"})
	watches := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spawner_kube_watches_opened_total", Help: "Kubernetes API watches opened, by resource: more than the informers' count means watches that ended and were opened again.",
	}, []string{"resource"})
	reg.MustRegister(requests, watches)
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			// Lease renewals are a steady background the writes per
			// spawn or stop should not include.
			if !strings.HasPrefix(req.URL.Path, "/apis/coordination.k8s.io/") {
				requests.WithLabelValues(req.Method).Inc()
			}
			if req.Method == http.MethodGet && isWatch(req) {
				watches.WithLabelValues(watchedResource(req.URL.Path)).Inc()
			}
			return rt.RoundTrip(req)
		})
	}
}

// isWatch tells a watch from a LIST as the API server does: a watch
// parameter that is set and not false.
func isWatch(req *http.Request) bool {
	if !strings.Contains(req.URL.RawQuery, "watch=") {
		return false // most requests: no query to parse
	}
	switch v := req.URL.Query().Get("watch"); strings.ToLower(v) {
	case "", "0", "false":
		return false
	}
	return true
}

// watchedResource is the resource of a collection path such as
// /api/v1/namespaces/ns/pods or /apis/coordination.k8s.io/v1/leases.
func watchedResource(path string) string {
	return path[strings.LastIndexByte(path, '/')+1:]
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
