package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Backend is one replica behind a Balancer.
type Backend struct {
	Name     string
	URL      *url.URL
	ready    atomic.Bool
	requests atomic.Int64
	retried  atomic.Int64
}

// Balancer is what a Kubernetes Service with a readiness probe gives the hub:
// one URL, round robin over the replicas whose /readyz answers 200. A
// request whose replica fails before answering (refused, reset, dead) is
// sent to the next ready replica, as a service mesh's retry on
// connect-failure/reset would: spawnerd's calls are idempotent, every
// replica answers from the cluster's state.
type Balancer struct {
	URL      string
	backends []*Backend
	next     atomic.Uint64
	failed   atomic.Int64
	// ProbePeriod and ProbeTimeout: the readiness probe's, as in a pod spec.
	probePeriod, probeTimeout time.Duration
	mu                        sync.Mutex
	changes                   []ReadinessChange
}

// ReadinessChange is a replica's readiness flipping, as the balancer saw it.
type ReadinessChange struct {
	Backend string
	Ready   bool
	At      time.Time
}

// StartBalancer listens on a free loopback port in front of backends and
// probes them every 200 ms (1 s timeout); it stops when the test ends.
func StartBalancer(t testing.TB, backends []*Backend) *Balancer {
	t.Helper()
	b := &Balancer{backends: backends, probePeriod: 200 * time.Millisecond, probeTimeout: time.Second}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", FreePort(t)))
	if err != nil {
		t.Fatalf("balancer: %v", err)
	}
	b.URL = "http://" + l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, be := range backends {
		wg.Add(1)
		go func() { defer wg.Done(); b.probe(ctx, be) }()
	}
	inner := &http.Transport{
		DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		// A frozen replica accepts connections and never answers; spawnerd
		// answers within --stop-wait (10 s) plus a little.
		ResponseHeaderTimeout: 20 * time.Second,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       30 * time.Second,
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "backend"
		},
		Transport: RoundTripFunc(func(req *http.Request) (*http.Response, error) { return b.roundTrip(inner, req) }),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			b.failed.Add(1)
			http.Error(w, "balancer: "+err.Error(), http.StatusServiceUnavailable)
		},
		FlushInterval: -1,
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = srv.Close()
		inner.CloseIdleConnections()
	})
	return b
}

// RoundTripFunc is a function as an http.RoundTripper: a test wraps a
// client's transport with one (rest.Config.WrapTransport) to count, time or
// cut its requests.
type RoundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

var errNoReady = errors.New("no ready replica")

// roundTrip sends req to ready replicas in turn until one answers.
func (b *Balancer) roundTrip(inner http.RoundTripper, req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		if body, err = io.ReadAll(io.LimitReader(req.Body, 8<<20)); err != nil {
			return nil, fmt.Errorf("reading the request body: %w", err)
		}
		req.Body.Close()
	}
	tried := map[*Backend]bool{}
	lastErr := errNoReady
	for attempt := 0; attempt < len(b.backends); attempt++ {
		be := b.pick(tried)
		if be == nil {
			break
		}
		tried[be] = true
		out := req.Clone(req.Context())
		out.URL.Scheme, out.URL.Host, out.Host = be.URL.Scheme, be.URL.Host, be.URL.Host
		out.Body = http.NoBody
		if body != nil {
			out.Body = io.NopCloser(bytes.NewReader(body))
			out.ContentLength = int64(len(body))
		}
		resp, err := inner.RoundTrip(out)
		if err == nil {
			be.requests.Add(1)
			return resp, nil
		}
		if req.Context().Err() != nil {
			return nil, err
		}
		be.retried.Add(1)
		lastErr = fmt.Errorf("%s: %w", be.Name, err)
	}
	return nil, lastErr
}

// pick is the next ready replica in round-robin order, skipping those in tried.
func (b *Balancer) pick(tried map[*Backend]bool) *Backend {
	n := len(b.backends)
	start := int(b.next.Add(1))
	for i := range n {
		be := b.backends[(start+i)%n]
		if be.ready.Load() && !tried[be] {
			return be
		}
	}
	return nil
}

// probe asks a replica's /readyz every period, as a kubelet's readiness
// probe with failureThreshold 1 would.
func (b *Balancer) probe(ctx context.Context, be *Backend) {
	client := &http.Client{Timeout: b.probeTimeout}
	tick := time.NewTicker(b.probePeriod)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, be.URL.String()+"/readyz", nil)
		resp, err := client.Do(req)
		ok := err == nil && resp.StatusCode == http.StatusOK
		if resp != nil {
			resp.Body.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if be.ready.Swap(ok) != ok {
			b.mu.Lock()
			b.changes = append(b.changes, ReadinessChange{Backend: be.Name, Ready: ok, At: time.Now()})
			b.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Ready reports whether the balancer currently sends requests to the replica.
func (be *Backend) Ready() bool { return be.ready.Load() }

// Requests is how many requests the replica answered through the balancer.
func (be *Backend) Requests() int64 { return be.requests.Load() }

// Retried is how many requests failed on the replica and went to another.
func (be *Backend) Retried() int64 { return be.retried.Load() }

// Backends are the balancer's replicas.
func (b *Balancer) Backends() []*Backend { return b.backends }

// Failed is how many requests no replica answered.
func (b *Balancer) Failed() int64 { return b.failed.Load() }

// Changes are the readiness flips seen so far.
func (b *Balancer) Changes() []ReadinessChange {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]ReadinessChange(nil), b.changes...)
}

// WaitReady waits until the balancer has seen the replica's readiness be ready.
func (be *Backend) WaitReady(ctx context.Context, ready bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for be.ready.Load() != ready {
		if time.Now().After(deadline) {
			return fmt.Errorf("balancer: %s never became ready=%v within %s", be.Name, ready, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
