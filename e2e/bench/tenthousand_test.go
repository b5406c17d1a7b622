package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/kubeclient"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/recorder"
	"github.com/dsmlp/spawner/serverid"
	"github.com/dsmlp/spawner/spawner"
)

// The scale benchmarks: 10,000 servers' pods as spawnerd makes them, bound
// to kwok nodes of their own, each with the four events of its start.
const (
	scaleServers = 10_000
	// scaleGPUEvery: every tenth server is a GPU notebook the reservation
	// engine admitted (its toleration and annotations).
	scaleGPUEvery = 10
	// scaleStartEvents are the events of a pod's start (Scheduled,
	// Pulled, Created, Started): a pod started within the API server's
	// event TTL (an hour) has them, so 10,000 at once is the class-start
	// peak, the event cache's largest.
	scaleStartEvents = 4
	// scaleWorkers create and delete the objects at once.
	scaleWorkers = 48
	// scaleRestarts are the cold starts measured after the first.
	scaleRestarts = 3
	scaleTimeout  = 10 * time.Minute
	// The targets.
	scaleBytesTarget = 3072
	scaleReadyTarget = 5 * time.Second
)

// scaleConfig is a course's configuration: the CPU notebook with an image
// choice, and a GPU notebook.
const scaleConfig = configTemplate + `
  - display_name: GPU notebook
    slug: gpu
    kubespawner_override:
      gpu_class: a5000
      image: "quay.io/jupyter/pytorch-notebook:cuda12-2026-11-30"
      extra_resource_limits: {nvidia.com/gpu: "1"}
`

// scaleNodes hold the servers (40 × 256 pods) beside TestMain's nodes,
// which stay as the other benchmarks were measured on. The pods are bound
// to them directly: the scheduler's pace is not what is measured here.
func scaleNodes() []*corev1.Node {
	cfg := devcluster.NodeConfig{NodeSets: []devcluster.NodeSet{
		{Name: "scale", Count: 36, CPU: "128", Memory: "1Ti", Pods: 256},
		{Name: "scale-gpu", Count: 4, CPU: "128", Memory: "1Ti", Pods: 256, GPUs: 256, GPUClass: "a5000"},
	}}
	return cfg.Nodes()
}

// scaleFixture is a namespace of scaleServers running notebook pods.
type scaleFixture struct {
	ns     string
	cfg    *spawner.Config
	client kubernetes.Interface // not rate-limited
	users  []string
	pods   []*corev1.Pod // as the API server answered their creates
}

// newScaleFixture makes the namespace and the nodes; it removes both, and
// every pod and event, when the benchmark ends.
func newScaleFixture(b *testing.B) *scaleFixture {
	b.Helper()
	ctx := b.Context()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst, cfg.UserAgent = 5000, 10000, "bench-scale"
	client, err := kubernetes.NewForConfig(kubeclient.Protobuf(cfg))
	if err != nil {
		b.Fatal(err)
	}
	f := &scaleFixture{ns: "scale-" + rand.String(6), client: client, users: make([]string, scaleServers)}
	for i := range f.users {
		f.users[i] = fmt.Sprintf("scale%05d", i)
	}
	if f.cfg, err = spawner.Parse(fmt.Appendf(nil, scaleConfig, f.ns)); err != nil {
		b.Fatal(err)
	}
	nodes := scaleNodes()
	b.Cleanup(func() {
		if err := f.teardown(context.Background(), nodes); err != nil {
			b.Error(err)
		}
	})
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := devcluster.RegisterNodes(ctx, client, nodes, time.Minute); err != nil {
		b.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(f.ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		b.Fatalf("the default service account of %s: %v", f.ns, err)
	}
	return f
}

// scalePod is user i's running notebook pod as spawnerd makes it:
// spawner.Build, then the identity lifecycle's markIdentity writes (who
// asked, the profile, user_options, the start deadline, the stop-report
// finalizer). A GPU pod also has what the engine's admission PATCH adds.
func (f *scaleFixture) scalePod(i int, nodes []*corev1.Node) (*corev1.Pod, error) {
	user := f.users[i]
	opts := map[string]any{"profile": "cpu", "image": "scipy"}
	gpu := i%scaleGPUEvery == scaleGPUEvery-1
	switch {
	case gpu:
		opts = map[string]any{"profile": "gpu"}
	case i%3 == 1:
		opts["image"] = "r"
	}
	objs, _, err := spawner.Build(f.cfg, spawner.Request{User: user, UserOptions: opts, Env: hubEnv(user)})
	if err != nil {
		return nil, fmt.Errorf("building the pod of %s: %w", user, err)
	}
	pod := objs.Pod
	now := time.Now()
	rawOpts, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	pod.Annotations[serverid.AnnotationRequestedBy] = serverid.RequestedBy("user", user, now)
	pod.Annotations[serverid.AnnotationProfile] = f.cfg.ProfileSlug(opts)
	pod.Annotations[serverid.AnnotationUserOptions] = string(rawOpts)
	pod.Annotations[serverid.AnnotationStartDeadline] = now.Add(10 * time.Minute).UTC().Format(time.RFC3339)
	pod.Finalizers = append(pod.Finalizers, serverid.FinalizerStopReport)
	// Nodes are CPU ones first, then 4 GPU ones (scaleNodes).
	cpuNodes, gpuNodes := nodes[:len(nodes)-4], nodes[len(nodes)-4:]
	pod.Spec.NodeName = cpuNodes[i%len(cpuNodes)].Name
	if gpu {
		pod.Spec.NodeName = gpuNodes[i%len(gpuNodes)].Name
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: devcluster.ReservationTaintKey,
			Operator: corev1.TolerationOpEqual, Value: "a5000", Effect: corev1.TaintEffectNoSchedule})
		utc := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }
		for k, v := range map[string]string{
			"booking-reference": fmt.Sprintf("GRX-%06d", 1000+i), "reservation-kind": "on-demand",
			"reservation-start": utc(now), "reservation-end": utc(now.Add(70 * time.Minute)),
			"reservation-gpu-count": "1", "gpu-class-name": "NVIDIA RTX A5000", "admitted-at": utc(now),
			"guaranteed-until": utc(now.Add(time.Hour)), "guarantee-status": "guaranteed",
			"pod-runtime-limit-seconds": "3600",
		} {
			pod.Annotations["galends/"+k] = v
		}
	}
	return pod, nil
}

// createPods creates every server's pod and waits until all run.
func (f *scaleFixture) createPods(ctx context.Context) error {
	nodes := scaleNodes()
	pods := make([]*corev1.Pod, scaleServers)
	for i := range pods {
		p, err := f.scalePod(i, nodes)
		if err != nil {
			return err
		}
		pods[i] = p
	}
	running, stop, err := scaleRunningCount(ctx, f.client, f.ns)
	if err != nil {
		return err
	}
	defer stop()
	f.pods = make([]*corev1.Pod, len(pods))
	err = parallel(ctx, len(pods), scaleWorkers, func(ctx context.Context, i int) error {
		p, err := f.client.CoreV1().Pods(f.ns).Create(ctx, pods[i], metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating pod %s: %w", pods[i].Name, err)
		}
		f.pods[i] = p
		return nil
	})
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, scaleTimeout, true, func(context.Context) (bool, error) {
		return running() == scaleServers, nil
	})
	if err != nil {
		return fmt.Errorf("only %d of %d pods running by the watch (the API server: %s): %w", running(), scaleServers, f.notRunning(context.WithoutCancel(ctx)), err)
	}
	return nil
}

// notRunning says, from a LIST, how many of the namespace's pods run and what
// the first that do not look like, to tell a lagging watch from kwok pods that
// never started.
func (f *scaleFixture) notRunning(ctx context.Context) string {
	list, err := f.client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	n, samples := 0, []string{}
	for i := range list.Items {
		p := &list.Items[i]
		if harness.PodRunning(p) {
			n++
			continue
		}
		if len(samples) < 3 {
			conds := []string{}
			for _, c := range p.Status.Conditions {
				conds = append(conds, fmt.Sprintf("%s=%s", c.Type, c.Status))
			}
			samples = append(samples, fmt.Sprintf("%s on %s: phase %q, podIPs %v, conditions %v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIPs, conds))
		}
	}
	return fmt.Sprintf("%d of %d running; %v", n, len(list.Items), samples)
}

// scaleRunningCount counts the running pods of ns from a watch that keeps
// only each pod's name and whether it runs.
func scaleRunningCount(ctx context.Context, client kubernetes.Interface, ns string) (count func() int, stop func(), err error) {
	ctx, stop = context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTransform(func(obj any) (any, error) {
			p, ok := obj.(*corev1.Pod)
			if !ok {
				return obj, nil
			}
			slim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
			if harness.PodRunning(p) {
				slim.Status.Phase = corev1.PodRunning
			}
			return slim, nil
		}))
	inf := factory.Core().V1().Pods().Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		stop()
		return nil, nil, fmt.Errorf("watching the pods of %s: %w", ns, ctx.Err())
	}
	return func() int {
		n := 0
		for _, obj := range inf.GetStore().List() {
			if obj.(*corev1.Pod).Status.Phase == corev1.PodRunning {
				n++
			}
		}
		return n
	}, stop, nil
}

// scaleEvents are the events of a pod's start as the scheduler and the
// kubelet write them.
func scaleEvents(pod *corev1.Pod) []*corev1.Event {
	at := metav1.Now()
	image := pod.Spec.Containers[0].Image
	ref := corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, APIVersion: "v1", ResourceVersion: pod.ResourceVersion}
	cref := ref
	cref.FieldPath = "spec.containers{notebook}"
	mk := func(n int, involved corev1.ObjectReference, reason, message, component, host string) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pod.Name, at.UnixNano()+int64(n)), Namespace: pod.Namespace},
			InvolvedObject: involved, Reason: reason, Message: message, Type: corev1.EventTypeNormal, Count: 1,
			FirstTimestamp: at, LastTimestamp: at, Source: corev1.EventSource{Component: component, Host: host},
			ReportingController: component, ReportingInstance: component + "-" + cmpOr(host, "scheduler"),
		}
	}
	return []*corev1.Event{
		mk(1, ref, "Scheduled", fmt.Sprintf("Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, pod.Spec.NodeName), "default-scheduler", ""),
		mk(2, cref, "Pulled", fmt.Sprintf("Container image %q already present on machine", image), "kubelet", pod.Spec.NodeName),
		mk(3, cref, "Created", "Created container: notebook", "kubelet", pod.Spec.NodeName),
		mk(4, cref, "Started", "Started container notebook", "kubelet", pod.Spec.NodeName),
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// createEvents writes the start events of every pod.
func (f *scaleFixture) createEvents(ctx context.Context) error {
	return parallel(ctx, len(f.pods)*scaleStartEvents, scaleWorkers, func(ctx context.Context, i int) error {
		ev := scaleEvents(f.pods[i/scaleStartEvents])[i%scaleStartEvents]
		if _, err := f.client.CoreV1().Events(f.ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating event %s: %w", ev.Name, err)
		}
		return nil
	})
}

// teardown lets the pods go (their stop-report finalizer dropped), deletes
// them, their events, the namespace and the nodes.
func (f *scaleFixture) teardown(ctx context.Context, nodes []*corev1.Node) error {
	var errs []error
	// One DELETE per object from scaleWorkers: a DeleteCollection of
	// 10,000 pods or 40,000 events outlasts the API server's 60 s request
	// timeout and goes on in the background, under the next benchmark.
	zero := int64(0)
	pods, err := f.client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		errs = append(errs, fmt.Errorf("listing the pods of %s: %w", f.ns, err))
	} else {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		errs = append(errs, parallel(ctx, len(pods.Items), scaleWorkers, func(ctx context.Context, i int) error {
			name := pods.Items[i].Name
			_, err := f.client.CoreV1().Pods(f.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
			if err == nil {
				err = f.client.CoreV1().Pods(f.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting pod %s: %w", name, err)
			}
			return nil
		}))
	}
	events, err := f.client.CoreV1().Events(f.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		errs = append(errs, fmt.Errorf("listing the events of %s: %w", f.ns, err))
	} else {
		errs = append(errs, parallel(ctx, len(events.Items), scaleWorkers, func(ctx context.Context, i int) error {
			err := f.client.CoreV1().Events(f.ns).Delete(ctx, events.Items[i].Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting event %s: %w", events.Items[i].Name, err)
			}
			return nil
		}))
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := f.client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("waiting for the pods of %s to go: %w", f.ns, err))
	}
	_ = f.client.CoreV1().Namespaces().Delete(ctx, f.ns, metav1.DeleteOptions{})
	for _, n := range nodes {
		_ = f.client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{})
	}
	return errors.Join(errs...)
}

// scaleProcess is a spawnerd binary serving the fixture's namespace with
// the default flags (stop Lease on, SQLite session history).
type scaleProcess struct {
	*harness.Process
	url     string
	api     *apiclient.Client // an admin
	started time.Time
	ready   time.Time
}

// scaleLauncher starts spawnerd processes that share one configuration,
// secret and session history file, as restarts of one deployment.
type scaleLauncher struct {
	args   []string
	secret []byte
	dsn    string
	debug  bool // the binary has --debug-listen (Go's profiler)
}

func newScaleLauncher(b *testing.B, f *scaleFixture) *scaleLauncher {
	b.Helper()
	dir := b.TempDir()
	cfgPath := filepath.Join(dir, "spawner.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, scaleConfig, f.ns), 0o644); err != nil {
		b.Fatal(err)
	}
	secret := []byte("bench-scale-shared-secret-" + rand.String(20))
	secretPath := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretPath, secret, 0o600); err != nil {
		b.Fatal(err)
	}
	dsn := "sqlite://" + filepath.Join(dir, "history.db")
	help, _ := exec.Command(bin, "serve", "-h").CombinedOutput()
	return &scaleLauncher{
		args: []string{"serve", "--config", cfgPath, "--kubeconfig", env.Cluster.Kubeconfig(),
			"--shared-secret-file", secretPath, "--history-dsn", dsn},
		secret: secret, dsn: dsn, debug: bytes.Contains(help, []byte("-debug-listen")),
	}
}

// start runs spawnerd and returns once /readyz answers 200, polled every
// 5 ms; debugAddr, if set, serves Go's profiler.
func (l *scaleLauncher) start(b *testing.B, debugAddr string) *scaleProcess {
	b.Helper()
	port := harness.FreePort(b)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	args := append(slices.Clone(l.args), "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	if debugAddr != "" {
		args = append(args, "--debug-listen", debugAddr)
	}
	api, err := apiclient.New(url, apiclient.User{Name: "admin", Admin: true}, apiclient.SharedSecret(l.secret))
	if err != nil {
		b.Fatal(err)
	}
	p := &scaleProcess{url: url, api: api, started: time.Now()}
	p.Process = harness.StartProcess(b, "spawnerd", nil, bin, args...)
	hc := &http.Client{Timeout: time.Second}
	err = wait.PollUntilContextTimeout(b.Context(), 5*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("spawnerd exited:\n%s", p.Log())
		}
		resp, err := hc.Get(url + "/readyz")
		if err != nil {
			return false, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		b.Fatalf("spawnerd not ready: %v", err)
	}
	p.ready = time.Now()
	return p
}

// logAt returns when the process logged a line holding every part, from
// its JSON log's ts (seconds since the epoch).
func (p *scaleProcess) logAt(timeout time.Duration, parts ...string) (time.Time, string, bool) {
	line, ok := p.WaitForLogLine(timeout, parts...)
	if !ok {
		return time.Time{}, "", false
	}
	var rec struct {
		TS float64 `json:"ts"`
	}
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.TS == 0 {
		return time.Time{}, line, false
	}
	return time.Unix(0, int64(rec.TS*float64(time.Second))), line, true
}

// awaitRunning waits until the admin list shows n servers running.
func (p *scaleProcess) awaitRunning(ctx context.Context, n int) error {
	count := func(ctx context.Context) int {
		list, err := p.api.ListServers(ctx)
		if err != nil {
			return -1
		}
		running := 0
		for _, s := range list.Servers {
			if s.Status == lifecycle.StatusRunning {
				running++
			}
		}
		return running
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, scaleTimeout, true, func(ctx context.Context) (bool, error) {
		return count(ctx) == n, nil
	})
	if err != nil {
		return fmt.Errorf("spawnerd lists %d of %d servers running: %w", count(ctx), n, err)
	}
	return nil
}

// pollAll polls every user's server as the hub does and checks it reads
// running at its own pod; it returns how long that took.
func (p *scaleProcess) pollAll(ctx context.Context, users []string, pods []*corev1.Pod) (time.Duration, error) {
	start := time.Now()
	err := parallel(ctx, len(users), 16, func(ctx context.Context, i int) error {
		s, err := p.api.As(apiclient.User{Name: users[i]}).Poll(ctx, users[i], "", lifecycle.Hint{})
		if err != nil {
			return fmt.Errorf("poll %s: %w", users[i], err)
		}
		if s.Status != lifecycle.StatusRunning || s.Pod != pods[i].Name || s.UID != string(pods[i].UID) || s.URL == nil {
			return fmt.Errorf("poll %s: status %q pod %q uid %q, want running at %s (%s)", users[i], s.Status, s.Pod, s.UID, pods[i].Name, pods[i].UID)
		}
		return nil
	})
	return time.Since(start), err
}

// inProcessCaches are spawnerd's caches in this process, wired as serve
// wires them: the pod watcher (pods, the server-key map, events of
// notebook pods) and the session history's recorder, elected.
type inProcessCaches struct {
	w      *poll.Watcher
	rec    *recorder.Recorder
	store  *history.Store
	cancel context.CancelFunc
	done   sync.WaitGroup
	// requests counts the watcher's API requests by method and resource.
	requests *requestLog
}

func startInProcess(ctx context.Context, b *testing.B, f *scaleFixture) (*inProcessCaches, error) {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst, cfg.UserAgent = 500, 1000, "spawnerd"
	c := &inProcessCaches{requests: &requestLog{}}
	cfg.WrapTransport = c.requests.wrap
	client, err := kubernetes.NewForConfig(kubeclient.Protobuf(cfg))
	if err != nil {
		return nil, err
	}
	owns := lifecycle.Ownership(f.cfg)
	if c.w, err = poll.New(client, poll.Options{Namespace: f.ns, Owns: owns, Elected: true, DeleteStoppedPods: true}); err != nil {
		return nil, err
	}
	if c.store, err = history.Open(ctx, "sqlite://"+filepath.Join(b.TempDir(), "history.db"), history.Options{Logger: zap.NewNop()}); err != nil {
		return nil, err
	}
	c.rec, err = recorder.New(recorder.Options{Store: c.store, AnnotationPrefix: "galends/", Events: c.w.Events, Pods: c.w.Pods, Synced: c.w.HasSynced,
		Owns: owns, Elected: true})
	if err != nil {
		return nil, err
	}
	if err := c.w.AddPodHandler(c.rec.Handler()); err != nil {
		return nil, err
	}
	return c, nil
}

// run starts the caches and waits until they hold everything, the lead is
// taken and the recorder's rescan is in the history.
func (c *inProcessCaches) run(ctx context.Context, f *scaleFixture) (synced time.Duration, err error) {
	runCtx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	start := time.Now()
	c.done.Go(func() { _ = c.w.Run(runCtx) })
	c.done.Go(func() { _ = c.rec.Run(runCtx) })
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, scaleTimeout, true, func(context.Context) (bool, error) {
		return c.w.HasSynced(), nil
	}); err != nil {
		return 0, fmt.Errorf("the in-process caches never synced: %w", err)
	}
	synced = time.Since(start)
	c.w.SetLeading(true)
	c.rec.SetLeading(true)
	uids := make([]string, len(f.pods))
	for i, p := range f.pods {
		uids[i] = string(p.UID)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, scaleTimeout, true, func(ctx context.Context) (bool, error) {
		done, err := c.store.Recorded(ctx, uids)
		if err != nil {
			return false, nil
		}
		for _, u := range uids {
			if !done[u][history.EventReady] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return synced, fmt.Errorf("the rescan never reached the history: %w", err)
	}
	return synced, nil
}

func (c *inProcessCaches) stop() {
	if c.cancel != nil {
		c.cancel()
	}
	c.done.Wait()
	_ = c.store.Close()
}

// eventsKept counts the pods whose start events are all in the cache.
func (c *inProcessCaches) eventsKept(f *scaleFixture) int {
	n := 0
	for _, p := range f.pods {
		if len(c.w.Events(p.Namespace, p.Name)) >= scaleStartEvents {
			n++
		}
	}
	return n
}

// requestLog records a client's API requests: method, path, duration and
// bytes read.
type requestLog struct {
	mu   sync.Mutex
	reqs []loggedRequest
}

type loggedRequest struct {
	method, path string
	start, end   time.Time
	bytes        int64
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return harness.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := rt.RoundTrip(r)
		if err != nil || r.URL.Query().Get("watch") == "true" {
			return resp, err
		}
		counted := &countingBody{ReadCloser: resp.Body}
		counted.onClose = func() {
			l.mu.Lock()
			l.reqs = append(l.reqs, loggedRequest{method: r.Method, path: r.URL.Path + "?" + r.URL.RawQuery, start: start, end: time.Now(), bytes: counted.n.Load()})
			l.mu.Unlock()
		}
		resp.Body = counted
		return resp, nil
	})
}

func (l *requestLog) table(since time.Time) [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	rows := [][]string{{"request", "from start", "took", "MB"}}
	for _, r := range l.reqs {
		rows = append(rows, []string{r.method + " " + r.path, secs(r.start.Sub(since)), millis(r.end.Sub(r.start)),
			strconv.FormatFloat(float64(r.bytes)/(1<<20), 'f', 1, 64)})
	}
	return rows
}

type countingBody struct {
	io.ReadCloser
	n       atomic.Int64
	once    sync.Once
	onClose func()
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	if err == io.EOF {
		c.once.Do(c.onClose)
	}
	return n, err
}

func (c *countingBody) Close() error {
	c.once.Do(c.onClose)
	return c.ReadCloser.Close()
}

// heapAfterGC is the live heap after a full collection.
func heapAfterGC() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// processMemory reads a spawnerd's heap and RSS from its /metrics. With a
// profiler address it first has the process collect its garbage (a heap
// profile with gc=1), so that the heap is what it holds live; without, the
// heap in use includes what the next collection would free.
func processMemory(ctx context.Context, url, debugAddr string) (heap, rss float64, err error) {
	series := "go_memstats_heap_inuse_bytes"
	if debugAddr != "" {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+debugAddr+"/debug/pprof/heap?gc=1", nil)
		if err != nil {
			return 0, 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, 0, fmt.Errorf("collecting spawnerd's garbage: %w", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		series = "go_memstats_heap_alloc_bytes"
	}
	m, err := scrape(ctx, url)
	if err != nil {
		return 0, 0, err
	}
	return m[series], m["process_resident_memory_bytes"], nil
}

func kib(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) + " B" }

func metText(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

// BenchmarkCacheMemory measures what 10,000 servers cost spawnerd in
// memory: in this process, the heap its caches hold after a full
// collection (a real informer against the API server: pods through their
// transform with the server-key map, the session recorder's per-pod
// state after its rescan; then the four start events of each pod in the
// event cache); and for a whole spawnerd process, its heap in use and RSS
// before the pods exist and after it holds them and their events.
func BenchmarkCacheMemory(b *testing.B) {
	b.StopTimer()
	ctx := b.Context()
	f := newScaleFixture(b)
	l := newScaleLauncher(b, f)
	for range b.N {
		// 1. A spawnerd process with no servers yet.
		debugAddr := ""
		if l.debug {
			debugAddr = fmt.Sprintf("127.0.0.1:%d", harness.FreePort(b))
		}
		proc := l.start(b, debugAddr)
		heap0, rss0, err := processMemory(ctx, proc.url, debugAddr)
		if err != nil {
			b.Fatal(err)
		}
		// 2. The servers.
		began := time.Now()
		if err := f.createPods(ctx); err != nil {
			b.Fatal(err)
		}
		show(fmt.Sprintf("%d pods created and running in %s\n", scaleServers, secs(time.Since(began))))
		if err := proc.awaitRunning(ctx, scaleServers); err != nil {
			b.Fatal(err)
		}
		if _, err := proc.pollAll(ctx, f.users, f.pods); err != nil {
			b.Fatalf("spawnerd after the pods came: %v", err)
		}
		heap1, _, err := processMemory(ctx, proc.url, debugAddr)
		if err != nil {
			b.Fatal(err)
		}

		// 3. The same caches in this process.
		c, err := startInProcess(ctx, b, f)
		if err != nil {
			b.Fatal(err)
		}
		h0 := heapAfterGC()
		b.StartTimer()
		if _, err := c.run(ctx, f); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		h1 := heapAfterGC()
		var heapProf bytes.Buffer
		if err := pprof.Lookup("heap").WriteTo(&heapProf, 0); err != nil {
			b.Fatal(err)
		}
		// Where the bytes per pod go (the whole test process's live heap,
		// the fixture's own copies of the pods included).
		if err := pprofTop(ctx, b, "live heap with the caches holding every pod", heapProf.Bytes(), "-sample_index=inuse_space"); err != nil {
			b.Error(err)
		}

		// 4. The start events.
		began = time.Now()
		if err := f.createEvents(ctx); err != nil {
			b.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, time.Second, scaleTimeout, true, func(context.Context) (bool, error) {
			return c.eventsKept(f) == scaleServers, nil
		})
		if err != nil {
			b.Fatalf("the events of only %d of %d pods reached the cache: %v", c.eventsKept(f), scaleServers, err)
		}
		show(fmt.Sprintf("%d events created and cached in %s\n", scaleServers*scaleStartEvents, secs(time.Since(began))))
		h2 := heapAfterGC()
		// The process holds them too once its events answer for the last pod.
		last := f.users[len(f.users)-1]
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			s, err := proc.api.Server(ctx, last, "")
			return err == nil && len(s.Events) >= scaleStartEvents, nil
		})
		if err != nil {
			b.Fatalf("spawnerd never showed the events of %s: %v", last, err)
		}
		heap2, rss2, err := processMemory(ctx, proc.url, debugAddr)
		if err != nil {
			b.Fatal(err)
		}
		c.stop()
		proc.Stop()

		perPod := float64(h1-h0) / scaleServers
		perEvent := float64(h2-h1) / (scaleServers * scaleStartEvents)
		withEvents := float64(h2-h0) / scaleServers
		heapWhat := "heap after GC (go_memstats_heap_alloc_bytes)"
		if debugAddr == "" {
			heapWhat = "heap in use, garbage included (go_memstats_heap_inuse_bytes)"
		}
		rows := [][]string{
			{"what", "per pod", "target", "met"},
			{"in process: pod, server-key map, session recorder (heap after GC)", kib(perPod), "≤ " + kib(scaleBytesTarget), metText(perPod <= scaleBytesTarget)},
			{"in process: + its 4 start events (" + kib(perEvent) + " per event)", kib(withEvents), "-", "-"},
			{"spawnerd process: " + heapWhat + ", pods only", kib((heap1 - heap0) / scaleServers), "-", "-"},
			{"spawnerd process: " + heapWhat + ", pods and events", kib((heap2 - heap0) / scaleServers), "-", "-"},
			{"spawnerd process: RSS (process_resident_memory_bytes), pods and events", kib((rss2 - rss0) / scaleServers), "-", "-"},
		}
		show(table(fmt.Sprintf("Memory per server with %d servers in the cache (every %dth a GPU pod)", scaleServers, scaleGPUEvery), rows))
		b.ReportMetric(perPod, "bytes/pod")
		b.ReportMetric(withEvents, "bytes/pod-with-events")
		b.ReportMetric(perEvent, "bytes/event")
		b.ReportMetric((heap2-heap0)/scaleServers, "process-heap-bytes/pod")
		b.ReportMetric((rss2-rss0)/scaleServers, "process-rss-bytes/pod")
	}
}

// BenchmarkColdStart starts spawnerd with 10,000 servers' pods (and their
// start events) already in the cluster and measures from the process's
// start to /readyz answering 200: both caches synced, the history open.
// The first start has an empty session history (its rescan records every
// pod); the measured ones are restarts, as after an upgrade or a
// failover, with the history holding them. After each, every server is
// polled and must read running at its own pod; the leader's history rescan
// (one Recorded query for every cached pod, then only what is missing) is
// timed from the process's log. An in-process start of the same caches,
// profiled, shows where the time goes.
func BenchmarkColdStart(b *testing.B) {
	b.StopTimer()
	ctx := b.Context()
	f := newScaleFixture(b)
	began := time.Now()
	if err := f.createPods(ctx); err != nil {
		b.Fatal(err)
	}
	if err := f.createEvents(ctx); err != nil {
		b.Fatal(err)
	}
	show(fmt.Sprintf("%d pods and %d events created in %s\n", scaleServers, scaleServers*scaleStartEvents, secs(time.Since(began))))
	l := newScaleLauncher(b, f)

	type run struct {
		name                        string
		ready, rescanFrom, rescanTo time.Duration
		pollAll                     time.Duration
		rescanRecords               string
	}
	var runs []run
	measure := func(name string, wantRecorded bool) *scaleProcess {
		p := l.start(b, "")
		r := run{name: name, ready: p.ready.Sub(p.started)}
		var err error
		if r.pollAll, err = p.pollAll(ctx, f.users, f.pods); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		if at, _, ok := p.logAt(time.Minute, `"took the lead"`); ok {
			r.rescanFrom = at.Sub(p.started)
		}
		if at, line, ok := p.logAt(time.Minute, "rescanned the pod cache"); ok {
			r.rescanTo = at.Sub(p.started)
			var rec struct{ Records int }
			_ = json.Unmarshal([]byte(line), &rec)
			r.rescanRecords = strconv.Itoa(rec.Records)
		} else {
			b.Errorf("%s: no rescan in the log", name)
		}
		if wantRecorded {
			err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, scaleTimeout, true, func(ctx context.Context) (bool, error) {
				n, err := liveSessions(ctx, l.dsn)
				return err == nil && n == scaleServers, nil
			})
			if err != nil {
				b.Fatalf("%s: the history never held every server: %v", name, err)
			}
		}
		runs = append(runs, r)
		return p
	}
	// The first start records every server; the restarts find them recorded.
	first := measure("first start (empty history)", true)
	first.Stop()
	var ready []time.Duration
	for i := range max(b.N, scaleRestarts) {
		b.StartTimer()
		p := measure(fmt.Sprintf("restart %d", i+1), false)
		b.StopTimer()
		ready = append(ready, runs[len(runs)-1].ready)
		p.Stop()
	}

	rows := [][]string{{"start", "ready (/readyz 200)", "lead taken", "rescan done", "rescan records", "then all 10,000 polled"}}
	for _, r := range runs {
		rows = append(rows, []string{r.name, secs(r.ready), secs(r.rescanFrom), secs(r.rescanTo), r.rescanRecords, secs(r.pollAll)})
	}
	median := percentile(slices.Clone(ready), 0.5)
	show(table(fmt.Sprintf("Cold start with %d servers' pods and %d events in the cluster (target ready ≤ %s: median of restarts %s, %s)",
		scaleServers, scaleServers*scaleStartEvents, secs(scaleReadyTarget), secs(median), map[bool]string{true: "met", false: "NOT met"}[median <= scaleReadyTarget]), rows))

	// Where the time goes: the same caches started in this process, profiled.
	if err := profileColdStart(ctx, b, f); err != nil {
		b.Error(err)
	}
	b.ReportMetric(median.Seconds(), "s-ready")
	b.ReportMetric(slices.Max(ready).Seconds(), "s-ready-max")
	b.ReportMetric(runs[0].ready.Seconds(), "s-ready-first")
	b.ReportMetric((runs[len(runs)-1].rescanTo - runs[len(runs)-1].rescanFrom).Seconds(), "s-rescan")
}

// profileColdStart starts spawnerd's caches in this process under the CPU
// profiler and prints the API requests they made and pprof's top.
func profileColdStart(ctx context.Context, b *testing.B, f *scaleFixture) error {
	c, err := startInProcess(ctx, b, f)
	if err != nil {
		return err
	}
	defer c.stop()
	var prof bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		return fmt.Errorf("starting the CPU profile: %w", err)
	}
	start := time.Now()
	synced, err := c.run(ctx, f)
	pprof.StopCPUProfile()
	if err != nil {
		return err
	}
	show(table(fmt.Sprintf("In-process cold start: caches synced after %s; the watcher's API requests (watches left out)", secs(synced)), c.requests.table(start)))
	return pprofTop(ctx, b, "the in-process cold start, until the history's rescan is stored", prof.Bytes())
}

// pprofTop prints pprof's top of a profile, with the extra pprof flags.
// With BENCH_PROFILES=DIR the profile is kept in DIR too, named after the
// benchmark and what it profiles, for a closer look with go tool pprof.
func pprofTop(ctx context.Context, b *testing.B, what string, profile []byte, flags ...string) error {
	out, err := harness.PprofTop(ctx, b.TempDir(), b.Name()+"-"+what, what, profile, flags...)
	if err != nil {
		return err
	}
	show(out)
	return nil
}
