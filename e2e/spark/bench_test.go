package spark_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/e2e/harness"
)

const (
	// stormEnvs course environments are started at once by stormClients,
	// as a lecture's students do through the hub.
	stormEnvs    = 200
	stormClients = 64
	// statusPollers poll the servers until each runs.
	statusPollers = 8
	// podsPerEnv are the notebook, the master and benchConfig's 2 workers.
	podsPerEnv = 4
	// stormTimeout bounds every wait of the storm.
	stormTimeout = 5 * time.Minute
)

// benchConfig gives each account its own namespace (created beforehand
// with its quota, as the platform does) and a small Spark cluster.
const benchConfig = `
kubespawner:
  enable_user_namespaces: true
  user_namespace_template: "{username}"
  cmd: [jupyterhub-singleuser]
  start_timeout: 600
  course: DSC102
  delete_grace_period: 1
  cpu_guarantee: 0.1
  cpu_limit: 1
  mem_guarantee: 256M
  mem_limit: 512M
  spark:
    master: {cpu: 0.25, memory: 512M}
    worker: {cpu: 0.25, memory: 1G}
    workers: 2
`

// BenchmarkSparkStorm starts 200 Spark course environments at once, each
// in its own namespace under a ResourceQuota, and reports the time until
// every one is ready (notebook running, master reachable through its
// Service), spawnerd's Kubernetes API requests per environment, and the
// same for stopping them all.
//
//	go test -run '^$' -bench . -timeout 30m ./e2e/spark/
func BenchmarkSparkStorm(b *testing.B) {
	// One storm takes far longer than -benchtime's default second, so the
	// benchmark runs once unless asked for more.
	for range b.N {
		r := runStorm(b)
		b.ReportMetric(r.allReady.Seconds(), "s-all-ready")
		b.ReportMetric(r.podsRunning.Seconds(), "s-pods-running")
		b.ReportMetric(r.p50.Seconds(), "s-p50-ready")
		b.ReportMetric(r.p95.Seconds(), "s-p95-ready")
		b.ReportMetric(harness.Writes(r.start)/stormEnvs, "writes/env")
		b.ReportMetric(harness.Reads(r.start)/stormEnvs, "reads/env")
		b.ReportMetric(r.allStopped.Seconds(), "s-all-stopped")
		b.ReportMetric(harness.Writes(r.stop)/stormEnvs, "stop-writes/env")
		fmt.Printf("spark storm: %d environments (1 notebook, 1 master, 2 workers each)\n", stormEnvs)
		fmt.Printf("  all ready after %s (per environment p50 %s, p95 %s, max %s)\n", r.allReady.Round(time.Millisecond),
			r.p50.Round(time.Millisecond), r.p95.Round(time.Millisecond), r.max.Round(time.Millisecond))
		fmt.Printf("  %d of the %d pods ran by then; the last ran after %s (the control plane's own pace on this machine)\n",
			r.podsAtReady, stormEnvs*podsPerEnv, r.podsRunning.Round(time.Millisecond))
		fmt.Printf("  spawnerd's API requests per environment while starting: %s\n", perEnv(r.start))
		fmt.Printf("  stops answered after %s (%d of them 202, still going), all namespaces empty after %s; requests per environment: %s\n",
			r.answered.Round(time.Millisecond), r.stillGoing, r.allStopped.Round(time.Millisecond), perEnv(r.stop))
	}
}

type stormResult struct {
	allReady, p50, p95, max time.Duration
	// podsRunning is when the last of the storm's pods ran, as seen by
	// a watch of the benchmark's own: the control plane's part;
	// podsAtReady ran when the last environment was ready.
	podsRunning time.Duration
	podsAtReady int
	// answered is when the last stop was answered, allStopped when the
	// last namespace was empty; stillGoing stops answered 202.
	answered, allStopped time.Duration
	stillGoing           int
	start, stop          map[string]float64
}

func runStorm(b *testing.B) stormResult {
	ctx := b.Context()
	prefix := "sb" + rand.String(4) + "-"
	users := make([]string, stormEnvs)
	for i := range users {
		users[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	b.StopTimer()
	makeNamespaces(b, users)
	api := env.StartSpawnerd(b, bin, harness.SpawnerdOptions{Config: benchConfig})
	defer api.Stop()
	c := newBenchClient(b, api)
	b.StartTimer()

	pods := watchPods(b, "dsmlp/course=DSC102")
	before := apiRequests(b, api.URL)
	sent := make([]time.Time, len(users))
	ready := make([]time.Time, len(users))
	t0 := time.Now()
	parallel(b, len(users), stormClients, func(i int) error {
		sent[i] = time.Now()
		if code, err := c.do(ctx, http.MethodPost, users[i], startBody(users[i], nil), nil); err != nil || (code != http.StatusAccepted && code != http.StatusOK) {
			return fmt.Errorf("start %s: %d %v", users[i], code, err)
		}
		return nil
	})
	// Pollers go round the servers that are not running yet, as the hubs'
	// progress pages would.
	parallel(b, statusPollers, statusPollers, func(k int) error {
		return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, stormTimeout, true, func(context.Context) (bool, error) {
			done := true
			for i := k; i < len(users); i += statusPollers {
				if !ready[i].IsZero() {
					continue
				}
				var s server
				if _, err := c.do(ctx, http.MethodGet, users[i], nil, &s); err != nil {
					return false, err
				}
				switch s.Status {
				case "running":
					ready[i] = time.Now()
				case "stopped", "absent":
					return false, fmt.Errorf("%s is %s: %s", users[i], s.Status, s.Message)
				default:
					done = false
				}
			}
			return done, nil
		})
	})
	var r stormResult
	r.allReady = latest(ready).Sub(t0)
	r.podsAtReady = pods.count()
	// Workers need not be ready for their environment to be; wait for
	// every pod, to see what the control plane itself takes.
	allPods := len(users) * podsPerEnv
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, stormTimeout, true, func(context.Context) (bool, error) {
		return pods.count() == allPods, nil
	}); err != nil {
		b.Fatalf("only %d of %d pods ran", pods.count(), allPods)
	}
	r.podsRunning = pods.lastRunning().Sub(t0)
	lat := make([]time.Duration, len(users))
	for i := range users {
		lat[i] = ready[i].Sub(sent[i])
	}
	slices.Sort(lat)
	r.p50, r.p95, r.max = lat[len(lat)/2], lat[len(lat)*95/100], lat[len(lat)-1]
	after := apiRequests(b, api.URL)
	r.start = deltas(before, after)

	t1 := time.Now()
	var mu sync.Mutex
	parallel(b, len(users), stormClients, func(i int) error {
		code, err := c.do(ctx, http.MethodDelete, users[i], nil, nil)
		switch {
		case err != nil:
			return fmt.Errorf("stop %s: %w", users[i], err)
		case code == http.StatusAccepted:
			// Still going after spawnerd's --stop-wait: allowed, and
			// waited for below.
			mu.Lock()
			r.stillGoing++
			mu.Unlock()
		case code != http.StatusNoContent:
			return fmt.Errorf("stop %s: %d, want 204 or 202", users[i], code)
		}
		return nil
	})
	r.answered = time.Since(t1)
	parallel(b, len(users), 16, func(i int) error {
		var left []string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, stormTimeout, true, func(context.Context) (bool, error) {
			left = leftovers(b, users[i])
			return len(left) == 0, nil
		})
		if err != nil {
			return fmt.Errorf("after stop namespace %s still holds %s", users[i], strings.Join(left, ", "))
		}
		return nil
	})
	r.allStopped = time.Since(t1)
	r.stop = deltas(after, apiRequests(b, api.URL))
	return r
}

// podClock records when a watch of the benchmark's own first saw each pod
// running and ready.
type podClock struct {
	mu      sync.Mutex
	running map[string]time.Time
}

func watchPods(b *testing.B, selector string) *podClock {
	c := &podClock{running: map[string]time.Time{}}
	factory := informers.NewSharedInformerFactoryWithOptions(env.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := factory.Core().V1().Pods().Informer()
	seen := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && harness.PodRunning(p) {
			c.mu.Lock()
			if _, ok := c.running[p.Namespace+"/"+p.Name]; !ok {
				c.running[p.Namespace+"/"+p.Name] = time.Now()
			}
			c.mu.Unlock()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	factory.Start(ctx.Done())
	b.Cleanup(func() { cancel(); factory.Shutdown() })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		b.Fatal("the benchmark's pod watch never synced")
	}
	return c
}

func (c *podClock) lastRunning() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var l time.Time
	for _, t := range c.running {
		if t.After(l) {
			l = t
		}
	}
	return l
}

func (c *podClock) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.running)
}

// benchClient calls spawnerd from many goroutines, returning errors
// rather than failing the benchmark from them.
type benchClient struct {
	api *apiclient.Client
}

func newBenchClient(b *testing.B, api *harness.Spawnerd) *benchClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = stormClients
	c, err := apiclient.New(api.URL, apiclient.User{}, apiclient.SharedSecret(api.Secret),
		apiclient.WithHTTPClient(&http.Client{Transport: tr, Timeout: time.Minute}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(tr.CloseIdleConnections)
	return &benchClient{api: c}
}

// do sends a request for user's default server, signed for user, and
// decodes the answer.
func (c *benchClient) do(ctx context.Context, method, user string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(data)
	}
	code, data, err := c.api.Do(ctx, method, harness.ServerPath(user, ""), rd, apiclient.User{Name: user})
	if err != nil {
		return 0, err
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return code, fmt.Errorf("decoding %q: %w", data, err)
		}
	}
	return code, nil
}

// makeNamespaces creates each user's namespace with the quota that covers
// everything it runs, and waits until pods can be created there.
func makeNamespaces(b *testing.B, users []string) {
	ctx := b.Context()
	hard := corev1.ResourceList{
		"requests.cpu": resource.MustParse("2"), "limits.cpu": resource.MustParse("4"),
		"requests.memory": resource.MustParse("8Gi"), "limits.memory": resource.MustParse("8Gi"), "pods": resource.MustParse("10"),
	}
	parallel(b, len(users), 16, func(i int) error {
		ns := users[i]
		if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "allowance", Namespace: ns}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
		if _, err := env.Client.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{}); err != nil {
			return err
		}
		return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, stormTimeout, true, func(ctx context.Context) (bool, error) {
			if _, err := env.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return false, nil
			}
			got, err := env.Client.CoreV1().ResourceQuotas(ns).Get(ctx, "allowance", metav1.GetOptions{})
			return err == nil && len(got.Status.Hard) > 0, nil
		})
	})
	b.Cleanup(func() {
		for _, ns := range users {
			_ = env.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		}
	})
}

// parallel runs fn for 0..n-1 from workers goroutines and fails b on the
// first error.
func parallel(b *testing.B, n, workers int, fn func(i int) error) {
	b.Helper()
	next := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

func latest(ts []time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

func deltas(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// perEnv writes each method's count per environment, e.g. "POST 6.00, GET 0.01".
func perEnv(req map[string]float64) string {
	methods := make([]string, 0, len(req))
	for m := range req {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	var parts []string
	for _, m := range methods {
		parts = append(parts, fmt.Sprintf("%s %.2f", m, req[m]/stormEnvs))
	}
	return strings.Join(parts, ", ")
}
