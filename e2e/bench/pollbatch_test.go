package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/dsmlp/spawner/hubapi"
)

// pollBatch is the batched poll's size in the benchmark: the batches the
// hub class forms in its steady state at 10,000 servers, which fall due
// at 333 a second with poll_interval 30 s, so its 50 ms window gathers
// about 17. (At a hub's start-up every server falls due at once and the
// batches are the class's poll_batch_size, 256.)
const pollBatch = 16

// pacedInterval spaces the paced window's batches: pollBatch servers
// every 48 ms is 333 polls a second, what a hub polling 10,000 servers
// every 30 s asks for.
const pacedInterval = 48 * time.Millisecond

// batchRoute is the batched poll's series of
// spawner_http_request_duration_seconds.
const batchRoute = `{code="200",method="POST",route="/api/v1/polls"}`

// batchLoad sends the same servers' polls as pollLoad, pollBatch to a
// request, the way the hub class does: POST /api/v1/polls with the hub's
// admin read token, minted anew when readReuse old.
type batchLoad struct {
	c    *apiClient
	host string
	// batches[i] is the i-th batch's items; bodies[i] its JSON.
	batches [][]hubapi.PollItem
	bodies  [][]byte
	reqs    [][]byte
	minted  time.Time
	conns   []*pollConn
}

func newBatchLoad(l *pollLoad, size int) (*batchLoad, error) {
	b := &batchLoad{c: l.c, host: l.host}
	for i := 0; i < len(l.items); i += size {
		items := l.items[i:min(i+size, len(l.items))]
		body, err := json.Marshal(hubapi.PollRequest{Servers: items})
		if err != nil {
			return nil, err
		}
		b.batches, b.bodies = append(b.batches, items), append(b.bodies, body)
	}
	b.reqs = make([][]byte, len(b.bodies))
	if err := b.mint(time.Now()); err != nil {
		return nil, err
	}
	for range l.conns {
		b.conns = append(b.conns, &pollConn{addr: l.host})
	}
	return b, nil
}

// mint signs the hub's admin read token as of at and builds every request
// with it.
func (b *batchLoad) mint(at time.Time) error {
	tok, err := hubapi.Sign(b.c.secret, "jupyterhub", true, at)
	if err != nil {
		return fmt.Errorf("signing the hub's batch token: %w", err)
	}
	for i, body := range b.bodies {
		b.reqs[i] = fmt.Appendf(b.reqs[i][:0], "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: application/json\r\nContent-Type: application/json\r\nContent-Length: %d\r\nUser-Agent: bench-poll\r\n\r\n%s",
			"/api/v1/polls", b.host, tok, len(body), body)
	}
	b.minted = at
	return nil
}

func (b *batchLoad) close() {
	for _, c := range b.conns {
		c.close()
	}
}

// run sends batches for window and returns each batch's latency and how
// many servers were polled. Every server's answer must say running. The
// token is re-minted between windows, not within one (a window is shorter
// than readReuse).
func (b *batchLoad) run(ctx context.Context, window time.Duration) ([]time.Duration, int, time.Duration, error) {
	if time.Since(b.minted) >= readReuse {
		if err := b.mint(time.Now()); err != nil {
			return nil, 0, 0, err
		}
	}
	clients := len(b.conns)
	per := make([][]time.Duration, clients)
	polled := make([]int, clients)
	start := time.Now()
	deadline := start.Add(window)
	err := parallel(ctx, clients, clients, func(ctx context.Context, w int) error {
		c := b.conns[w]
		if err := c.setDeadline(deadline.Add(time.Minute)); err != nil {
			return err
		}
		lat := make([]time.Duration, 0, 1<<15)
		for n, i := 0, w; n < maxPollsPerClient; n, i = n+1, i+clients {
			if i >= len(b.reqs) {
				i = w
			}
			t0 := time.Now()
			if !t0.Before(deadline) {
				break
			}
			code, body, err := c.roundTrip(b.reqs[i])
			d := time.Since(t0)
			if err != nil {
				return err
			}
			if code != http.StatusOK || bytes.Count(body, runningJSON) != len(b.batches[i]) {
				return fmt.Errorf("POST /api/v1/polls (batch %d): status %d: %s", i, code, body)
			}
			lat = append(lat, d)
			polled[w] += len(b.batches[i])
		}
		per[w] = lat
		return ctx.Err()
	})
	elapsed := time.Since(start)
	var all []time.Duration
	n := 0
	for w, l := range per {
		all, n = append(all, l...), n+polled[w]
	}
	return all, n, elapsed, err
}

// runPaced sends one batch every interval on one connection for window,
// as the hub does in its steady state, and returns each batch's latency.
func (b *batchLoad) runPaced(ctx context.Context, interval, window time.Duration) ([]time.Duration, error) {
	c := b.conns[0]
	start := time.Now()
	if err := c.setDeadline(start.Add(window + time.Minute)); err != nil {
		return nil, err
	}
	var lat []time.Duration
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; time.Since(start) < window; i = (i + 1) % len(b.reqs) {
		t0 := time.Now()
		code, body, err := c.roundTrip(b.reqs[i])
		d := time.Since(t0)
		if err != nil {
			return nil, err
		}
		if code != http.StatusOK || bytes.Count(body, runningJSON) != len(b.batches[i]) {
			return nil, fmt.Errorf("POST /api/v1/polls (batch %d): status %d: %s", i, code, body)
		}
		lat = append(lat, d)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	return lat, nil
}

// batchResult is what the batched windows measured.
type batchResult struct {
	rate                             float64 // polls a second
	cpuPerPoll, clientPerPoll        time.Duration
	serverP50, serverP99, serverMean time.Duration // a batch's, server side
	p50, p99                         time.Duration // a batch's, client side
	allocs, allocBytes               float64       // a poll's
	prof                             *cpuProfile
	// The paced window: batches at the hub's pace, server and client side.
	pacedBatches                   int
	pacedServerP99, pacedServerMax time.Duration
	pacedServerMean, pacedP99      time.Duration
	// waited is spawnerd's threads' time runnable but without a CPU, a
	// batch, in the saturating window.
	waited time.Duration
	// The window with spawnerd and the clients on a core each.
	apart apartResult
}

// measureBatched polls the same servers in batches of size for window,
// with spawnerd's CPU, allocations and request histogram around it, then
// profiles the same load.
func measureBatched(ctx context.Context, f *fleet, l *pollLoad, size int, window time.Duration, debugAddr string) (*batchResult, error) {
	b, err := newBatchLoad(l, size)
	if err != nil {
		return nil, err
	}
	defer b.close()
	// One batch through every connection first: the token is verified
	// once and the connections are open, as in the hub's steady state.
	if _, _, _, err := b.run(ctx, 200*time.Millisecond); err != nil {
		return nil, err
	}
	before, err := scrape(ctx, f.api.URL)
	if err != nil {
		return nil, err
	}
	cpu0 := f.cpu.sample()
	lat, n, elapsed, err := b.run(ctx, window)
	cpu1 := f.cpu.sample()
	if err != nil {
		return nil, err
	}
	after, err := scrape(ctx, f.api.URL)
	if err != nil {
		return nil, err
	}
	if got := delta(before, after, "spawner_batched_polls_total"); got != float64(n) {
		return nil, fmt.Errorf("spawner_batched_polls_total counted %v polls, the clients asked for %d", got, n)
	}
	if got := delta(before, after, "spawner_http_request_duration_seconds_count"+batchRoute); got != float64(len(lat)) {
		return nil, fmt.Errorf("spawner_http_request_duration_seconds counted %v batches, the clients sent %d", got, len(lat))
	}
	per := func(d time.Duration) time.Duration { return time.Duration(float64(d) / float64(n)) }
	perBatch := func(d time.Duration, batches int) time.Duration {
		return time.Duration(float64(d) / float64(max(batches, 1)))
	}
	bound := func(q float64) time.Duration {
		return time.Duration(bucketBound(before, after, "spawner_http_request_duration_seconds", batchRoute, q) * float64(time.Second))
	}
	r := &batchResult{
		rate:          float64(n) / elapsed.Seconds(),
		cpuPerPoll:    per(cpu1.procs["spawnerd"] - cpu0.procs["spawnerd"]),
		clientPerPoll: per(cpu1.procs[benchProcess] - cpu0.procs[benchProcess]),
		serverP50:     bound(0.5), serverP99: bound(0.99),
		serverMean: mean(before, after, "spawner_http_request_duration_seconds", batchRoute),
		p50:        percentile(lat, 0.5), p99: percentile(lat, 0.99),
		allocs:     delta(before, after, "go_memstats_mallocs_total") / float64(n),
		allocBytes: delta(before, after, "go_memstats_alloc_bytes_total") / float64(n),
		waited:     perBatch(cpu1.waits["spawnerd"]-cpu0.waits["spawnerd"], len(lat)),
	}
	if r.prof, err = profileWhile(ctx, debugAddr, pollProfileWindow, func(ctx context.Context, d time.Duration) error {
		_, _, _, err := b.run(ctx, d)
		return err
	}); err != nil {
		return nil, err
	}

	// The same batches at the hub's pace rather than as fast as the
	// clients can send them: the latency a hub sees.
	if before, err = scrape(ctx, f.api.URL); err != nil {
		return nil, err
	}
	paced, err := b.runPaced(ctx, pacedInterval, window)
	if err != nil {
		return nil, err
	}
	if after, err = scrape(ctx, f.api.URL); err != nil {
		return nil, err
	}
	r.pacedBatches = len(paced)
	r.pacedServerP99 = bound(0.99)
	r.pacedServerMax = bound(1)
	r.pacedServerMean = mean(before, after, "spawner_http_request_duration_seconds", batchRoute)
	r.pacedP99 = percentile(paced, 0.99)

	// The same saturating load with spawnerd on one core and the clients
	// on the other: the batch's time without the clients' threads taking
	// spawnerd's core in the middle of it.
	if r.apart, err = measureApart(ctx, f, batchRoute, func() (int, int, time.Duration, error) {
		lat, n, elapsed, err := b.run(ctx, window)
		return len(lat), n, elapsed, err
	}); err != nil {
		return nil, fmt.Errorf("batches: %w", err)
	}
	return r, nil
}

// rows are the batched poll's rows of the poll table.
func (r *batchResult) rows(size int) [][]string {
	return [][]string{
		{fmt.Sprintf("batched (POST /api/v1/polls, %d servers a request, the hub class's way): polls/s", size),
			fmt.Sprintf("%.0f", r.rate), fmt.Sprintf("≥ %d", pollRateTarget), metAtLeast(r.rate, pollRateTarget)},
		{"batched: spawnerd CPU per poll", microsFrac(r.cpuPerPoll), "≤ " + micros(pollCPUTarget), metAtMost(r.cpuPerPoll, pollCPUTarget)},
		{"batched: server-side p50 / p99 of a whole batch (histogram bucket bound)", "≤ " + micros(r.serverP50) + " / ≤ " + micros(r.serverP99),
			"p99 ≤ " + micros(pollP99Target), metAtMost(r.serverP99, pollP99Target)},
		{"batched: server-side mean of a batch", microsFrac(r.serverMean), "", ""},
		{"batched: client p50 / p99 of a batch", strings.Join([]string{micros(r.p50), micros(r.p99)}, " / "), "", ""},
		{"batched: spawnerd's threads runnable but waiting for a CPU, a batch", microsFrac(r.waited), "", ""},
		{"batched: spawnerd allocations per poll (whole process)", fmt.Sprintf("%.1f (%.0f B)", r.allocs, r.allocBytes), "", ""},
		{"batched: load generator CPU per poll", microsFrac(r.clientPerPoll), "", ""},
		{fmt.Sprintf("batched at a hub's pace (one batch every %s: 10,000 servers polled every 30 s), %d batches: server-side mean / p99 / max of a batch",
			pacedInterval, r.pacedBatches), microsFrac(r.pacedServerMean) + " / ≤ " + micros(r.pacedServerP99) + " / ≤ " + micros(r.pacedServerMax), "", ""},
		{"batched at a hub's pace: client p99 of a batch", micros(r.pacedP99), "", ""},
		{"batched, spawnerd on one core and the clients on the other: polls/s / server-side mean / p99 of a batch",
			fmt.Sprintf("%.0f / %s / ≤ %s", r.apart.rate, microsFrac(r.apart.mean), micros(r.apart.p99)), "", ""},
		{"batched, apart: spawnerd's threads waiting for a CPU, a batch", microsFrac(r.apart.waited), "", ""},
	}
}
