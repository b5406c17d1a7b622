package bench_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/kubeclient"
)

const (
	// stopServers are evicted at once.
	stopServers = 1000
	// stopTarget is the issue's: p99 from the eviction the watch delivers
	// to the hub told, and to the pod's delete issued.
	stopTarget = 500 * time.Millisecond
	// stopProfileWindow is how long spawnerd's CPU profile runs from the
	// first eviction: the whole reaction fits in it.
	stopProfileWindow = 5 * time.Second
)

// BenchmarkStopReaction evicts stopServers running servers at once (status
// writes as seed 003's eviction, sent as fast as the API server takes
// them) and measures, per server, from the moment the benchmark's own
// watch delivers the Failed/Evicted update (T0):
//
//   - T1, the hub told: the fake hub's receipt of DELETE /users/{u}/server;
//   - T2, the delete issued: when spawnerd wrote the pod's DELETE to the
//     API server (its debug log line, stamped when the request went out,
//     after client-go's rate limiter);
//
// and, for where the time goes: when a stop worker took the pod up (the
// "server stopped" log line), when the watch saw the pod's deletionTimestamp
// and when it saw the pod gone. A second watch in this process, as
// spawnerd's but without gzip, shows beside them what an uncompressed watch
// costs in delivery. spawnerd runs as installed by default: stop
// Lease on, session history in a SQLite file. The API server's own write
// latency in the same window (its apiserver_request_duration_seconds, read
// before and after) is reported beside, with the share of spawnerd's p99
// it accounts for.
//
// BENCH_STOP_ARGS adds spawnerd flags (e.g. "--stop-workers=16") to compare
// settings; BENCH_PROFILES keeps spawnerd's CPU profile of the storm.
func BenchmarkStopReaction(b *testing.B) {
	b.StopTimer()
	ctx := b.Context()
	// As in BenchmarkSpawnStorm: an unmeasured bare storm first, so that
	// the pod watches opened below (spawnerd's, the benchmark's) get the
	// buffers of a grown watch cache whatever ran before in the package; on
	// a fresh API server's they are closed as unresponsive in the burst and
	// the reaction measures their reopening.
	warm, err := warmStorm(ctx, env.Namespace(b))
	if err != nil {
		b.Fatal(err)
	}
	show(warm)
	hub := newFakeHub("bench-hub-token")
	hubSrv := httptest.NewServer(hub)
	b.Cleanup(hubSrv.Close)
	proxy := harness.StartProxy(b)
	debugAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(b))
	extra := strings.Fields(os.Getenv("BENCH_STOP_ARGS"))
	f := newFleet(b, harness.SpawnerdOptions{
		Args: append([]string{"--hub-api-url", hubSrv.URL + "/hub/api", "--proxy-api-url", proxy.APIURL,
			"--debug", "--debug-listen", debugAddr}, extra...),
		Env: []string{"CONFIGPROXY_AUTH_TOKEN=" + proxy.Token, "SPAWNERD_HUB_TOKEN=" + hub.token},
	})
	watch, err := watchPods(ctx, f.ns)
	if err != nil {
		b.Fatal(err)
	}
	plain, err := watchPodsUncompressed(ctx, f.ns)
	if err != nil {
		b.Fatal(err)
	}
	evictor, err := unlimitedClient()
	if err != nil {
		b.Fatal(err)
	}

	var runs []stopRun
	for i := range b.N {
		us := users(fmt.Sprintf("stop%d-", i), stopServers)
		pods, err := buildPods(f.ns, us)
		if err != nil {
			b.Fatal(err)
		}
		podNames := names(pods)
		began := time.Now()
		if _, err := f.spawn(ctx, us); err != nil {
			b.Fatalf("spawning the servers to evict: %v", err)
		}
		routes := make([]string, len(us))
		err = parallel(ctx, len(us), 8, func(ctx context.Context, k int) error {
			route, err := addRoute(ctx, proxy, us[k], "http://127.0.0.1:1")
			routes[k] = route
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		show(fmt.Sprintf("%d servers running, with proxy routes, after %s\n", len(us), secs(time.Since(began))))

		show(f.cpu.settle(ctx, settleWait))
		api0, err := apiserverMetrics(ctx)
		if err != nil {
			b.Fatal(err)
		}
		own0, err := scrape(ctx, f.api.URL)
		if err != nil {
			b.Fatal(err)
		}
		cpu0 := f.cpu.sample()
		profCh := make(chan profileResult, 1)
		go func() {
			data, err := fetchProfile(ctx, debugAddr, stopProfileWindow)
			profCh <- profileResult{data, err}
		}()
		r := stopRun{written: make([]time.Time, len(us)), writeTook: make([]time.Duration, len(us))}
		b.StartTimer()
		err = parallel(ctx, len(us), len(us), func(ctx context.Context, k int) error {
			t := time.Now()
			err := harness.Evict(ctx, evictor, f.ns, podNames[k])
			r.written[k] = time.Now()
			r.writeTook[k] = r.written[k].Sub(t)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := f.clock.awaitAll(ctx, gone, podNames, "gone", spawnTimeout); err != nil {
			b.Fatal(err)
		}
		waitErr := awaitCount(ctx, func() int { return hub.toldOf(us) }, len(us), spawnTimeout)
		b.StopTimer()
		cpu1 := f.cpu.sample()
		if waitErr != nil {
			b.Fatalf("the hub was told of %d of %d stops: %v", hub.toldOf(us), len(us), waitErr)
		}
		api1, err := apiserverMetrics(ctx)
		if err != nil {
			b.Fatal(err)
		}
		own1, err := scrape(ctx, f.api.URL)
		if err != nil {
			b.Fatal(err)
		}
		r.podWatches = delta(own0, own1, podWatchesOpened)
		show(f.cpu.report(fmt.Sprintf("CPU from the evictions until every pod was gone and the hub told (%d)", i+1), cpu0, cpu1))
		r.cpu = cpu1.procs["spawnerd"] - cpu0.procs["spawnerd"]
		r.wall = cpu1.at.Sub(cpu0.at)
		r.api = apiserverWrites(api0, api1)
		r.watch = apiserverCounters(api0, api1)

		// Each pod's times.
		r.seen = watch.times(evicted, podNames)
		r.plain = plain.times(evicted, podNames)
		r.deleting = watch.times(deleting, podNames)
		r.gone = f.clock.times(gone, podNames)
		r.told = hub.times(us)
		sl := parseStopLog(f.api.Log())
		r.informer = sl.times(sl.informer, podNames)
		r.queued = sl.times(sl.queued, podNames)
		r.picked, r.sent = sl.times(sl.picked, podNames), sl.times(sl.sent, podNames)
		r.took = sl.durations(podNames)
		for k, name := range podNames {
			if r.seen[k].IsZero() {
				b.Errorf("the watch never saw pod %s evicted", name)
			}
			if r.sent[k].IsZero() || r.picked[k].IsZero() {
				b.Errorf("spawnerd's log has no stop or no delete of pod %s", name)
			}
		}
		if err := hub.check(us); err != nil {
			b.Error(err)
		}
		if err := checkStopped(ctx, f.c, us); err != nil {
			b.Error(err)
		}
		// The hub answered, so spawnerd must have left the proxy to it.
		left := proxy.Routes(b)
		for _, route := range routes {
			if _, ok := left[route]; !ok {
				b.Errorf("proxy route %s was removed although the hub answered", route)
			}
		}
		if path := os.Getenv("BENCH_STOP_DUMP"); path != "" {
			if err := dumpStops(path, podNames, r, sl); err != nil {
				b.Error(err)
			}
		}
		prof := <-profCh
		if prof.err != nil {
			b.Fatal(prof.err)
		}
		r.profile = prof.data
		runs = append(runs, r)
	}
	reportStops(b, runs, extra)
}

// stopRun is one storm of evictions: per pod, in podNames' order.
type stopRun struct {
	written   []time.Time     // the eviction's status write answered
	writeTook []time.Duration // the eviction's GET and status PUT, as the benchmark saw them
	seen      []time.Time     // T0: the watch delivered the Failed/Evicted update
	plain     []time.Time     // a watch without gzip, in this process, delivered it
	queued    []time.Time     // spawnerd's reflector queued the Failed update (its transform ran)
	informer  []time.Time     // spawnerd's informer delivered the Failed update
	picked    []time.Time     // a stop worker took the pod up ("server stopped")
	sent      []time.Time     // T2: spawnerd wrote the pod's DELETE
	took      []time.Duration // the DELETE's round trip, as spawnerd saw it
	told      []time.Time     // T1: the fake hub received the stop
	deleting  []time.Time     // the watch saw the pod's deletionTimestamp
	gone      []time.Time     // the watch saw the pod gone
	cpu, wall time.Duration   // spawnerd's CPU time over the storm's wall time
	api       map[string]latency
	watch     map[string]float64 // the API server's counters (apiserverCounters)
	// podWatches is how many pod watches spawnerd opened in the window:
	// each one its informer's watch ended, closed by the API server.
	podWatches float64
	profile    []byte
}

type profileResult struct {
	data []byte
	err  error
}

// reportStops prints the runs' tables and reports the headline metrics.
func reportStops(b *testing.B, runs []stopRun, extra []string) {
	var toHub, toSent, toPicked, toQueued, toPlain, queuedToInformer, toInformer, informerToPicked, pickedToSent, deleteRTT, toDeleting, toGone, writes []time.Duration
	var cpu, wall, spread time.Duration
	api := map[string]latency{}
	for _, r := range runs {
		toHub = append(toHub, between(r.seen, r.told)...)
		toSent = append(toSent, between(r.seen, r.sent)...)
		toPicked = append(toPicked, between(r.seen, r.picked)...)
		toQueued = append(toQueued, between(r.seen, r.queued)...)
		toPlain = append(toPlain, between(r.seen, r.plain)...)
		queuedToInformer = append(queuedToInformer, between(r.queued, r.informer)...)
		toInformer = append(toInformer, between(r.seen, r.informer)...)
		informerToPicked = append(informerToPicked, between(r.informer, r.picked)...)
		pickedToSent = append(pickedToSent, between(r.picked, r.sent)...)
		deleteRTT = append(deleteRTT, r.took...)
		toDeleting = append(toDeleting, between(r.seen, r.deleting)...)
		toGone = append(toGone, between(r.seen, r.gone)...)
		writes = append(writes, r.writeTook...)
		cpu, wall = cpu+r.cpu, wall+r.wall
		spread = max(spread, latest(r.written).Sub(slices.MinFunc(r.written, time.Time.Compare)))
		for k, l := range r.api {
			api[k] = api[k].add(l)
		}
	}
	dist := func(ds []time.Duration) string {
		return fmt.Sprintf("%s / %s / %s", millis(percentile(ds, 0.5)), millis(percentile(ds, 0.99)), millis(percentile(ds, 1)))
	}
	hubP99, sentP99 := percentile(toHub, 0.99), percentile(toSent, 0.99)
	cpuShare := 100 * cpu.Seconds() / wall.Seconds()
	title := fmt.Sprintf("Stop reaction: %d running servers evicted at once, the evictions written within %s; from T0, the Failed/Evicted update the watch delivers",
		stopServers, millis(spread))
	if len(extra) > 0 {
		title += " (spawnerd " + strings.Join(extra, " ") + ")"
	}
	show(table(title, [][]string{
		{"metric", "p50 / p99 / max", "target", "met"},
		{"T1 − T0: hub told (DELETE received by the hub)", dist(toHub), "p99 ≤ " + millis(stopTarget), metAtMost(hubP99, stopTarget)},
		{"T2 − T0: pod delete issued (spawnerd wrote the DELETE)", dist(toSent), "p99 ≤ " + millis(stopTarget), metAtMost(sentP99, stopTarget)},
		{"  of which: to a stop worker taking the pod up", dist(toPicked), "", ""},
		{"    of which: to spawnerd's informer delivering the update (negative: before the benchmark's watch)", dist(toInformer), "", ""},
		{"      of which: to spawnerd's reflector queueing it (the watch's delivery and decoding)", dist(toQueued), "", ""},
		{"      of which: from the reflector's queue to the handler (client-go's FIFO and listener)", dist(queuedToInformer), "", ""},
		{"      beside it: to a second watch in the benchmark's process, as spawnerd's but without gzip (--kube-compression=false), delivering it", dist(toPlain) + missed(toPlain, toHub), "", ""},
		{"    of which: from the informer to a stop worker (the work queue)", dist(informerToPicked), "", ""},
		{"  of which: taken up to DELETE written (client-go's rate limiter)", dist(pickedToSent), "", ""},
		{"the DELETE's round trip, as spawnerd saw it", dist(deleteRTT), "", ""},
		{"to the deletionTimestamp seen by the watch", dist(toDeleting), "", ""},
		{"to the pod gone (watch)", dist(toGone), "", ""},
		{"the evictions' GET + status PUT, as the benchmark saw them", dist(writes), "", ""},
		{"spawnerd CPU over the storm", fmt.Sprintf("%s (%.0f %% of one CPU over %s)", secs(cpu), cpuShare, secs(wall)), "", ""},
	}))

	rows := [][]string{{"API server's own latency, pods (apiserver_request_duration_seconds)", "requests", "p50", "p99", "mean"}}
	for _, k := range slices.Sorted(maps.Keys(api)) {
		l := api[k]
		rows = append(rows, []string{k, fmt.Sprintf("%.0f", l.count), millis(l.quantile(0.5)), millis(l.quantile(0.99)), millis(l.mean())})
	}
	all := latency{}
	for _, l := range api {
		all = all.add(l)
	}
	rows = append(rows, []string{"all pod writes", fmt.Sprintf("%.0f", all.count), millis(all.quantile(0.5)), millis(all.quantile(0.99)), millis(all.mean())})
	show(table("The API server's write latency in the same window (estimated within its histogram's buckets, as histogram_quantile)", rows))
	apiP99 := all.quantile(0.99)
	show(fmt.Sprintf("The API server's write p99 (%s) is %.0f %% of T1 − T0's p99 and %.0f %% of T2 − T0's p99.\n",
		millis(apiP99), 100*float64(apiP99)/float64(max(hubP99, 1)), 100*float64(apiP99)/float64(max(sentP99, 1))))
	// A pod watcher the API server closes as unresponsive (its buffer full
	// for the dispatch budget) watches again and gets the backlog late: the
	// informer's delay above, not spawnerd's work queue.
	var closed, sent, own float64
	for _, r := range runs {
		closed += r.watch["watchers closed as unresponsive: pods"]
		sent += r.watch["watch events sent: pods"]
		own += r.podWatches
	}
	show(fmt.Sprintf("Pod watchers the API server closed as unresponsive in the window: %.0f, of which spawnerd's (the pod watches it opened again, %s): %.0f; pod watch events it sent: %.0f.\n",
		closed, podWatchesOpened, own, sent))

	if len(runs) > 0 && len(runs[len(runs)-1].profile) > 0 {
		top, err := profileTop(b.Context(), runs[len(runs)-1].profile)
		if err != nil {
			b.Error(err)
		} else {
			show(fmt.Sprintf("\nspawnerd's CPU profile over the first %s of the storm (go tool pprof -top):\n%s", stopProfileWindow, top))
		}
	}

	b.ReportMetric(ms(percentile(toHub, 0.5)), "hub-p50-ms")
	b.ReportMetric(ms(hubP99), "hub-p99-ms")
	b.ReportMetric(ms(percentile(toHub, 1)), "hub-max-ms")
	b.ReportMetric(ms(percentile(toSent, 0.5)), "delete-p50-ms")
	b.ReportMetric(ms(sentP99), "delete-p99-ms")
	b.ReportMetric(ms(percentile(toSent, 1)), "delete-max-ms")
	b.ReportMetric(ms(all.quantile(0.5)), "apiserver-write-p50-ms")
	b.ReportMetric(ms(apiP99), "apiserver-write-p99-ms")
	b.ReportMetric(cpuShare, "spawnerd-cpu-%")
	b.ReportMetric(own, "spawnerd-pod-watches-reopened")
}

// podWatchesOpened is spawnerd's count of the pod watches it opened.
const podWatchesOpened = `spawner_kube_watches_opened_total{resource="pods"}`

// missed says how many fewer pods have a time in some than in all; "" if none.
func missed(some, all []time.Duration) string {
	if n := len(all) - len(some); n > 0 {
		return fmt.Sprintf(" (%d pods not seen evicted)", n)
	}
	return ""
}

// between returns each end[i]-start[i] where both are known.
func between(start, end []time.Time) []time.Duration {
	out := make([]time.Duration, 0, len(end))
	for i, e := range end {
		if !e.IsZero() && !start[i].IsZero() {
			out = append(out, e.Sub(start[i]))
		}
	}
	return out
}

// unlimitedClient is an admin client without client-go's rate limiter, so
// that the evictions go out as fast as the API server takes them.
func unlimitedClient() (kubernetes.Interface, error) {
	cfg := env.Cluster.RESTConfig()
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
	c, err := kubernetes.NewForConfig(kubeclient.Protobuf(cfg))
	if err != nil {
		return nil, fmt.Errorf("creating an unthrottled client: %w", err)
	}
	return c, nil
}

// stopLog is what spawnerd's log says of each pod's stop: when a worker
// took it up ("server stopped") and when its DELETE went out, and took.
type stopLog struct {
	picked, sent map[string]time.Time
	took         map[string]time.Duration
	informer     map[string]time.Time
	queued       map[string]time.Time
}

// parseStopLog reads spawnerd's JSON log lines (zap's production encoder:
// times as Unix seconds, durations as seconds).
func parseStopLog(log string) stopLog {
	l := stopLog{picked: map[string]time.Time{}, sent: map[string]time.Time{}, took: map[string]time.Duration{}, informer: map[string]time.Time{},
		queued: map[string]time.Time{}}
	unix := func(s float64) time.Time { return time.Unix(0, int64(math.Round(s*1e9))) }
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"msg":"server stopped"`)) && !bytes.Contains(line, []byte(`"msg":"stopped pod delete sent"`)) &&
			!bytes.Contains(line, []byte(`"msg":"pod failed: seen by the informer"`)) && !bytes.Contains(line, []byte(`"msg":"pod failed: queued by the reflector"`)) {
			continue
		}
		var e struct {
			Msg  string  `json:"msg"`
			TS   float64 `json:"ts"`
			Pod  string  `json:"pod"`
			Sent float64 `json:"sent"`
			Took float64 `json:"took"`
		}
		if json.Unmarshal(line, &e) != nil {
			continue
		}
		switch e.Msg {
		case "pod failed: seen by the informer":
			l.informer[e.Pod] = unix(e.TS)
		case "pod failed: queued by the reflector":
			if _, ok := l.queued[e.Pod]; !ok {
				l.queued[e.Pod] = unix(e.TS)
			}
		case "server stopped":
			if _, ok := l.picked[e.Pod]; !ok {
				l.picked[e.Pod] = unix(e.TS)
			}
		case "stopped pod delete sent":
			if _, ok := l.sent[e.Pod]; !ok {
				l.sent[e.Pod] = unix(e.Sent)
				l.took[e.Pod] = time.Duration(e.Took * float64(time.Second))
			}
		}
	}
	return l
}

func (l stopLog) times(m map[string]time.Time, pods []string) []time.Time {
	out := make([]time.Time, len(pods))
	for i, p := range pods {
		out[i] = m[p]
	}
	return out
}

func (l stopLog) durations(pods []string) []time.Duration {
	var out []time.Duration
	for _, p := range pods {
		if d, ok := l.took[p]; ok {
			out = append(out, d)
		}
	}
	return out
}

// apiserverMetrics reads the API server's /metrics with the admin client.
func apiserverMetrics(ctx context.Context) (metrics, error) {
	data, err := env.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	m := metrics{}
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, nil
}

// latency is a histogram of request durations between two scrapes.
type latency struct {
	bounds, counts []float64 // cumulative counts per upper bound (seconds), +Inf last
	sum, count     float64
}

func (l latency) add(o latency) latency {
	if l.bounds == nil {
		l.bounds, l.counts = o.bounds, make([]float64, len(o.counts))
	}
	for i := range min(len(l.counts), len(o.counts)) {
		l.counts[i] += o.counts[i]
	}
	l.sum, l.count = l.sum+o.sum, l.count+o.count
	return l
}

func (l latency) mean() time.Duration {
	if l.count == 0 {
		return 0
	}
	return time.Duration(l.sum / l.count * float64(time.Second))
}

// quantile interpolates linearly within the bucket that holds it, as
// Prometheus' histogram_quantile does.
func (l latency) quantile(q float64) time.Duration {
	if l.count == 0 || len(l.bounds) == 0 {
		return 0
	}
	rank := q * l.counts[len(l.counts)-1]
	lower, below := 0.0, 0.0
	for i, c := range l.counts {
		if c >= rank {
			upper := l.bounds[i]
			if math.IsInf(upper, 1) {
				return time.Duration(lower * float64(time.Second))
			}
			frac := 0.0
			if c > below {
				frac = (rank - below) / (c - below)
			}
			return time.Duration((lower + (upper-lower)*frac) * float64(time.Second))
		}
		lower, below = l.bounds[i], c
	}
	return time.Duration(lower * float64(time.Second))
}

// apiserverWrites is apiserver_request_duration_seconds between two scrapes
// for the writes of pods, by verb and subresource ("PUT pods/status").
func apiserverWrites(before, after metrics) map[string]latency {
	const name = "apiserver_request_duration_seconds"
	out := map[string]latency{}
	buckets := map[string]map[float64]float64{}
	for series, v := range after {
		rest, ok := strings.CutPrefix(series, name+"_")
		if !ok {
			continue
		}
		kind, labels, ok := strings.Cut(rest, "{")
		if !ok {
			continue
		}
		ls := parseLabels(strings.TrimSuffix(labels, "}"))
		if ls["resource"] != "pods" || !slices.Contains([]string{"PUT", "PATCH", "DELETE", "POST"}, ls["verb"]) {
			continue
		}
		op := ls["verb"] + " pods"
		if ls["subresource"] != "" {
			op += "/" + ls["subresource"]
		}
		d := v - before[series]
		l := out[op]
		switch kind {
		case "sum":
			l.sum += d
		case "count":
			l.count += d
		case "bucket":
			le, err := strconv.ParseFloat(ls["le"], 64)
			if err != nil {
				continue
			}
			if buckets[op] == nil {
				buckets[op] = map[float64]float64{}
			}
			buckets[op][le] += d
		}
		out[op] = l
	}
	for op, bs := range buckets {
		l := out[op]
		l.bounds = slices.Sorted(maps.Keys(bs))
		for _, b := range l.bounds {
			l.counts = append(l.counts, bs[b])
		}
		if l.count == 0 {
			delete(out, op)
			continue
		}
		out[op] = l
	}
	return out
}

// parseLabels reads `a="x",b="y"` (no commas or quotes inside values, as
// in the API server's request metrics).
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// profileTop is go tool pprof -top of a CPU profile; the profile is kept
// under BENCH_PROFILES when that is set.
func profileTop(ctx context.Context, data []byte) (string, error) {
	dir, err := os.MkdirTemp("", "stop-profile-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "spawnerd-stops.pprof")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return "", err
	}
	if err := harness.KeepProfile("BenchmarkStopReaction-spawnerd", data); err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", path).Output()
	if err != nil {
		return "", fmt.Errorf("go tool pprof -top: %w", err)
	}
	return string(out), nil
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

func newFakeHub(token string) *fakeHub {
	return &fakeHub{token: token, told: map[string]time.Time{}, calls: map[string]int{}}
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

// times returns when the hub was first told of each user's stop.
func (h *fakeHub) times(users []string) []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]time.Time, len(users))
	for i, u := range users {
		out[i] = h.told[u]
	}
	return out
}

// check says whether each user's stop was told exactly once, and nothing else asked.
func (h *fakeHub) check(users []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []string
	for _, u := range users {
		if h.calls[u] != 1 {
			errs = append(errs, fmt.Sprintf("the hub was told %d times that %s stopped, want once", h.calls[u], u))
		}
	}
	if len(h.bad) > 0 {
		errs = append(errs, fmt.Sprintf("unexpected requests at the hub: %q", h.bad))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
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

// dumpStops writes each pod's times (ms from the first eviction's T0) as CSV.
func dumpStops(path string, pods []string, r stopRun, l stopLog) error {
	origin := slices.MinFunc(r.seen, time.Time.Compare)
	rel := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return strconv.FormatFloat(ms(t.Sub(origin)), 'f', 1, 64)
	}
	var buf bytes.Buffer
	buf.WriteString("pod,written,seen,queued,informer,picked,sent,told,deleting,gone\n")
	for k, p := range pods {
		fmt.Fprintf(&buf, "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", p, rel(r.written[k]), rel(r.seen[k]), rel(l.queued[p]), rel(l.informer[p]), rel(r.picked[k]),
			rel(r.sent[k]), rel(r.told[k]), rel(r.deleting[k]), rel(r.gone[k]))
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
