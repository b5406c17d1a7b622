// Package bench_test measures the spawnerd binary against the dev cluster:
// a spawn storm beside a bare client-go loop creating the same pods, poll
// latency over HTTP with 1,000 servers in the cache, and how soon a stopped
// server is reported to the hub and its pod removed.
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 30m ./e2e/bench/
//
// Each benchmark prints its numbers as tables and reports the headline ones
// with b.ReportMetric. Targets are printed beside the numbers, not enforced:
// a benchmark fails only when the service misbehaves.
package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/spawner"
)

var (
	env *harness.Env
	bin string
)

const (
	// stormServers are spawned at once by stormClients, as many hub
	// spawners would (the hub's concurrent_spawn_limit is 100).
	stormServers = 1000
	stormClients = 64
	// statusPollers poll spawnerd for "running" while a storm goes on.
	statusPollers = 8
	// pollClients poll 1,000 running servers for pollWindow.
	pollClients       = 8
	pollWindow        = 5 * time.Second
	maxPollsPerClient = 5_000_000
	// stopServers are evicted at once.
	stopServers = 200
	// spawnTimeout bounds every wait for servers to run, stop or go.
	spawnTimeout = 5 * time.Minute
	// settleWait bounds the wait for the cluster to go quiet before a measurement.
	settleWait = time.Minute
	// spawnerdQPS and spawnerdBurst are spawnerd's client-go limits
	// (cmd/spawnerd); the bare loop gets the same, so that the comparison
	// is of the work done, not of the limits.
	spawnerdQPS, spawnerdBurst = 200, 400
)

func TestMain(m *testing.M) {
	// 2,280 pod slots (190 per node; 96 CPUs hold 192 pods of a 0.5 CPU
	// guarantee): the console benchmark's 2,000 servers, or a storm's
	// 1,000 pods, with room to spare; every benchmark removes its pods
	// before the next one starts. The node count stays that of the storms'
	// first measurements, so that the scheduler's work per pod is the same.
	nodes := &devcluster.NodeConfig{
		NodeSets:     []devcluster.NodeSet{{Name: "cpu", Count: 12, CPU: "96", Memory: "384Gi", Pods: 190}},
		LocalRuntime: ptr.To(false),
	}
	var dir string
	code := harness.Main(m, &env, nodes, func(e *harness.Env) error {
		var err error
		if dir, err = os.MkdirTemp("", "bench-bin-"); err != nil {
			return err
		}
		bin, err = harness.BuildBinary(e.RepoDir, "./cmd/spawnerd", dir)
		return err
	})
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	os.Exit(code)
}

// configTemplate is a course's CPU notebook as the platform configures it:
// a default profile with an image choice and resource guarantees.
const configTemplate = `
kubespawner:
  namespace: %s
  cmd: [jupyterhub-singleuser]
  start_timeout: 600
  course: DSC10
  cpu_guarantee: 0.5
  cpu_limit: 2
  mem_guarantee: 1G
  mem_limit: 2G
  extra_labels:
    hub.jupyter.org/network-access-hub: "true"
  profile_list:
  - display_name: CPU notebook
    slug: cpu
    default: true
    profile_options:
      image:
        display_name: Image
        choices:
          scipy:
            display_name: SciPy
            default: true
            kubespawner_override: {image: "quay.io/jupyter/scipy-notebook:2026-11-30"}
          r:
            display_name: R
            kubespawner_override: {image: "quay.io/jupyter/r-notebook:2026-11-30"}
`

// show prints a table to stdout: b.Log output of a benchmark is cut to ten
// lines. With -benchtime 1x the benchmark has run, and printed, before the
// testing package prints its name and result line.
func show(s string) { fmt.Print(s) }

func users(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return out
}

// buildPods returns the notebook pods spawnerd makes for users in ns.
func buildPods(ns string, users []string) ([]*corev1.Pod, error) {
	cfg, err := spawner.Parse(fmt.Appendf(nil, configTemplate, ns))
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, len(users))
	for i, u := range users {
		objs, _, err := spawner.Build(cfg, spawner.Request{User: u, Env: hubEnv(u)})
		if err != nil {
			return nil, fmt.Errorf("building the objects of %s: %w", u, err)
		}
		pods[i] = objs.Pod
	}
	return pods, nil
}

func names(pods []*corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name
	}
	return out
}

// fleet is one spawnerd serving one namespace, and the benchmark's watch of
// that namespace's pods.
type fleet struct {
	ns    string
	api   *harness.Spawnerd
	c     *apiClient
	clock *podClock
	cpu   *cpuMeter
}

func newFleet(b *testing.B, opts harness.SpawnerdOptions) *fleet {
	b.Helper()
	ns := env.Namespace(b)
	opts.Config = fmt.Sprintf(configTemplate, ns)
	api := env.StartSpawnerd(b, bin, opts)
	clock, err := watchPods(b.Context(), env.Client, ns)
	if err != nil {
		b.Fatal(err)
	}
	f := &fleet{ns: ns, api: api, c: newAPIClient(api, stormClients), clock: clock, cpu: newCPUMeter(env.BinDir, filepath.Dir(bin))}
	b.Cleanup(func() {
		f.c.http.CloseIdleConnections()
		api.Stop()
		if err := deletePods(context.Background(), env.Client, ns); err != nil {
			b.Error(err)
		}
	})
	return f
}

// stormResult is one storm of spawns: through spawnerd, or a bare loop.
type stormResult struct {
	start    time.Time
	sent     []time.Time // each start request or create sent
	answered time.Time   // the last of them answered
	running  []time.Time // each pod seen Running and ready
	reported []time.Time // spawnerd first reported each server running; nil for the bare loop
}

func (r stormResult) end() time.Time {
	if r.reported != nil {
		return latest(r.reported)
	}
	return latest(r.running)
}

func (r stormResult) total() time.Duration { return r.end().Sub(r.start) }

func (r stormResult) rate() float64 { return float64(len(r.sent)) / r.total().Seconds() }

func (r stormResult) perServer() []time.Duration {
	if r.reported != nil {
		return since(r.sent, r.reported)
	}
	return since(r.sent, r.running)
}

// spawn starts every user's server through spawnerd from stormClients
// clients and returns once spawnerd reports all of them running.
func (f *fleet) spawn(ctx context.Context, users []string) (stormResult, error) {
	pods, err := buildPods(f.ns, users)
	if err != nil {
		return stormResult{}, err
	}
	podNames := names(pods)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := stormResult{start: time.Now(), sent: make([]time.Time, len(users))}
	var (
		wg      sync.WaitGroup
		postErr error
	)
	wg.Go(func() {
		postErr = parallel(ctx, len(users), stormClients, func(ctx context.Context, i int) error {
			r.sent[i] = time.Now()
			return f.c.start(ctx, users[i])
		})
		r.answered = time.Now()
		if postErr != nil {
			cancel()
		}
	})
	ready := func(i int) bool { _, ok := f.clock.runningAt(podNames[i]); return ok }
	r.reported, err = f.c.awaitRunning(ctx, users, ready, statusPollers, spawnTimeout)
	wg.Wait()
	if postErr != nil {
		return r, postErr
	}
	if err != nil {
		return r, err
	}
	r.running = f.clock.times(running, podNames)
	return r, nil
}

// bareStorm creates the same pods spawnerd would, in the namespace ns, from
// a plain client-go loop with spawnerd's concurrency and client limits, and
// returns once all are Running.
func bareStorm(ctx context.Context, ns string, users []string) (stormResult, error) {
	pods, err := buildPods(ns, users)
	if err != nil {
		return stormResult{}, err
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst, cfg.UserAgent = spawnerdQPS, spawnerdBurst, "bench-bare-loop"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return stormResult{}, err
	}
	clock, err := watchPods(ctx, env.Client, ns)
	if err != nil {
		return stormResult{}, err
	}
	r := stormResult{start: time.Now()}
	r.sent, err = createPods(ctx, client, pods, stormClients)
	r.answered = time.Now()
	if err != nil {
		return r, err
	}
	if err := clock.awaitAll(ctx, running, names(pods), "Running", spawnTimeout); err != nil {
		return r, err
	}
	r.running = clock.times(running, names(pods))
	return r, nil
}

// BenchmarkSpawnStorm starts 1,000 servers at once through spawnerd's API,
// then creates the same 1,000 pods from a bare client-go loop, and compares
// the two; it also counts spawnerd's Kubernetes API requests per spawn.
func BenchmarkSpawnStorm(b *testing.B) {
	var (
		via, bare            []stormResult
		req                  = map[string]float64{}
		spawnSum, spawnCount float64
	)
	b.StopTimer()
	// Each storm runs on a settled cluster with no other notebook pods.
	// Odd iterations run the bare loop first, so that an order effect shows:
	// -benchtime 2x runs the function once, then twice, and the last of
	// those three iterations goes bare loop first.
	throughSpawnerd := func(i int) {
		f := newFleet(b, harness.SpawnerdOptions{})
		show(f.cpu.settle(b.Context(), settleWait))
		before, err := scrape(b.Context(), f.api.URL)
		if err != nil {
			b.Fatal(err)
		}
		cpu0 := f.cpu.sample()
		b.StartTimer()
		r, err := f.spawn(b.Context(), users(fmt.Sprintf("storm%d-", i), stormServers))
		b.StopTimer()
		cpu1 := f.cpu.sample()
		if err != nil {
			b.Fatalf("storm through spawnerd: %v", err)
		}
		after, err := scrape(b.Context(), f.api.URL)
		if err != nil {
			b.Fatal(err)
		}
		via = append(via, r)
		for m, v := range apiRequests(before, after) {
			req[m] += v
		}
		spawnSum += delta(before, after, "spawner_spawn_duration_seconds_sum")
		spawnCount += delta(before, after, "spawner_spawn_duration_seconds_count")
		if n := delta(before, after, `spawner_spawns_total{result="ready"}`); n != stormServers {
			b.Errorf("spawner_spawns_total{result=ready} rose by %v, want %d", n, stormServers)
		}
		show(f.cpu.report(fmt.Sprintf("CPU during the storm through spawnerd (iteration %d)", i+1), cpu0, cpu1))
		f.api.Stop()
		if err := deletePods(b.Context(), env.Client, f.ns); err != nil {
			b.Fatal(err)
		}
	}
	bareLoop := func(i int) {
		ns := env.Namespace(b)
		cpu := newCPUMeter(env.BinDir)
		show(cpu.settle(b.Context(), settleWait))
		cpu0 := cpu.sample()
		r, err := bareStorm(b.Context(), ns, users(fmt.Sprintf("bare%d-", i), stormServers))
		cpu1 := cpu.sample()
		if err != nil {
			b.Fatalf("bare client-go storm: %v", err)
		}
		bare = append(bare, r)
		show(cpu.report(fmt.Sprintf("CPU during the bare client-go storm (iteration %d)", i+1), cpu0, cpu1))
		if err := deletePods(b.Context(), env.Client, ns); err != nil {
			b.Fatal(err)
		}
	}
	for i := range b.N {
		if i%2 == 0 {
			throughSpawnerd(i)
			bareLoop(i)
		} else {
			bareLoop(i)
			throughSpawnerd(i)
		}
	}

	viaRate, bareRate := meanRate(via), meanRate(bare)
	spawns := float64(b.N * stormServers)
	rows := [][]string{{"run", "servers", "requests answered", "all pods Running (watch)", "all report running (GET)", "spawns/s", "per server p50", "p99"}}
	for _, set := range []struct {
		name string
		rs   []stormResult
	}{{"spawnerd HTTP API", via}, {"bare client-go loop", bare}} {
		for i, r := range set.rs {
			per := r.perServer()
			reported := "-"
			if r.reported != nil {
				reported = secs(r.end().Sub(r.start))
			}
			rows = append(rows, []string{fmt.Sprintf("%s (%d)", set.name, i+1), strconv.Itoa(len(r.sent)), secs(r.answered.Sub(r.start)),
				secs(latest(r.running).Sub(r.start)), reported, fmt.Sprintf("%.1f", r.rate()),
				secs(percentile(per, 0.5)), secs(percentile(per, 0.99))})
		}
	}
	show(table(fmt.Sprintf("Spawn storm: %d servers from %d clients, QPS %d/burst %d for both; ratio %.2f× the bare loop's rate (target ≥ 0.8×)",
		stormServers, stormClients, spawnerdQPS, spawnerdBurst, viaRate/bareRate), rows))

	rows = [][]string{{"method", "requests", "per spawn"}}
	for _, m := range slices.Sorted(maps.Keys(req)) {
		rows = append(rows, []string{m, fmt.Sprint(req[m]), fmt.Sprintf("%.3f", req[m]/spawns)})
	}
	rows = append(rows,
		[]string{"writes (POST+PUT+PATCH+DELETE)", fmt.Sprint(harness.Writes(req)), fmt.Sprintf("%.3f (target ≤ 2)", harness.Writes(req)/spawns)},
		[]string{"reads", fmt.Sprint(harness.Reads(req)), fmt.Sprintf("%.3f", harness.Reads(req)/spawns)},
		[]string{"spawner_spawn_duration_seconds mean", "", secs(time.Duration(spawnSum / max(spawnCount, 1) * float64(time.Second)))})
	show(table("spawnerd's Kubernetes API requests during the storm (spawner_kube_api_requests_total)", rows))

	b.ReportMetric(viaRate, "spawns/s")
	b.ReportMetric(bareRate, "bare-spawns/s")
	b.ReportMetric(viaRate/bareRate, "x-bare-rate")
	b.ReportMetric(harness.Writes(req)/spawns, "writes/spawn")
	b.ReportMetric(harness.Reads(req)/spawns, "reads/spawn")
	b.ReportMetric(via[len(via)-1].total().Seconds(), "s-total")
}

func meanRate(rs []stormResult) float64 {
	var n int
	var d time.Duration
	for _, r := range rs {
		n += len(r.sent)
		d += r.total()
	}
	return float64(n) / d.Seconds()
}

// BenchmarkPollHTTP measures GET /api/v1/users/{u}/server, with its token
// verified each time, from pollClients clients over 1,000 running servers.
func BenchmarkPollHTTP(b *testing.B) {
	b.StopTimer()
	f := newFleet(b, harness.SpawnerdOptions{})
	us := users("poll", stormServers)
	if _, err := f.spawn(b.Context(), us); err != nil {
		b.Fatalf("spawning the servers to poll: %v", err)
	}
	paths := make([]string, len(us))
	for i, u := range us {
		paths[i] = harness.ServerPath(u, "")
	}
	before, err := scrape(b.Context(), f.api.URL)
	if err != nil {
		b.Fatal(err)
	}
	var (
		lat     []time.Duration
		elapsed time.Duration
	)
	show(f.cpu.settle(b.Context(), settleWait))
	cpu0 := f.cpu.sample()
	for range b.N {
		b.StartTimer()
		l, el, err := pollFor(b.Context(), f.c, paths, us, pollClients, pollWindow)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		lat, elapsed = append(lat, l...), elapsed+el
	}
	cpu1 := f.cpu.sample()
	after, err := scrape(b.Context(), f.api.URL)
	if err != nil {
		b.Fatal(err)
	}
	const route = `{code="200",method="GET",route="/api/v1/users/:user/server"}`
	serverMean := mean(before, after, "spawner_http_request_duration_seconds", route)
	serverP99 := time.Duration(bucketBound(before, after, "spawner_http_request_duration_seconds", route, 0.99) * float64(time.Second))
	n := len(lat)
	p50, p99, p999, top := percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 0.999), percentile(lat, 1)
	show(table(fmt.Sprintf("Poll over HTTP: %d running servers, %d clients for %s, a JWT verified per request", len(us), pollClients, elapsed.Round(time.Millisecond)), [][]string{
		{"polls", "polls/s", "p50", "p99 (target < 2 ms)", "p99.9", "max", "server-side mean", "server-side p99"},
		{strconv.Itoa(n), fmt.Sprintf("%.0f", float64(n)/elapsed.Seconds()), micros(p50), micros(p99), micros(p999), micros(top), micros(serverMean), "≤ " + micros(serverP99)},
	}))
	show(f.cpu.report("CPU while polling", cpu0, cpu1))
	b.ReportMetric(float64(n)/elapsed.Seconds(), "polls/s")
	b.ReportMetric(float64(p50)/float64(time.Microsecond), "p50-µs")
	b.ReportMetric(float64(p99)/float64(time.Microsecond), "p99-µs")
}

var runningJSON = []byte(`"status":"running"`)

// pollFor polls the servers round robin from clients goroutines until window
// has passed, and returns every poll's latency. Every answer must say running.
// A token is accepted once, so each poll signs its own (outside the latency),
// as the hub does.
func pollFor(ctx context.Context, c *apiClient, paths, users []string, clients int, window time.Duration) ([]time.Duration, time.Duration, error) {
	per := make([][]time.Duration, clients)
	start := time.Now()
	deadline := start.Add(window)
	err := parallel(ctx, clients, clients, func(ctx context.Context, w int) error {
		lat := make([]time.Duration, 0, 1<<15)
		for n, i := 0, w; n < maxPollsPerClient && time.Now().Before(deadline); n, i = n+1, (i+clients)%len(paths) {
			tok, err := c.token(users[i])
			if err != nil {
				return err
			}
			t0 := time.Now()
			code, body, err := c.do(ctx, http.MethodGet, paths[i], tok, nil)
			d := time.Since(t0)
			if err != nil {
				return err
			}
			if code != http.StatusOK || !bytes.Contains(body, runningJSON) {
				return fmt.Errorf("GET %s: status %d: %s", paths[i], code, body)
			}
			lat = append(lat, d)
		}
		per[w] = lat
		return nil
	})
	elapsed := time.Since(start)
	var all []time.Duration
	for _, l := range per {
		all = append(all, l...)
	}
	return all, elapsed, err
}

// fakeHub stands for the hub's REST API: it records when each
// DELETE /hub/api/users/{user}/server arrives and answers 204, as the hub
// does once it has stopped the server.
type fakeHub struct {
	token string
	mu    sync.Mutex
	told  map[string]time.Time
	calls map[string]int
	bad   []string
}

func (h *fakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	rest, ok := strings.CutPrefix(r.URL.Path, "/hub/api/users/")
	user, ok2 := strings.CutSuffix(rest, "/server")
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case r.Header.Get("Authorization") != "token "+h.token:
		h.bad = append(h.bad, r.Method+" "+r.URL.Path+": wrong token")
		w.WriteHeader(http.StatusForbidden)
	case r.Method != http.MethodDelete || !ok || !ok2 || strings.Contains(user, "/"):
		h.bad = append(h.bad, r.Method+" "+r.URL.Path)
		w.WriteHeader(http.StatusNotFound)
	default:
		if _, seen := h.told[user]; !seen {
			h.told[user] = now
		}
		h.calls[user]++
		w.WriteHeader(http.StatusNoContent)
	}
}

// toldOf counts the users the hub was told about.
func (h *fakeHub) toldOf(users []string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, u := range users {
		if _, ok := h.told[u]; ok {
			n++
		}
	}
	return n
}

// BenchmarkStopReaction evicts 200 running servers at once and measures, per
// server, how soon after its Failed status was written the hub was told
// (DELETE of the server at the hub) and the pod was gone.
func BenchmarkStopReaction(b *testing.B) {
	b.StopTimer()
	hub := &fakeHub{token: "bench-hub-token", told: map[string]time.Time{}, calls: map[string]int{}}
	hubSrv := httptest.NewServer(hub)
	b.Cleanup(hubSrv.Close)
	proxy := harness.StartProxy(b)
	f := newFleet(b, harness.SpawnerdOptions{
		Args: []string{"--hub-api-url", hubSrv.URL + "/hub/api", "--proxy-api-url", proxy.APIURL},
		Env:  []string{"CONFIGPROXY_AUTH_TOKEN=" + proxy.Token, "SPAWNERD_HUB_TOKEN=" + hub.token},
	})
	var (
		toHub, toGone []time.Duration
		spread        time.Duration // from the first eviction written to the last
	)
	for i := range b.N {
		us := users(fmt.Sprintf("stop%d-", i), stopServers)
		pods, err := buildPods(f.ns, us)
		if err != nil {
			b.Fatal(err)
		}
		podNames := names(pods)
		if _, err := f.spawn(b.Context(), us); err != nil {
			b.Fatalf("spawning the servers to evict: %v", err)
		}
		routes := make([]string, len(us))
		for k, u := range us {
			if routes[k], err = addRoute(b.Context(), proxy, u, "http://127.0.0.1:1"); err != nil {
				b.Fatal(err)
			}
		}

		evicted := make([]time.Time, len(us))
		show(f.cpu.settle(b.Context(), settleWait))
		cpu0 := f.cpu.sample()
		b.StartTimer()
		err = parallel(b.Context(), len(us), len(us), func(ctx context.Context, k int) error {
			err := harness.Evict(ctx, env.Client, f.ns, podNames[k])
			evicted[k] = time.Now()
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		spread = max(spread, latest(evicted).Sub(slices.MinFunc(evicted, time.Time.Compare)))
		if err := f.clock.awaitAll(b.Context(), gone, podNames, "gone", spawnTimeout); err != nil {
			b.Fatal(err)
		}
		waitErr := awaitCount(b.Context(), func() int { return hub.toldOf(us) }, len(us), spawnTimeout)
		b.StopTimer()
		cpu1 := f.cpu.sample()
		if waitErr != nil {
			b.Fatalf("the hub was told of %d of %d stops: %v", hub.toldOf(us), len(us), waitErr)
		}
		show(f.cpu.report(fmt.Sprintf("CPU from the evictions until every pod was gone and the hub told (%d)", i+1), cpu0, cpu1))

		hub.mu.Lock()
		told := make([]time.Time, len(us))
		for k, u := range us {
			told[k] = hub.told[u]
			if hub.calls[u] != 1 {
				b.Errorf("the hub was told %d times that %s stopped, want once", hub.calls[u], u)
			}
		}
		if len(hub.bad) > 0 {
			b.Errorf("unexpected requests at the hub: %q", hub.bad)
		}
		hub.mu.Unlock()
		toHub = append(toHub, since(evicted, told)...)
		toGone = append(toGone, since(evicted, f.clock.times(gone, podNames))...)

		if err := checkStopped(b.Context(), f.c, us); err != nil {
			b.Error(err)
		}
		// The hub answered, so spawnerd must have left the proxy to it.
		left, err := routeSet(b.Context(), proxy)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range routes {
			if !left[r] {
				b.Errorf("proxy route %s was removed although the hub answered", r)
			}
		}
	}
	rows := [][]string{{"from the Failed status written", "p50", "p99 (target < 1 s)", "max"}}
	for _, m := range []struct {
		name string
		ds   []time.Duration
	}{{"to the hub told (DELETE received)", toHub}, {"to the pod gone (watch)", toGone}} {
		rows = append(rows, []string{m.name, millis(percentile(m.ds, 0.5)), millis(percentile(m.ds, 0.99)), millis(percentile(m.ds, 1))})
	}
	show(table(fmt.Sprintf("Stop reaction: %d running servers evicted at once, the evictions written within %s (real configurable-http-proxy unused)", stopServers, millis(spread)), rows))
	b.ReportMetric(ms(percentile(toHub, 0.5)), "hub-p50-ms")
	b.ReportMetric(ms(percentile(toHub, 0.99)), "hub-p99-ms")
	b.ReportMetric(ms(percentile(toGone, 0.5)), "gone-p50-ms")
	b.ReportMetric(ms(percentile(toGone, 0.99)), "gone-p99-ms")
}

func awaitCount(ctx context.Context, count func() int, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for range int(timeout / (10 * time.Millisecond)) {
		if count() >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("%d of %d after %s", count(), n, timeout)
}

// checkStopped polls every server: each must read stopped, evicted.
func checkStopped(ctx context.Context, c *apiClient, users []string) error {
	return parallel(ctx, len(users), statusPollers, func(ctx context.Context, i int) error {
		m, err := c.server(ctx, users[i])
		if err != nil {
			return err
		}
		if m.Status != "stopped" || m.Stopped == nil || m.Stopped.Reason != "Evicted" {
			return fmt.Errorf("server of %s after its eviction: %+v, want stopped, reason Evicted", users[i], m)
		}
		return nil
	})
}

// addRoute adds a user's route to the proxy as the hub does after a spawn.
func addRoute(ctx context.Context, px *harness.Proxy, user, target string) (string, error) {
	path := "/user/" + user
	body, err := json.Marshal(map[string]any{"target": target, "user": user, "server_name": "", "jupyterhub": true})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, px.APIURL+"/api/routes"+path, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "token "+px.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("adding proxy route %s: %w", path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("adding proxy route %s: status %d", path, resp.StatusCode)
	}
	return path, nil
}

// routeSet lists the proxy's routes.
func routeSet(ctx context.Context, px *harness.Proxy) (map[string]bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, px.APIURL+"/api/routes", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "token "+px.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("listing proxy routes: %w", err)
	}
	defer resp.Body.Close()
	var routes map[string]json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&routes); err != nil {
		return nil, fmt.Errorf("listing proxy routes: %w", err)
	}
	out := make(map[string]bool, len(routes))
	for r := range routes {
		out[r] = true
	}
	return out, nil
}
