package bench_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/lifecycle"
)

// The hub-stack benchmark's sizes. -hubstack.servers servers are started at
// once through the hub (RemoteKubeSpawner, then the null spawner) and
// straight at spawnerd; -hubstack.scale servers are then run through the
// hub with poll_interval 30 s (0 skips that phase).
var (
	hubStackServers = flag.Int("hubstack.servers", 500, "BenchmarkHubStack: servers started at once through the hub and straight at spawnerd")
	hubStackScale   = flag.Int("hubstack.scale", 5000, "BenchmarkHubStack: servers run through the hub with poll_interval 30 s (0: skip)")
)

const (
	// hubClients post starts at once, as that many users pressing "start"
	// together; the direct spawns use as many clients, each doing what the
	// hub's class does (POST, then follow the progress stream).
	hubClients = 500
	// scalePosters is how many POSTs are in flight at once while the scale
	// phase fills the hub. With thousands of users in its database the hub's
	// event loop takes 40–90 ms a POST (its OAuth client, ORM commits); 500
	// at once kept it busy for tens of seconds, so its calls to the proxy
	// (its shared client, 10 slots) timed out, and so did the class's calls to
	// spawnerd in tornado's queue until the class waited for its slots itself
	// (http_queue_timeout).
	scalePosters = 16
	// hubIdlePoll is the poll interval while spawning: longer than any
	// spawn phase, so that a spawn's CPU holds no periodic poll.
	hubIdlePoll = 3600
	// hubFastPoll is the poll interval of the poll phase (JupyterHub 3.0
	// adds no jitter: poll_jitter came in 5.0), so the hub is asked for
	// servers/hubFastPoll polls a second; hubPollWindow is measured.
	hubFastPoll   = 1
	hubPollWindow = 15 * time.Second
	// hubScalePoll is the hub's default poll interval; hubScaleWindow, two
	// intervals, holds about two polls of every server.
	hubScalePoll   = 30
	hubScaleWindow = 2 * hubScalePoll * time.Second
	// hubStackWait bounds every wait for the hub or the cluster.
	hubStackWait = 10 * time.Minute
	// kubeSpawnerTarget is the scale the issue asks about, and
	// kubeSpawnerWatcher the published share of the hub's CPU that
	// KubeSpawner's pod watcher took at kubeSpawnerUsers users
	// (kubespawner#423, fixed by #424).
	kubeSpawnerTarget  = 5000
	kubeSpawnerWatcher = 0.54
	kubeSpawnerUsers   = 2000
)

// hubStackConfig is added to configTemplate: every server's URL is the
// benchmark's responder (see responder).
const hubStackConfig = `  pod_connect_ip: 127.0.0.1
  port: %d
`

// BenchmarkHubStack runs the whole stack: the real JupyterHub (Debian's
// 3.0) with RemoteKubeSpawner, the real configurable-http-proxy, spawnerd
// and the dev cluster's kwok nodes.
//
//   - -hubstack.servers servers started at once straight at spawnerd, each
//     as the hub's class does it (POST, then the progress stream until
//     ready), then the same number through the hub's REST API (POST
//     /hub/api/users/{name}/server from hubClients clients) until the hub
//     has made every one ready (started, answering at its URL, routed);
//   - the hub's CPU per spawn and, after a restart with poll_interval 1 s,
//     per poll; the same hub with a null spawner (testdata/nullspawner.py)
//     doing the same is the floor, and the difference is what the spawner
//     class costs the hub;
//   - -hubstack.scale servers through the hub with poll_interval 30 s: the
//     polls a second the hub makes, and its CPU while making them.
//
// What answers the hub's http_timeout check: JupyterHub 3.0, once start()
// returns a URL, GETs {url}/user/{name}/ until it answers below 500, and
// the proxy then routes /user/{name}/ to that URL. kwok pods have no
// process behind their IPs, and a real jupyterhub-singleuser per pod does
// not fit 5,000 times on 2 cores, so spawnerd is configured with
// pod_connect_ip 127.0.0.1 and port set to one shared responder of this
// process: every server's URL is http://127.0.0.1:PORT, and the responder
// answers each user's root as a notebook server does (302 to the UI, with
// X-JupyterHub-Version). The hub makes every request it makes against a
// real server (one check per spawn, one route per server), and the null
// spawner's servers get the very same URL, so both runs pay the same for
// it; only the notebook server's own work, which is not the hub's, is left
// out. The responder counts the users it was checked for, and the
// benchmark fails unless every server was checked.
//
// KubeSpawner cannot run beside it: no Debian package ships it (nor
// kubernetes_asyncio), and only Debian's and Go's registries are reached.
// Its published figures are printed for comparison instead.
func BenchmarkHubStack(b *testing.B) {
	b.StopTimer()
	ctx := b.Context()
	n, scale := *hubStackServers, *hubStackScale
	began := time.Now()
	resp := newResponder(b)
	var r hubStackResults
	for range b.N {
		r.direct = directPhase(b, resp, n)
		r.remote = hubPhase(b, resp, "RemoteKubeSpawner", n)
		r.null = hubPhase(b, resp, "null spawner", n)
		if scale > 0 {
			r.scale = scalePhase(b, resp, scale)
		}
	}
	if err := ctx.Err(); err != nil {
		b.Fatal(err)
	}
	r.took = time.Since(began)
	show(r.table(*resp.version.Load(), n))
	r.report(b)
}

// hubStackResults are the numbers of one run.
type hubStackResults struct {
	direct       directResult
	remote, null hubResult
	scale        *scaleResult
	took         time.Duration
}

// directResult is the spawns made straight at spawnerd.
type directResult struct {
	allReady    time.Duration
	spawnerdCPU time.Duration
}

// hubResult is one spawner class in the hub: its spawns, then its polls.
type hubResult struct {
	kind                     string
	allReady                 time.Duration
	hubCPU, proxyCPU         time.Duration // the spawn phase
	spawnerdCPU              time.Duration
	answered201, answered202 int
	polls                    float64 // in the poll window
	pollWall                 time.Duration
	pollHubCPU, pollAPICPU   time.Duration
}

func (h hubResult) cpuPerSpawn(n int) time.Duration { return h.hubCPU / time.Duration(n) }

func (h hubResult) cpuPerPoll() time.Duration {
	return time.Duration(float64(h.pollHubCPU) / max(h.polls, 1))
}

// scaleResult is the hub at scale servers with poll_interval 30 s.
type scaleResult struct {
	servers               int
	allReady              time.Duration
	spawnHub              time.Duration // the hub's CPU while spawning them
	polls                 float64
	wall                  time.Duration
	hub, api, proxy, kube time.Duration // CPU in the window
	hubRSS                int64         // bytes, at the window's end
}

func (s *scaleResult) pollRate() float64 { return s.polls / s.wall.Seconds() }

// share is d over the window as a share of one CPU.
func (s *scaleResult) share(d time.Duration) float64 { return d.Seconds() / s.wall.Seconds() }

// responder stands for every notebook server of the benchmark (see
// BenchmarkHubStack): it answers GET /user/{name}/... as jupyter-server
// answers its root, and records for which users it was asked.
type responder struct {
	*httptest.Server
	port    int
	version atomic.Pointer[string] // the hub's, sent back as a notebook server does
	mu      sync.Mutex
	checked map[string]bool
}

func newResponder(b *testing.B) *responder {
	r := &responder{checked: map[string]bool{}}
	r.Server = httptest.NewServer(r)
	b.Cleanup(r.Close)
	u, err := url.Parse(r.URL)
	if err != nil {
		b.Fatal(err)
	}
	if r.port, err = strconv.Atoi(u.Port()); err != nil {
		b.Fatal(err)
	}
	return r
}

func (r *responder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	rest, ok := strings.CutPrefix(req.URL.Path, "/user/")
	user, _, _ := strings.Cut(rest, "/")
	if v := r.version.Load(); v != nil {
		w.Header().Set("X-JupyterHub-Version", *v)
	}
	if !ok || user == "" {
		http.NotFound(w, req)
		return
	}
	r.mu.Lock()
	r.checked[user] = true
	r.mu.Unlock()
	http.Redirect(w, req, "/user/"+user+"/lab", http.StatusFound)
}

// count is how many of users the hub checked at the responder.
func (r *responder) count(users []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, u := range users {
		if r.checked[u] {
			n++
		}
	}
	return n
}

// startStackSpawnerd starts a spawnerd on its own namespace whose servers'
// URLs are the responder's; args and extra are its flags and environment.
func startStackSpawnerd(b *testing.B, resp *responder, args, extra []string) (*harness.Spawnerd, string) {
	b.Helper()
	ns := env.Namespace(b)
	api := env.StartSpawnerd(b, bin, harness.SpawnerdOptions{
		Config: fmt.Sprintf(configTemplate, ns) + fmt.Sprintf(hubStackConfig, resp.port),
		Args:   args, Env: extra,
	})
	return api, ns
}

// removeStack stops what a phase started (the hub first, so that it
// forgets nothing while the pods go) and deletes the pods, so that the
// next phase starts on an empty cluster.
func removeStack(b *testing.B, ns string, procs ...interface{ Stop() }) {
	b.Helper()
	for _, p := range procs {
		if p != nil {
			p.Stop()
		}
	}
	if ns != "" {
		// Error, not Fatal: this runs deferred, also while a failure unwinds.
		if err := deletePods(context.Background(), env.Client, ns); err != nil {
			b.Error(err)
		}
	}
}

// directPhase starts n servers straight at spawnerd.
func directPhase(b *testing.B, resp *responder, n int) directResult {
	b.Helper()
	ctx := b.Context()
	api, ns := startStackSpawnerd(b, resp, nil, nil)
	defer removeStack(b, ns, api)
	m := stackMeter(nil, nil, api)
	show(m.settle(ctx, settleWait))
	us := users("d", n)
	c, err := apiclient.New(api.URL, apiclient.User{}, apiclient.SharedSecret(api.Secret), apiclient.WithHTTPClient(&http.Client{
		Transport: &http.Transport{MaxIdleConns: hubClients, MaxIdleConnsPerHost: hubClients, IdleConnTimeout: time.Minute},
		Timeout:   time.Minute,
	}))
	if err != nil {
		b.Fatal(err)
	}
	ready := make([]time.Time, n)
	cpu0 := m.sample()
	t0 := time.Now()
	b.StartTimer()
	err = parallel(ctx, n, hubClients, func(ctx context.Context, i int) error {
		u := us[i]
		cu := c.As(apiclient.User{Name: u})
		if _, err := cu.Start(ctx, u, "", startBody(u)); err != nil {
			return fmt.Errorf("start %s: %w", u, err)
		}
		err := cu.FollowProgress(ctx, u, "", func(e lifecycle.Event) error {
			switch {
			case e.Failed:
				return fmt.Errorf("spawn of %s failed: %s", u, e.Message)
			case e.Ready:
				ready[i] = time.Now()
			}
			return nil
		})
		if err == nil && ready[i].IsZero() {
			err = errors.New("the progress stream ended without a ready event")
		}
		if err != nil {
			return fmt.Errorf("progress of %s: %w", u, err)
		}
		return nil
	})
	b.StopTimer()
	cpu1 := m.sample()
	if err != nil {
		b.Fatal(err)
	}
	d := directResult{allReady: latest(ready).Sub(t0), spawnerdCPU: cpu1.procs["spawnerd"] - cpu0.procs["spawnerd"]}
	show(m.report(fmt.Sprintf("CPU: %d servers started straight at spawnerd, all ready in %s", n, secs(d.allReady)), cpu0, cpu1))
	return d
}

// hubStack is a proxy, a hub and, for RemoteKubeSpawner, a spawnerd.
type hubStack struct {
	kind  string
	ns    string
	proxy *harness.Proxy
	api   *harness.Spawnerd
	hub   *harness.Hub
	hc    *hubClient
}

// startHubStack starts a stack whose hub may have servers servers and
// polls every poll seconds. The hub runs the demo's configuration at the
// log level INFO, as a production hub does.
func startHubStack(b *testing.B, resp *responder, kind string, servers, poll int) *hubStack {
	b.Helper()
	s := &hubStack{kind: kind, proxy: harness.StartProxy(b)}
	hubPort := harness.FreePort(b)
	hubToken := fmt.Sprintf("hub-token-%d", time.Now().UnixNano())
	opts := harness.HubOptions{
		Proxy: s.proxy, HubToken: hubToken, Port: hubPort,
		ExtraEnv: []string{
			"HUB_CONCURRENT_SPAWN_LIMIT=" + strconv.Itoa(servers),
			"HUB_ACTIVE_SERVER_LIMIT=" + strconv.Itoa(servers),
			"HUB_POLL_INTERVAL=" + strconv.Itoa(poll),
			"HUB_LOG_LEVEL=INFO",
		},
	}
	if kind == "RemoteKubeSpawner" {
		s.api, s.ns = startStackSpawnerd(b, resp,
			[]string{"--hub-api-url", fmt.Sprintf("http://127.0.0.1:%d/hub/api", hubPort), "--proxy-api-url", s.proxy.APIURL},
			[]string{"SPAWNERD_HUB_TOKEN=" + hubToken, "CONFIGPROXY_AUTH_TOKEN=" + s.proxy.Token})
		opts.Spawnerd, opts.Secret = s.api.URL, s.api.Secret
	} else {
		// Nothing answers at spawnerd's URL: the null spawner never calls it.
		opts.Spawnerd = "http://127.0.0.1:1"
		opts.ExtraEnv = append(opts.ExtraEnv,
			"HUB_SPAWNER_CLASS=nullspawner.NullSpawner",
			"PYTHONPATH="+filepath.Join(env.RepoDir, "e2e", "bench", "testdata"),
			"NULL_SPAWNER_URL="+resp.URL)
	}
	s.hub = env.StartHub(b, opts)
	s.hc = newHubClient(s.hub, hubClients)
	if resp.version.Load() == nil {
		v, err := s.hc.version(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		resp.version.Store(&v)
	}
	return s
}

func (s *hubStack) remove(b *testing.B) {
	b.Helper()
	var api interface{ Stop() }
	if s.api != nil {
		api = s.api
	}
	removeStack(b, s.ns, s.hub, api, s.proxy)
}

// hubPhase starts n servers through the hub with the given spawner class,
// then restarts the hub with poll_interval hubFastPoll and measures its polls.
func hubPhase(b *testing.B, resp *responder, kind string, n int) hubResult {
	b.Helper()
	ctx := b.Context()
	s := startHubStack(b, resp, kind, n, hubIdlePoll)
	defer s.remove(b)
	us := users(map[string]string{"RemoteKubeSpawner": "h", "null spawner": "n"}[kind], n)
	if err := s.hc.createUsers(ctx, us); err != nil {
		b.Fatal(err)
	}
	m := stackMeter(s.hub, s.proxy, s.api)
	show(m.settle(ctx, settleWait))
	cpu0 := m.sample()
	b.StartTimer()
	sp, err := s.spawn(ctx, resp, us, hubClients)
	b.StopTimer()
	cpu1 := m.sample()
	if err != nil {
		b.Fatalf("%s: %v\n%s", kind, err, tail(s.hub.Log(), 40))
	}
	h := hubResult{kind: kind, allReady: sp.allReady, answered201: sp.created, answered202: sp.accepted,
		hubCPU: cpu1.procs["jupyterhub"] - cpu0.procs["jupyterhub"], proxyCPU: cpu1.procs["configurable-http-proxy"] - cpu0.procs["configurable-http-proxy"],
		spawnerdCPU: cpu1.procs["spawnerd"] - cpu0.procs["spawnerd"]}
	show(m.report(fmt.Sprintf("CPU: %d servers started through the hub with %s, all ready in %s (the hub answered %d POSTs 201, %d 202; %d metric scrapes)",
		n, kind, secs(sp.allReady), sp.created, sp.accepted, sp.scrapes), cpu0, cpu1))
	if err := s.hc.checkReady(ctx, us); err != nil {
		b.Fatalf("%s: %v", kind, err)
	}

	// The poll interval is read when the hub starts: restart it on the same
	// database (HUB_CLEANUP_SERVERS=0), and it resumes every server.
	s.hub.RestartWith(b, "HUB_POLL_INTERVAL="+strconv.Itoa(hubFastPoll))
	count := s.pollCounter()
	c0, err := count(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// Two rounds of polls past the restart's own checks before measuring.
	if err := awaitValue(ctx, count, c0+float64(2*n), 250*time.Millisecond); err != nil {
		b.Fatalf("%s: the hub's polls never started: %v", kind, err)
	}
	m = stackMeter(s.hub, s.proxy, s.api)
	p0, err := count(ctx)
	if err != nil {
		b.Fatal(err)
	}
	cpu0 = m.sample()
	select {
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	case <-time.After(hubPollWindow): // the measurement window itself
	}
	p1, err := count(ctx)
	cpu1 = m.sample()
	if err != nil {
		b.Fatal(err)
	}
	h.polls, h.pollWall = p1-p0, cpu1.at.Sub(cpu0.at)
	h.pollHubCPU = cpu1.procs["jupyterhub"] - cpu0.procs["jupyterhub"]
	h.pollAPICPU = cpu1.procs["spawnerd"] - cpu0.procs["spawnerd"]
	show(m.report(fmt.Sprintf("CPU: the hub polling %d servers with %s every %d s: %.0f polls in %s (%.0f/s, asked %d/s)",
		n, kind, hubFastPoll, h.polls, secs(h.pollWall), h.polls/h.pollWall.Seconds(), n/hubFastPoll), cpu0, cpu1))
	return h
}

// scalePhase runs servers servers through the hub with poll_interval
// hubScalePoll and measures a window of steady polling once all are ready.
func scalePhase(b *testing.B, resp *responder, servers int) *scaleResult {
	b.Helper()
	ctx := b.Context()
	addScaleNodes(b, servers)
	s := startHubStack(b, resp, "RemoteKubeSpawner", servers, hubScalePoll)
	defer s.remove(b)
	us := users("s", servers)
	if err := s.hc.createUsers(ctx, us); err != nil {
		b.Fatal(err)
	}
	m := stackMeter(s.hub, s.proxy, s.api)
	show(m.settle(ctx, settleWait))
	cpu0 := m.sample()
	// In waves of the first phase's size, scalePosters POSTs at a time:
	// what is measured here is the hub holding 5,000 servers, not 5,000
	// spawns at once.
	var sp hubSpawn
	wave := 0
	for chunk := range slices.Chunk(us, max(*hubStackServers, 1)) {
		wave++
		w, err := s.spawn(ctx, resp, chunk, scalePosters)
		if err != nil {
			b.Fatalf("at scale, wave %d: %v\n%s", wave, err, tail(s.hub.Log(), 40))
		}
		sp.allReady += w.allReady
	}
	cpu1 := m.sample()
	spawnHub := cpu1.procs["jupyterhub"] - cpu0.procs["jupyterhub"]
	show(m.report(fmt.Sprintf("CPU: %d servers started through the hub (RemoteKubeSpawner, poll_interval %d s) in waves of %d, all ready in %s",
		servers, hubScalePoll, *hubStackServers, secs(sp.allReady)), cpu0, cpu1))

	count := s.pollCounter()
	p0, err := count(ctx)
	if err != nil {
		b.Fatal(err)
	}
	cpu0 = m.sample()
	b.StartTimer()
	select {
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	case <-time.After(hubScaleWindow): // the measurement window itself
	}
	b.StopTimer()
	p1, err := count(ctx)
	cpu1 = m.sample()
	if err != nil {
		b.Fatal(err)
	}
	r := &scaleResult{servers: servers, allReady: sp.allReady, spawnHub: spawnHub, polls: p1 - p0, wall: cpu1.at.Sub(cpu0.at), hubRSS: rss(s.hub.PID())}
	d := func(name string) time.Duration { return cpu1.procs[name] - cpu0.procs[name] }
	r.hub, r.api, r.proxy = d("jupyterhub"), d("spawnerd"), d("configurable-http-proxy")
	for _, name := range m.names {
		if !slices.Contains([]string{"jupyterhub", "spawnerd", "configurable-http-proxy", benchProcess}, name) {
			r.kube += d(name)
		}
	}
	show(m.report(fmt.Sprintf("CPU: the hub polling %d servers every %d s: %.0f polls in %s (%.1f/s, expected %.1f/s)",
		servers, hubScalePoll, r.polls, secs(r.wall), r.pollRate(), float64(servers)/hubScalePoll), cpu0, cpu1))
	if err := s.hc.checkReady(ctx, us); err != nil {
		b.Fatalf("at scale: %v", err)
	}
	return r
}

// addScaleNodes registers kwok nodes with room for servers pods beside
// TestMain's (each holds 256 of the template's 0.5-CPU pods), and removes
// them when the benchmark ends.
func addScaleNodes(b *testing.B, servers int) {
	b.Helper()
	cfg := devcluster.NodeConfig{NodeSets: []devcluster.NodeSet{{Name: "hubstack", Count: servers/256 + 1, CPU: "128", Memory: "512Gi", Pods: 256}}}
	addNodes(b, cfg.Nodes())
}

// stackMeter is a cpuMeter of the dev cluster and this process, with the
// given stack's processes (nil ones left out). The hub has no child
// processes (the harness starts the proxy); any it had would count as its.
func stackMeter(hub *harness.Hub, proxy *harness.Proxy, api *harness.Spawnerd) *cpuMeter {
	m := newCPUMeter(env.BinDir)
	if hub != nil {
		m.pids["jupyterhub"] = append([]int{hub.PID()}, descendantsOf(hub.PID())...)
	}
	if proxy != nil {
		m.pids["configurable-http-proxy"] = []int{proxy.PID()}
	}
	if api != nil {
		m.pids["spawnerd"] = []int{api.PID()}
	}
	m.names = slices.Sorted(maps.Keys(m.pids))
	return m
}

func descendantsOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if p, err := strconv.Atoi(e.Name()); err == nil && p != pid && descends(p, pid) {
			out = append(out, p)
		}
	}
	return out
}

// rss is a process's resident memory (VmRSS of /proc/PID/status).
func rss(pid int) int64 {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// hubSpawn is one batch of starts through the hub.
type hubSpawn struct {
	allReady                   time.Duration
	created, accepted, scrapes int
}

// spawn posts every user's start to the hub from hubClients clients and
// returns once the hub has made every server ready: started, answering at
// its URL, routed (the hub's own count of routes added after a spawn,
// jupyterhub_proxy_add_duration_seconds_count). The hub's metrics are read
// rarely until the responder has been checked for every user, then often:
// the reads are hub CPU too.
func (s *hubStack) spawn(ctx context.Context, resp *responder, us []string, clients int) (hubSpawn, error) {
	const routed, failed = `jupyterhub_proxy_add_duration_seconds_count{status="success"}`, `jupyterhub_server_spawn_duration_seconds_count{status="failure"}`
	var r hubSpawn
	base, err := s.hc.metrics(ctx)
	if err != nil {
		return r, err
	}
	ctx, cancel := context.WithTimeout(ctx, hubStackWait)
	defer cancel()
	var created, accepted atomic.Int64
	posted := make(chan error, 1)
	t0 := time.Now()
	go func() {
		posted <- parallel(ctx, len(us), clients, func(ctx context.Context, i int) error {
			code, body, err := s.hc.do(ctx, http.MethodPost, harness.ServerAPIPath(us[i], ""), nil)
			switch {
			case err != nil:
				return fmt.Errorf("hub start %s: %w", us[i], err)
			case code == http.StatusCreated:
				created.Add(1)
			case code == http.StatusAccepted:
				accepted.Add(1)
			default:
				return fmt.Errorf("hub start %s: status %d: %s", us[i], code, body)
			}
			return nil
		})
	}()
	var (
		lastScrape time.Time
		postErr    error
		postsDone  bool
	)
	err = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if !postsDone {
			select {
			case postErr = <-posted:
				postsDone = true
				if postErr != nil {
					return false, postErr
				}
			default:
			}
		}
		every := 2 * time.Second
		if resp.count(us) == len(us) {
			every = 50 * time.Millisecond
		}
		if time.Since(lastScrape) < every {
			return false, nil
		}
		lastScrape = time.Now()
		now, err := s.hc.metrics(ctx)
		r.scrapes++
		if err != nil {
			return false, err
		}
		if f := delta(base, now, failed); f > 0 {
			return false, fmt.Errorf("the hub reports %.0f failed spawns", f)
		}
		return delta(base, now, routed) >= float64(len(us)), nil
	})
	r.allReady = time.Since(t0)
	if err != nil {
		return r, fmt.Errorf("%d of %d servers checked at the responder: %w", resp.count(us), len(us), err)
	}
	if !postsDone {
		postErr = <-posted
	}
	r.created, r.accepted = int(created.Load()), int(accepted.Load())
	if postErr != nil {
		return r, postErr
	}
	if c := resp.count(us); c != len(us) {
		return r, fmt.Errorf("the hub checked %d of %d servers at their URL", c, len(us))
	}
	return r, nil
}

// pollCounter counts the hub's polls: for RemoteKubeSpawner, spawnerd's
// answers to the status route plus the servers it polled in batches; the
// class's own counter for the null spawner.
func (s *hubStack) pollCounter() func(context.Context) (float64, error) {
	if s.api != nil {
		return func(ctx context.Context) (float64, error) {
			m, err := scrape(ctx, s.api.URL)
			return m["spawner_http_request_duration_seconds_count"+pollRoute] + m["spawner_batched_polls_total"], err
		}
	}
	return func(ctx context.Context) (float64, error) {
		m, err := s.hc.metrics(ctx)
		return m["nullspawner_polls_total"], err
	}
}

// awaitValue waits until count reaches want.
func awaitValue(ctx context.Context, count func(context.Context) (float64, error), want float64, every time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, hubStackWait)
	defer cancel()
	var last float64
	err := wait.PollUntilContextCancel(ctx, every, true, func(ctx context.Context) (bool, error) {
		v, err := count(ctx)
		last = v
		return err == nil && v >= want, nil
	})
	if err != nil {
		return fmt.Errorf("%.0f of %.0f: %w", last, want, err)
	}
	return nil
}

// hubClient calls the hub's REST API with the admin's token over
// kept-alive connections, from many goroutines.
type hubClient struct {
	api, token string
	http       *http.Client
}

func newHubClient(h *harness.Hub, conns int) *hubClient {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute}
	return &hubClient{api: h.APIURL, token: h.Token, http: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
}

func (c *hubClient) do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.api+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "token "+c.token)
	// Ask for the paginated form of lists (JupyterHub 2.0+).
	req.Header.Set("Accept", "application/jupyterhub-pagination+json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

func (c *hubClient) version(ctx context.Context) (string, error) {
	code, body, err := c.do(ctx, http.MethodGet, "/", nil)
	var v struct{ Version string }
	if err == nil && code == http.StatusOK {
		err = json.Unmarshal(body, &v)
	}
	if err != nil || v.Version == "" {
		return "", fmt.Errorf("the hub's version: status %d, %q: %v", code, body, err)
	}
	return v.Version, nil
}

// createUsers creates the users through the API, a thousand a request.
func (c *hubClient) createUsers(ctx context.Context, us []string) error {
	for batch := range slices.Chunk(us, 1000) {
		code, body, err := c.do(ctx, http.MethodPost, "/users", map[string]any{"usernames": batch})
		if err != nil || code != http.StatusCreated {
			return fmt.Errorf("creating %d users: status %d, %.300s: %v", len(batch), code, body, err)
		}
	}
	return nil
}

// checkReady reads every user from the hub's API, a page at a time, and
// fails unless each of us has a ready default server.
func (c *hubClient) checkReady(ctx context.Context, us []string) error {
	want := map[string]bool{}
	for _, u := range us {
		want[u] = true
	}
	ready := 0
	for offset := 0; ; offset += 200 {
		code, body, err := c.do(ctx, http.MethodGet, fmt.Sprintf("/users?state=ready&offset=%d&limit=200", offset), nil)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("listing the hub's users: status %d, %.300s: %v", code, body, err)
		}
		var page struct {
			Items []struct {
				Name    string
				Servers map[string]struct{ Ready bool }
			}
			Pagination struct{ Next *struct{ Offset int } } `json:"_pagination"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("listing the hub's users: %w", err)
		}
		for _, u := range page.Items {
			if want[u.Name] && u.Servers[""].Ready {
				ready++
			}
		}
		if page.Pagination.Next == nil {
			break
		}
	}
	if ready != len(us) {
		return fmt.Errorf("the hub lists %d of %d servers ready", ready, len(us))
	}
	return nil
}

// metrics reads the hub's Prometheus metrics (/hub/metrics, which needs
// the read:metrics scope the admin has).
func (c *hubClient) metrics(ctx context.Context) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.api, "/api")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "token "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the hub's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the hub's metrics: status %d", resp.StatusCode)
	}
	m := metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if line == "" || line[0] == '#' || i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}

// tail is the last n lines of a log.
func tail(log string, n int) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// kubeSpawnerNote says whether KubeSpawner could be measured here.
func kubeSpawnerNote() string {
	if err := exec.Command("/usr/bin/python3", "-c", "import kubespawner").Run(); err == nil {
		return "KubeSpawner is installed but not measured by this benchmark"
	}
	return "KubeSpawner is not installed (no Debian package); not measured"
}

func (r *hubStackResults) table(hubVersion string, n int) string {
	ms1 := func(d time.Duration) string { return strconv.FormatFloat(ms(d), 'f', 1, 64) + " ms" }
	us0 := func(d time.Duration) string { return micros(d) }
	pct := func(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + " %" }
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "NO"
	}
	rem, nul := r.remote, r.null
	rows := [][]string{
		{"metric", "value", "target / comparison", "met"},
		{fmt.Sprintf("%d servers through the hub (RemoteKubeSpawner): time to all ready", n), secs(rem.allReady),
			fmt.Sprintf("straight at spawnerd: %s", secs(r.direct.allReady)), "-"},
		{"  the hub's time over spawnerd's alone", strconv.FormatFloat(rem.allReady.Seconds()/r.direct.allReady.Seconds(), 'f', 2, 64) + "×",
			fmt.Sprintf("null spawner in the same hub: %s (%.2f×)", secs(nul.allReady), nul.allReady.Seconds()/r.direct.allReady.Seconds()), "-"},
		{"hub CPU per spawn, RemoteKubeSpawner", ms1(rem.cpuPerSpawn(n)), "null spawner (floor): " + ms1(nul.cpuPerSpawn(n)), "-"},
		{"  the class's own cost per spawn", ms1(rem.cpuPerSpawn(n) - nul.cpuPerSpawn(n)),
			"spawnerd's CPU per spawn: " + ms1(rem.spawnerdCPU/time.Duration(n)), "-"},
		{"proxy CPU per spawn, RemoteKubeSpawner", ms1(rem.proxyCPU / time.Duration(n)), "null spawner: " + ms1(nul.proxyCPU/time.Duration(n)), "-"},
		{fmt.Sprintf("hub CPU per poll, RemoteKubeSpawner (poll_interval %d s)", hubFastPoll), us0(rem.cpuPerPoll()), "null spawner (floor): " + us0(nul.cpuPerPoll()), "-"},
		{"  the class's own cost per poll", us0(rem.cpuPerPoll() - nul.cpuPerPoll()),
			"spawnerd's CPU per poll: " + us0(time.Duration(float64(rem.pollAPICPU)/max(rem.polls, 1))), "-"},
		{fmt.Sprintf("polls/s made at %d servers, poll_interval %d s", n, hubFastPoll), strconv.FormatFloat(rem.polls/rem.pollWall.Seconds(), 'f', 0, 64),
			fmt.Sprintf("asked %d/s; null spawner %.0f/s", n/hubFastPoll, nul.polls/nul.pollWall.Seconds()),
			yes(rem.polls/rem.pollWall.Seconds() >= 0.95*float64(n)/hubFastPoll)},
		{"  hub CPU while polling, RemoteKubeSpawner", pct(rem.pollHubCPU.Seconds()/rem.pollWall.Seconds()) + " of one CPU",
			"null spawner: " + pct(nul.pollHubCPU.Seconds()/nul.pollWall.Seconds()), "-"},
	}
	if s := r.scale; s != nil {
		want := float64(s.servers) / hubScalePoll
		perPoll := time.Duration(float64(s.hub) / max(s.polls, 1))
		rows = append(rows,
			[]string{fmt.Sprintf("%d servers through the hub: time to all ready", s.servers), secs(s.allReady),
				"hub CPU per spawn, with the polls of those already running: " + ms1(s.spawnHub/time.Duration(s.servers)), "-"},
			[]string{fmt.Sprintf("polls/s the hub made at %d servers, poll_interval %d s", s.servers, hubScalePoll), strconv.FormatFloat(s.pollRate(), 'f', 1, 64),
				fmt.Sprintf("≥ 95 %% of %d/%d = %.1f/s", s.servers, hubScalePoll, want), yes(s.pollRate() >= 0.95*want)},
			[]string{"  hub CPU while polling", pct(s.share(s.hub)) + " of one CPU",
				fmt.Sprintf("KubeSpawner (published, kubespawner#423): %.0f %% of the hub's CPU in its pod watcher alone at %d users", 100*kubeSpawnerWatcher, kubeSpawnerUsers), "-"},
			[]string{"  hub CPU per poll", us0(perPoll), "-", "-"},
			[]string{"  spawnerd CPU while answering", pct(s.share(s.api)) + " of one CPU", "proxy: " + pct(s.share(s.proxy)) + ", dev cluster: " + pct(s.share(s.kube)), "-"},
			[]string{"  hub memory (RSS)", strconv.FormatFloat(float64(s.hubRSS)/(1<<20), 'f', 0, 64) + " MiB", "-", "-"},
		)
		if s.servers < kubeSpawnerTarget {
			rows = append(rows, []string{fmt.Sprintf("  extrapolated to %d servers (× measured CPU per poll)", kubeSpawnerTarget),
				pct(float64(kubeSpawnerTarget)/hubScalePoll*perPoll.Seconds()) + " of one CPU", "not measured: an estimate", "-"})
		}
	}
	rows = append(rows,
		[]string{"KubeSpawner side by side", "-", kubeSpawnerNote() + "; its published figures are the comparison", "-"},
		[]string{"benchmark run time", secs(r.took), "< 15 min", yes(r.took < 15*time.Minute)})
	return table(fmt.Sprintf("Hub stack: JupyterHub %s, configurable-http-proxy, spawnerd, dev cluster (kwok); every server's URL is the benchmark's responder", hubVersion), rows)
}

func (r *hubStackResults) report(b *testing.B) {
	n := float64(*hubStackServers)
	b.ReportMetric(r.remote.allReady.Seconds(), "hub-ready-s")
	b.ReportMetric(r.direct.allReady.Seconds(), "direct-ready-s")
	b.ReportMetric(r.remote.allReady.Seconds()/r.direct.allReady.Seconds(), "hub/direct-x")
	b.ReportMetric(ms(r.remote.hubCPU)/n, "hub-cpu-ms/spawn")
	b.ReportMetric(ms(r.null.hubCPU)/n, "null-cpu-ms/spawn")
	b.ReportMetric(float64(r.remote.cpuPerPoll())/float64(time.Microsecond), "hub-cpu-µs/poll")
	b.ReportMetric(float64(r.null.cpuPerPoll())/float64(time.Microsecond), "null-cpu-µs/poll")
	if s := r.scale; s != nil {
		b.ReportMetric(s.pollRate(), "polls/s")
		b.ReportMetric(100*s.share(s.hub), "hub-cpu-%")
	}
}
