package bench_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/hubapi"
)

// The poll benchmark's scale: the 10,000 running servers. A tenth
// are spawned through spawnerd's API, so that this replica follows their
// spawns; the rest are the identical pods created with client-go, as if
// another replica, or this one before a restart, had spawned them.
const (
	pollServers = 10_000
	pollSpawned = 1_000
	// pollClients keep-alive connections poll at once, as the hub's
	// concurrent polls do.
	pollClients       = 8
	pollWindow        = 10 * time.Second
	maxPollsPerClient = 5_000_000
	// pollProfileWindow is the CPU profile's: taken after the measured
	// window, so that the profiler's own cost is not in its numbers.
	pollProfileWindow = 5 * time.Second
	// pollFloorWindow is net/http's floor's: the same load on a handler
	// that does nothing.
	pollFloorWindow = 5 * time.Second
	// readReuse is the hub class's READ_REUSE: one read token per user,
	// minted anew every 30 s.
	readReuse = 30 * time.Second
)

// The targets for a poll.
const (
	pollRateTarget = 40_000                 // polls/s, clients on the same 2 cores
	pollCPUTarget  = 10 * time.Microsecond  // spawnerd's CPU per poll
	pollP99Target  = 100 * time.Microsecond // server-side p99
)

// pollRoute is the poll's series of spawner_http_request_duration_seconds.
const pollRoute = `{code="200",method="GET",route="/api/v1/users/:user/server"}`

// quietWait bounds the wait for other work on the machine (builds, other
// tests) to stop before the poll is measured: on two cores it would take
// from the clients and the service alike.
const quietWait = 3 * time.Minute

// awaitQuiet waits, up to maxWait, until processes the meter does not
// measure use less than a tenth of the machine for three seconds in a row,
// and returns a line saying how long that took.
func awaitQuiet(ctx context.Context, m *cpuMeter, maxWait time.Duration) string {
	start := time.Now()
	quiet, last := 0, 0.0
	for time.Since(start) < maxWait {
		from := m.sample()
		select {
		case <-ctx.Done():
			return "waiting for a quiet machine: " + ctx.Err().Error() + "\n"
		case <-time.After(time.Second):
		}
		to := m.sample()
		var ours time.Duration
		for name, d := range to.procs {
			ours += d - from.procs[name]
		}
		capacity := float64(to.at.Sub(from.at)) * float64(numCPU())
		last = float64(max(to.busy-from.busy-ours, 0)) / capacity
		if quiet = quiet + 1; last >= disturbed {
			quiet = 0
		}
		if quiet == 3 {
			return fmt.Sprintf("machine quiet after %s (other processes %.0f %%)\n", time.Since(start).Round(time.Second), 100*last)
		}
	}
	return fmt.Sprintf("machine still busy after %s (other processes %.0f %%); measuring anyway\n", maxWait, 100*last)
}

// pollNodes make room for the poll benchmark's pods (40 × 256) beside
// TestMain's nodes, which stay as the storms' measurements were made on.
func pollNodes() []*corev1.Node {
	cfg := devcluster.NodeConfig{NodeSets: []devcluster.NodeSet{{Name: "poll", Count: 40, CPU: "128", Memory: "512Gi", Pods: 256}}}
	return cfg.Nodes()
}

// addNodes registers kwok nodes for one benchmark, waits until kwok has taken
// them on, and removes them when it ends; call it before anything whose
// clean-up deletes pods on them.
func addNodes(b *testing.B, nodes []*corev1.Node) {
	b.Helper()
	b.Cleanup(func() {
		for _, n := range nodes {
			_ = env.Client.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
		}
	})
	if err := devcluster.RegisterNodes(b.Context(), env.Client, nodes, time.Minute); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPollHTTP measures the hub's poll, GET /api/v1/users/{u}/server
// with the hub's saved state as the hint, over 10,000 running servers, from
// pollClients keep-alive connections of a lean load generator on the same
// machine. Tokens are reused as the hub class does: one read token per user
// for 30 s. It reports spawnerd's CPU and allocations per poll, the
// server-side and client latencies, and where spawnerd's CPU goes (a CPU
// profile from its --debug-listen).
func BenchmarkPollHTTP(b *testing.B) {
	b.StopTimer()
	ctx := b.Context()
	addNodes(b, pollNodes())
	debugAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(b))
	f := newFleet(b, harness.SpawnerdOptions{Args: []string{"--debug-listen", debugAddr}})
	// One DeleteCollection of 10,000 pods outlasts the API server's request
	// timeout: remove them one by one before the fleet's clean-up runs.
	b.Cleanup(func() {
		f.api.Stop()
		if err := deleteEach(context.Background(), f.ns); err != nil {
			b.Error(err)
		}
	})

	// 1. The servers.
	us := users("poll", pollServers)
	began := time.Now()
	if _, err := f.spawn(ctx, us[:pollSpawned]); err != nil {
		b.Fatalf("spawning the servers to poll: %v", err)
	}
	pods, err := buildPods(f.ns, us[pollSpawned:])
	if err != nil {
		b.Fatal(err)
	}
	if _, err := createPods(ctx, env.Client, pods, stormClients); err != nil {
		b.Fatal(err)
	}
	if err := f.clock.awaitAll(ctx, running, names(pods), "Running", spawnTimeout); err != nil {
		b.Fatal(err)
	}
	load, err := newPollLoad(ctx, f, us, pollClients)
	if err != nil {
		b.Fatal(err)
	}
	defer load.close()
	// Every server reads running, and every token has been seen once:
	// the window then verifies only the tokens minted anew within it, as
	// in the hub's steady state.
	if err := load.warm(ctx, spawnTimeout); err != nil {
		b.Fatal(err)
	}
	show(fmt.Sprintf("%d servers running and polled once after %s\n", pollServers, secs(time.Since(began))))

	// 2. The measured windows.
	show(f.cpu.settle(ctx, settleWait))
	show(awaitQuiet(ctx, f.cpu, quietWait))
	before, err := scrape(ctx, f.api.URL)
	if err != nil {
		b.Fatal(err)
	}
	var (
		lat     []time.Duration
		elapsed time.Duration
	)
	cpu0 := f.cpu.sample()
	for range b.N {
		b.StartTimer()
		l, el, err := load.run(ctx, pollWindow)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		lat, elapsed = append(lat, l...), elapsed+el
	}
	cpu1 := f.cpu.sample()
	after, err := scrape(ctx, f.api.URL)
	if err != nil {
		b.Fatal(err)
	}

	// 3. net/http's floor in the same process: the same clients and
	// request bytes to a handler that writes the command line.
	floor := load.retarget(debugAddr, "/debug/pprof/cmdline")
	defer floor.close()
	fcpu0 := f.cpu.sample()
	flat, felapsed, err := floor.run(ctx, pollFloorWindow)
	fcpu1 := f.cpu.sample()
	if err != nil {
		b.Fatal(err)
	}

	// 3b. The same polls with spawnerd on one core and the clients on the
	// other: how much of the tail is the clients' threads taking
	// spawnerd's core.
	apartGET, err := measureApart(ctx, f, pollRoute, func() (int, int, time.Duration, error) {
		l, el, err := load.run(ctx, pollWindow)
		return len(l), len(l), el, err
	})
	if err != nil {
		b.Fatalf("polls: %v", err)
	}

	// 4. Where spawnerd's CPU goes, under the poll load.
	prof, err := load.profile(ctx, debugAddr, pollProfileWindow)
	if err != nil {
		b.Fatal(err)
	}

	// 5. The same servers polled the hub class's way, pollBatch to a
	// request.
	batched, err := measureBatched(ctx, f, load, pollBatch, pollWindow, debugAddr)
	if err != nil {
		b.Fatal(err)
	}

	n := float64(len(lat))
	rate := n / elapsed.Seconds()
	perPoll := func(d time.Duration) time.Duration { return time.Duration(float64(d) / n) }
	cpuPerPoll := perPoll(cpu1.procs["spawnerd"] - cpu0.procs["spawnerd"])
	clientPerPoll := perPoll(cpu1.procs[benchProcess] - cpu0.procs[benchProcess])
	allocs := delta(before, after, "go_memstats_mallocs_total") / n
	allocBytes := delta(before, after, "go_memstats_alloc_bytes_total") / n
	served := delta(before, after, "spawner_http_request_duration_seconds_count"+pollRoute)
	bound := func(q float64) time.Duration {
		return time.Duration(bucketBound(before, after, "spawner_http_request_duration_seconds", pollRoute, q) * float64(time.Second))
	}
	serverP50, serverP99 := bound(0.5), bound(0.99)
	serverMean := mean(before, after, "spawner_http_request_duration_seconds", pollRoute)
	p50, p99, p999, top := percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 0.999), percentile(lat, 1)
	fn := float64(len(flat))
	floorRate := fn / felapsed.Seconds()
	floorCPU := time.Duration(float64(fcpu1.procs["spawnerd"]-fcpu0.procs["spawnerd"]) / fn)
	floorClient := time.Duration(float64(fcpu1.procs[benchProcess]-fcpu0.procs[benchProcess]) / fn)
	if served != n {
		b.Errorf("spawner_http_request_duration_seconds counted %v polls, the clients sent %v", served, n)
	}

	show(table(fmt.Sprintf("Poll over HTTP: %d running servers, %d keep-alive clients for %s, one read token per user for %s (as the hub class with poll_batch_window 0); then the same servers in batches",
		pollServers, pollClients, elapsed.Round(time.Millisecond), readReuse), append([][]string{
		{"metric", "value", "target", "met"},
		{"polls/s (clients on the same cores)", fmt.Sprintf("%.0f", rate), fmt.Sprintf("≥ %d", pollRateTarget), metAtLeast(rate, pollRateTarget)},
		{"spawnerd CPU per poll (utime+stime)", microsFrac(cpuPerPoll), "≤ " + micros(pollCPUTarget), metAtMost(cpuPerPoll, pollCPUTarget)},
		{"server-side p50 (histogram bucket bound)", "≤ " + micros(serverP50), "", ""},
		{"server-side p99 (histogram bucket bound)", "≤ " + micros(serverP99), "≤ " + micros(pollP99Target), metAtMost(serverP99, pollP99Target)},
		{"server-side mean", microsFrac(serverMean), "", ""},
		{"client p50 / p99 / p99.9 / max", strings.Join([]string{micros(p50), micros(p99), micros(p999), micros(top)}, " / "), "", ""},
		{"spawnerd's threads runnable but waiting for a CPU, a poll", microsFrac(perPoll(cpu1.waits["spawnerd"] - cpu0.waits["spawnerd"])), "", ""},
		{"spawnerd on one core and the clients on the other: polls/s / server-side mean / p99",
			fmt.Sprintf("%.0f / %s / ≤ %s", apartGET.rate, microsFrac(apartGET.mean), micros(apartGET.p99)), "", ""},
		{"spawnerd allocations per poll (whole process)", fmt.Sprintf("%.1f (%.0f B)", allocs, allocBytes), "", ""},
		{"load generator CPU per poll", microsFrac(clientPerPoll), "", ""},
		{"net/http floor: requests/s (same clients, a handler writing the command line)", fmt.Sprintf("%.0f", floorRate), "", ""},
		{"net/http floor: spawnerd CPU per request", microsFrac(floorCPU), "", ""},
		{"net/http floor: load generator CPU per request", microsFrac(floorClient), "", ""},
	}, batched.rows(pollBatch)...)))
	show(f.cpu.report("CPU while polling", cpu0, cpu1))
	show(prof.report(cpuPerPoll))
	show("Batched polls:\n" + batched.prof.report(batched.cpuPerPoll))

	b.ReportMetric(rate, "polls/s")
	b.ReportMetric(us64(cpuPerPoll), "cpu-µs/poll")
	b.ReportMetric(us64(serverP50), "server-p50-µs")
	b.ReportMetric(us64(serverP99), "server-p99-µs")
	b.ReportMetric(us64(p50), "client-p50-µs")
	b.ReportMetric(us64(p99), "client-p99-µs")
	b.ReportMetric(allocs, "allocs/poll")
	b.ReportMetric(us64(clientPerPoll), "client-cpu-µs/poll")
	b.ReportMetric(floorRate, "floor-req/s")
	b.ReportMetric(us64(floorCPU), "floor-cpu-µs/req")
	b.ReportMetric(batched.rate, "batch-polls/s")
	b.ReportMetric(us64(batched.cpuPerPoll), "batch-cpu-µs/poll")
	b.ReportMetric(us64(batched.serverP99), "batch-server-p99-µs")
	b.ReportMetric(batched.allocs, "batch-allocs/poll")
	b.ReportMetric(us64(batched.pacedServerP99), "batch-paced-server-p99-µs")
	b.ReportMetric(us64(apartGET.p99), "apart-server-p99-µs")
	b.ReportMetric(us64(batched.apart.p99), "batch-apart-server-p99-µs")
	b.ReportMetric(batched.apart.rate, "batch-apart-polls/s")
}

func us64(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func microsFrac(d time.Duration) string {
	return strconv.FormatFloat(us64(d), 'f', 1, 64) + " µs"
}

func metAtMost(v, target time.Duration) string {
	if v <= target {
		return "yes"
	}
	return "NO"
}

func metAtLeast(v, target float64) string {
	if v >= target {
		return "yes"
	}
	return "NO"
}

var runningJSON = []byte(`"status":"running"`)

// pollLoad is the benchmark's load generator. Each connection goroutine
// owns every pollClients-th user and sends that user's pre-built request,
// the way the hub's class would: its read token, minted anew when 30 s
// old, and the hub's saved state as the hint. The client is lean on
// purpose (one write and one read per poll, nothing allocated), as its CPU
// comes out of the same two cores spawnerd runs on.
type pollLoad struct {
	c     *apiClient
	host  string
	users []string
	paths []string // the path and hint query of each user
	// items are the same polls as a batched poll's items.
	items []hubapi.PollItem
	// reqs[i] is user i's request, minted[i] when its token was signed.
	reqs   [][]byte
	minted []time.Time
	conns  []*pollConn
	// want is what every answer's body must hold; nil: any body.
	want []byte
}

// newPollLoad reads the pods' UIDs (the hub's saved pod_uid), signs a
// token per user with ages spread over readReuse, as a hub in its steady
// state holds them, and builds every request.
func newPollLoad(ctx context.Context, f *fleet, users []string, clients int) (*pollLoad, error) {
	u, err := url.Parse(f.api.URL)
	if err != nil {
		return nil, err
	}
	pods, err := buildPods(f.ns, users)
	if err != nil {
		return nil, err
	}
	uids, err := podUIDs(ctx, f.ns)
	if err != nil {
		return nil, err
	}
	l := &pollLoad{c: f.c, host: u.Host, users: users, paths: make([]string, len(users)), items: make([]hubapi.PollItem, len(users)),
		reqs: make([][]byte, len(users)), minted: make([]time.Time, len(users)), want: runningJSON}
	now := time.Now()
	for i, user := range users {
		uid, ok := uids[pods[i].Name]
		if !ok {
			return nil, fmt.Errorf("no pod %s for %s", pods[i].Name, user)
		}
		// In the hub class's order: pod_name, namespace, pod_uid.
		l.paths[i] = harness.ServerPath(user, "") + "?pod_name=" + url.QueryEscape(pods[i].Name) +
			"&namespace=" + url.QueryEscape(f.ns) + "&pod_uid=" + url.QueryEscape(string(uid))
		l.items[i] = hubapi.PollItem{User: user, PodName: pods[i].Name, Namespace: f.ns, PodUID: string(uid)}
		age := time.Duration(i) * readReuse / time.Duration(len(users))
		if err := l.mint(i, now.Add(-age)); err != nil {
			return nil, err
		}
	}
	for range clients {
		l.conns = append(l.conns, &pollConn{addr: u.Host})
	}
	return l, nil
}

// retarget returns a load of the same requests, tokens and hints to
// another listener and path: net/http's floor, on spawnerd's debug
// listener, for the same clients and the same request bytes.
func (l *pollLoad) retarget(host, path string) *pollLoad {
	t := &pollLoad{c: l.c, host: host, users: l.users, paths: make([]string, len(l.users)),
		reqs: make([][]byte, len(l.users)), minted: make([]time.Time, len(l.users))}
	for i, p := range l.paths {
		_, query, _ := strings.Cut(p, "?")
		t.paths[i] = path + "?" + query
		t.build(i, string(bearer(l.reqs[i])), l.minted[i])
	}
	for range l.conns {
		t.conns = append(t.conns, &pollConn{addr: host})
	}
	return t
}

// deleteEach deletes the namespace's pods at once, from many clients.
func deleteEach(ctx context.Context, ns string) error {
	uids, err := podUIDs(ctx, ns)
	if err != nil {
		return err
	}
	names := slices.Collect(maps.Keys(uids))
	return parallel(ctx, len(names), stormClients, func(ctx context.Context, i int) error {
		err := env.Client.CoreV1().Pods(ns).Delete(ctx, names[i], metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting pod %s: %w", names[i], err)
		}
		return nil
	})
}

// podUIDs lists the namespace's pods by name, a page at a time.
func podUIDs(ctx context.Context, ns string) (map[string]types.UID, error) {
	out := map[string]types.UID{}
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := env.Client.CoreV1().Pods(ns).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing the pods of %s: %w", ns, err)
		}
		for _, p := range list.Items {
			out[p.Name] = p.UID
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			return out, nil
		}
	}
}

// mint signs user i's read token as of at, as the hub class did then,
// and builds the request with it.
func (l *pollLoad) mint(i int, at time.Time) error {
	tok, err := hubapi.Sign(l.c.secret, l.users[i], false, at)
	if err != nil {
		return fmt.Errorf("signing a token for %s: %w", l.users[i], err)
	}
	l.build(i, tok, at)
	return nil
}

// remint signs user i's read token anew, as the hub class does once it is
// readReuse old.
func (l *pollLoad) remint(i int) error {
	at := time.Now()
	tok, err := l.c.token(l.users[i])
	if err != nil {
		return err
	}
	l.build(i, tok, at)
	return nil
}

func (l *pollLoad) build(i int, tok string, at time.Time) {
	l.reqs[i] = fmt.Appendf(l.reqs[i][:0], "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: application/json\r\nUser-Agent: bench-poll\r\n\r\n",
		l.paths[i], l.host, tok)
	l.minted[i] = at
}

func (l *pollLoad) close() {
	for _, c := range l.conns {
		c.close()
	}
}

// warm polls every server until each has read running once, and checks
// one answer through the API client as well.
func (l *pollLoad) warm(ctx context.Context, timeout time.Duration) error {
	code, body, err := l.c.do(ctx, http.MethodGet, l.paths[0], string(bearer(l.reqs[0])), nil)
	if err != nil {
		return err
	}
	if code != http.StatusOK || !bytes.Contains(body, runningJSON) {
		return fmt.Errorf("GET %s: status %d: %s", l.paths[0], code, body)
	}
	deadline := time.Now().Add(timeout)
	pending := make([][]int, len(l.conns))
	for i := range l.users {
		pending[i%len(l.conns)] = append(pending[i%len(l.conns)], i)
	}
	return parallel(ctx, len(l.conns), len(l.conns), func(ctx context.Context, w int) error {
		c := l.conns[w]
		for len(pending[w]) > 0 {
			left := pending[w][:0]
			for _, i := range pending[w] {
				code, body, err := c.roundTrip(l.reqs[i])
				if err != nil {
					return err
				}
				if code != http.StatusOK {
					return fmt.Errorf("GET %s: status %d: %s", l.paths[i], code, body)
				}
				if !bytes.Contains(body, runningJSON) {
					left = append(left, i)
				}
			}
			pending[w] = left
			if time.Now().After(deadline) {
				return fmt.Errorf("%d servers not running after %s", len(left), timeout)
			}
			if len(left) > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
		return nil
	})
}

// bearer returns the token of a pre-built request.
func bearer(req []byte) []byte {
	_, rest, _ := bytes.Cut(req, []byte("Authorization: Bearer "))
	tok, _, _ := bytes.Cut(rest, []byte("\r\n"))
	return tok
}

// run polls for window and returns each poll's latency. Every answer must
// say running.
func (l *pollLoad) run(ctx context.Context, window time.Duration) ([]time.Duration, time.Duration, error) {
	clients := len(l.conns)
	per := make([][]time.Duration, clients)
	start := time.Now()
	deadline := start.Add(window)
	err := parallel(ctx, clients, clients, func(ctx context.Context, w int) error {
		c := l.conns[w]
		if err := c.setDeadline(deadline.Add(time.Minute)); err != nil {
			return err
		}
		lat := make([]time.Duration, 0, 1<<17)
		for n, i := 0, w; n < maxPollsPerClient; n, i = n+1, i+clients {
			if i >= len(l.reqs) {
				i = w
			}
			t0 := time.Now()
			if !t0.Before(deadline) {
				break
			}
			if t0.Sub(l.minted[i]) >= readReuse {
				if err := l.remint(i); err != nil {
					return err
				}
				t0 = time.Now()
			}
			code, body, err := c.roundTrip(l.reqs[i])
			d := time.Since(t0)
			if err != nil {
				return err
			}
			if code != http.StatusOK || !bytes.Contains(body, l.want) {
				return fmt.Errorf("GET %s: status %d: %s", l.paths[i], code, body)
			}
			lat = append(lat, d)
		}
		per[w] = lat
		return ctx.Err()
	})
	elapsed := time.Since(start)
	var all []time.Duration
	for _, l := range per {
		all = append(all, l...)
	}
	return all, elapsed, err
}

// profile polls for window plus a margin while spawnerd takes a CPU
// profile of window, and returns the profile.
func (l *pollLoad) profile(ctx context.Context, debugAddr string, window time.Duration) (*cpuProfile, error) {
	return profileWhile(ctx, debugAddr, window, func(ctx context.Context, d time.Duration) error {
		_, _, err := l.run(ctx, d)
		return err
	})
}

// profileWhile runs load for window plus a margin while spawnerd takes a
// CPU profile of window, and returns the profile.
func profileWhile(ctx context.Context, debugAddr string, window time.Duration, load func(context.Context, time.Duration) error) (*cpuProfile, error) {
	var (
		wg      sync.WaitGroup
		loadErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { loadErr = load(ctx, window+time.Second) })
	select {
	case <-ctx.Done():
	case <-time.After(300 * time.Millisecond): // the load is under way
	}
	data, err := fetchProfile(ctx, debugAddr, window)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if loadErr != nil {
		return nil, loadErr
	}
	return analyseProfile(ctx, data)
}

// fetchProfile takes a CPU profile of spawnerd through its --debug-listen.
func fetchProfile(ctx context.Context, addr string, window time.Duration) ([]byte, error) {
	u := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(window.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching spawnerd's CPU profile: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("fetching spawnerd's CPU profile: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching spawnerd's CPU profile: status %d: %s", resp.StatusCode, data)
	}
	return data, nil
}

// pollConn is one keep-alive connection of the load generator: it writes
// a pre-built request and reads the answer into a reused buffer.
type pollConn struct {
	addr string
	nc   net.Conn
	r    *bufio.Reader
	body []byte
	// until is the deadline set on the connection, for a redial.
	until time.Time
}

func (c *pollConn) setDeadline(t time.Time) error {
	c.until = t
	if c.nc == nil {
		return nil
	}
	return c.nc.SetDeadline(t)
}

func (c *pollConn) close() {
	if c.nc != nil {
		_ = c.nc.Close()
		c.nc = nil
	}
}

// roundTrip sends one request and returns the answer's status and body;
// the body is valid until the next call.
func (c *pollConn) roundTrip(req []byte) (int, []byte, error) {
	if c.nc == nil {
		nc, err := net.Dial("tcp", c.addr)
		if err != nil {
			return 0, nil, fmt.Errorf("dialling spawnerd: %w", err)
		}
		if !c.until.IsZero() {
			if err := nc.SetDeadline(c.until); err != nil {
				_ = nc.Close()
				return 0, nil, err
			}
		}
		c.nc, c.r = nc, bufio.NewReaderSize(nc, 16<<10)
	}
	if _, err := c.nc.Write(req); err != nil {
		c.close()
		return 0, nil, fmt.Errorf("sending a poll: %w", err)
	}
	status, length, closing, err := c.readHead()
	if err != nil {
		c.close()
		return 0, nil, fmt.Errorf("reading a poll's answer: %w", err)
	}
	if cap(c.body) < length {
		c.body = make([]byte, length)
	}
	c.body = c.body[:length]
	if _, err := io.ReadFull(c.r, c.body); err != nil {
		c.close()
		return 0, nil, fmt.Errorf("reading a poll's answer: %w", err)
	}
	if closing {
		c.close()
	}
	return status, c.body, nil
}

var errChunked = errors.New("a chunked answer; the benchmark's client reads only answers with a Content-Length")

// readHead reads the status line and headers of an answer.
func (c *pollConn) readHead() (status, length int, closing bool, err error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, 0, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, 0, false, fmt.Errorf("bad status line %q", line)
	}
	if status = digits(line[9:12]); status < 0 {
		return 0, 0, false, fmt.Errorf("bad status line %q", line)
	}
	length = -1
	for {
		if line, err = c.r.ReadSlice('\n'); err != nil {
			return 0, 0, false, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			break
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length = digits(value)
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, 0, false, errChunked
		case bytes.EqualFold(name, []byte("Connection")) && bytes.EqualFold(value, []byte("close")):
			closing = true
		}
	}
	if length < 0 {
		return 0, 0, false, errors.New("an answer without a Content-Length")
	}
	return status, length, closing, nil
}

// digits parses a decimal number without allocating; -1 if it is none.
func digits(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	n := 0
	for _, d := range b {
		if d < '0' || d > '9' {
			return -1
		}
		n = n*10 + int(d-'0')
	}
	return n
}

// cpuProfile is spawnerd's CPU profile under the poll load, summed by
// where the time goes.
type cpuProfile struct {
	total time.Duration
	// top is `go tool pprof -top`'s output.
	top string
	// parts are the samples by category, in profileParts' order.
	parts []time.Duration
}

// A profile sample is put in the first of these parts that claims it:
// garbage collection and system calls by any frame of their stack, the
// others by the frame nearest the leaf that is not the runtime's (so an
// allocation counts for whoever allocates).
const (
	partGC = iota
	partSyscalls
	partToken
	partPoll
	partEcho
	partHTTP
	partScheduler
	partOther
)

var profileParts = []struct {
	name     string
	patterns []string
}{
	partGC:        {"garbage collection (background marking, sweeping, assists)", []string{"runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcAssistAlloc", "runtime.gcStart", "runtime.markroot"}},
	partSyscalls:  {"system calls (socket reads and writes, the kernel's TCP) and the network poller", []string{"internal/runtime/syscall.", "syscall.Syscall", "syscall.RawSyscall", "runtime.netpoll", "runtime.epoll", "runtime.futex"}},
	partToken:     {"spawnerd: the token check (read-token cache, JWT)", []string{"hubapi.(*Authenticator)", "hubapi.(*readCache)"}},
	partPoll:      {"spawnerd: the poll (path and hint, lookup, answer, headers, metrics)", []string{"github.com/dsmlp/spawner/"}},
	partEcho:      {"echo: router, context, middleware", []string{"github.com/labstack/echo"}},
	partHTTP:      {"net/http: reading and parsing requests, writing answers, connections", []string{"net/http.", "net/textproto.", "bufio.", "net.", "internal/poll.", "context.", "sync."}},
	partScheduler: {"Go scheduler: parking and waking goroutines", []string{"runtime.schedule", "runtime.park_m", "runtime.findRunnable", "runtime.goexit0", "runtime.mcall", "runtime.ready", "runtime.wakep", "runtime.newproc", "runtime.gopark", "runtime.goready"}},
	partOther:     {"informers, leases, history, metrics scrape and the rest", nil},
}

// partOf attributes one sample's stack, leaf first.
func partOf(stack []string) int {
	for _, k := range []int{partGC, partSyscalls} {
		for _, frame := range stack {
			if hasAny(frame, profileParts[k].patterns) {
				return k
			}
		}
	}
	for _, frame := range stack {
		for _, k := range []int{partToken, partPoll, partEcho, partHTTP, partScheduler} {
			if hasAny(frame, profileParts[k].patterns) {
				return k
			}
		}
	}
	return partOther
}

func hasAny(s string, subs []string) bool {
	return slices.ContainsFunc(subs, func(sub string) bool { return strings.Contains(s, sub) })
}

// analyseProfile runs go tool pprof on a CPU profile: its top functions,
// and its samples by category.
func analyseProfile(ctx context.Context, data []byte) (*cpuProfile, error) {
	dir, err := os.MkdirTemp("", "poll-profile-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "spawnerd.pprof")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return nil, err
	}
	if err := harness.KeepProfile("BenchmarkPollHTTP-spawnerd", data); err != nil {
		return nil, err
	}
	pprof := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "go", append([]string{"tool", "pprof"}, args...)...).Output()
		if err != nil {
			return "", fmt.Errorf("go tool pprof %s: %w", strings.Join(args, " "), err)
		}
		return string(out), nil
	}
	p := &cpuProfile{parts: make([]time.Duration, len(profileParts))}
	if p.top, err = pprof("-top", "-nodecount=30", path); err != nil {
		return nil, err
	}
	traces, err := pprof("-traces", path)
	if err != nil {
		return nil, err
	}
	// A trace is a block after a line of dashes: its first line is the
	// sample's value and leaf frame, the next lines the callers.
	for block := range strings.SplitSeq(traces, "-----------+-------------------------------------------------------") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		f := strings.Fields(lines[0])
		if len(f) < 2 {
			continue
		}
		d, err := time.ParseDuration(f[0])
		if err != nil {
			continue
		}
		p.total += d
		stack := make([]string, len(lines))
		for i, l := range lines {
			stack[i] = strings.TrimSpace(l)
		}
		stack[0] = strings.TrimSpace(strings.TrimPrefix(stack[0], f[0]))
		p.parts[partOf(stack)] += d
	}
	if p.total == 0 {
		return nil, errors.New("spawnerd's CPU profile holds no samples")
	}
	return p, nil
}

// report is the profile as a table, each category's share turned into CPU
// per poll, then pprof's top functions.
func (p *cpuProfile) report(perPoll time.Duration) string {
	rows := [][]string{{"where spawnerd's CPU goes", "share", "per poll"}}
	order := make([]int, len(profileParts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(p.parts[b], p.parts[a]) })
	for _, k := range order {
		share := float64(p.parts[k]) / float64(p.total)
		rows = append(rows, []string{profileParts[k].name, strconv.FormatFloat(100*share, 'f', 1, 64) + " %",
			microsFrac(time.Duration(share * float64(perPoll)))})
	}
	return table(fmt.Sprintf("spawnerd's CPU profile under the same load (%s of samples)", p.total), rows) +
		"\ngo tool pprof -top (spawnerd, same profile):\n" + p.top
}
