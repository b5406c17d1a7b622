// Package bench_test measures the spawnerd binary against the dev cluster:
// a spawn storm beside a bare client-go loop creating the same pods, the
// poll over HTTP with 10,000 servers in the cache, and how soon a stopped
// server is reported to the hub and its pod removed.
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 30m ./e2e/bench/
//
// go test runs the benchmarks in the order of their files' names. The two
// of tenthousand_test.go fill the API server with 10,000 pods and 40,000
// events (and 40 nodes). They come last, so that the storm and the stop
// reaction, which compare with a bare loop or the API server's own
// latency, do not run right after them: a storm that did found the API
// server using 16.7 s of CPU against 10.0-10.3 s in the storms after it,
// most of the difference in the API server's garbage collection.
//
// Each benchmark prints its numbers as tables and reports the headline ones
// with b.ReportMetric. Targets are printed beside the numbers, not enforced:
// a benchmark fails only when the service misbehaves.
package bench_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	// spawnTimeout bounds every wait for servers to run, stop or go.
	spawnTimeout = 5 * time.Minute
	// settleWait bounds the wait for the cluster to go quiet before a measurement.
	settleWait = time.Minute
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
	// The API server serves its profile: the storm compares its CPU with
	// and without spawnerd.
	code := harness.MainWith(m, &env, harness.ClusterOptions{Nodes: nodes, Profiling: true}, func(e *harness.Env) error {
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
	// BENCH_SPAWNERD_ENV adds NAME=value pairs to this spawnerd's
	// environment (GOMAXPROCS=1, say), to measure a setting without
	// changing the benchmark's own process.
	opts.Env = append(opts.Env, strings.Fields(os.Getenv("BENCH_SPAWNERD_ENV"))...)
	api := env.StartSpawnerd(b, bin, opts)
	clock, err := watchPods(b.Context(), ns)
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
