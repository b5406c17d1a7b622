// Package localnode is a minimal kubelet for the dev cluster: it registers a
// node, and runs the containers of pods bound to it as local processes, each
// pod on its own loopback address, writing real pod status back.
package localnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// Options configures the agent.
type Options struct {
	NodeName   string
	NodeLabels map[string]string
	Taints     []corev1.Taint
	// StateDir gets one folder per pod: its HOME and container logs.
	StateDir string
	// CPU, Memory and Pods are the node's capacity. Defaults 8, 16Gi, 110.
	CPU, Memory string
	Pods        int
	// Extra is added to the capacity (e.g. simulated nvidia.com/gpu).
	Extra corev1.ResourceList
	// AddressBlock is the second octet of the pods' loopback addresses
	// (127.<block>.x.y), so that two agents never hand out the same one. Default 1.
	AddressBlock byte
	Logger       *zap.Logger
}

// Agent runs the pods bound to one node.
type Agent struct {
	client   kubernetes.Interface
	opts     Options
	log      *zap.Logger
	recorder record.EventRecorder
	pods     listersv1.PodLister
	queue    workqueue.TypedRateLimitingInterface[string]

	mu   sync.Mutex
	runs map[string]*podRun // by namespace/name
	ips  *ipPool
}

// New checks the options and returns an agent; Run starts it.
func New(client kubernetes.Interface, opts Options) (*Agent, error) {
	if opts.NodeName == "" || opts.StateDir == "" {
		return nil, fmt.Errorf("localnode: NodeName and StateDir are required")
	}
	if opts.CPU == "" {
		opts.CPU = "8"
	}
	if opts.Memory == "" {
		opts.Memory = "16Gi"
	}
	if opts.Pods == 0 {
		opts.Pods = 110
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.AddressBlock == 0 {
		opts.AddressBlock = 1
	}
	return &Agent{
		client: client,
		opts:   opts,
		log:    opts.Logger,
		runs:   map[string]*podRun{},
		ips:    newIPPool(opts.AddressBlock),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "localnode"}),
	}, nil
}

// Run registers the node, keeps its heartbeat, and runs its pods until ctx
// ends; then it stops every process it started.
func (a *Agent) Run(ctx context.Context) error {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	a.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: a.opts.NodeName})

	if err := a.registerNode(ctx); err != nil {
		return err
	}
	go wait.UntilWithContext(ctx, a.heartbeat, 10*time.Second)

	factory := informers.NewSharedInformerFactoryWithOptions(a.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.opts.NodeName).String()
		}))
	podInformer := factory.Core().V1().Pods()
	a.pods = podInformer.Lister()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			a.queue.Add(key)
		}
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("localnode: watching pods: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.Informer().HasSynced) {
		return ctx.Err()
	}
	var workers sync.WaitGroup
	for i := 0; i < 4; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for a.processNext(ctx) {
			}
		}()
	}
	<-ctx.Done()
	a.queue.ShutDown()
	workers.Wait()
	factory.Shutdown()
	a.stopAll()
	return nil
}

func (a *Agent) processNext(ctx context.Context) bool {
	key, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(key)
	if err := a.sync(ctx, key); err != nil {
		a.log.Warn("sync failed", zap.String("pod", key), zap.Error(err))
		a.queue.AddRateLimited(key)
		return true
	}
	a.queue.Forget(key)
	return true
}

// sync converges the processes of one pod with what the API server says.
func (a *Agent) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := a.pods.Pods(ns).Get(name)
	a.mu.Lock()
	run := a.runs[key]
	a.mu.Unlock()
	if apierrors.IsNotFound(err) {
		if run != nil {
			go a.finish(context.WithoutCancel(ctx), key, run, 0, false)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if run != nil && run.uid != pod.UID {
		// A new pod took the old one's name: the old one's processes must go.
		go a.finish(context.WithoutCancel(ctx), key, run, 0, false)
		run = nil
	}
	switch {
	case pod.DeletionTimestamp != nil:
		grace := int64(30)
		if pod.DeletionGracePeriodSeconds != nil {
			grace = *pod.DeletionGracePeriodSeconds
		}
		if run == nil {
			return a.deletePod(ctx, pod)
		}
		go a.finish(context.WithoutCancel(ctx), key, run, time.Duration(grace)*time.Second, true)
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		// A terminal pod (finished, or evicted by someone) keeps its status;
		// like a kubelet, make sure none of its processes is left running.
		if run != nil {
			run.markTerminal()
			go a.finish(context.WithoutCancel(ctx), key, run, 0, false)
		}
	case run == nil:
		return a.startPod(ctx, key, pod)
	}
	return nil
}

// finish stops a pod's processes within grace and, for a pod being deleted,
// removes the API object as the kubelet does once the containers are gone.
func (a *Agent) finish(ctx context.Context, key string, run *podRun, grace time.Duration, deleteAfter bool) {
	if run.beginStop() {
		a.recordf(run.pod, corev1.EventTypeNormal, "Killing", "Stopping container %s", run.containerNames())
		run.stop(grace)
		a.mu.Lock()
		if a.runs[key] == run {
			delete(a.runs, key)
		}
		a.mu.Unlock()
		a.ips.release(run.ip)
	} else {
		run.wait()
	}
	if deleteAfter {
		if err := a.deletePod(ctx, run.pod); err != nil {
			a.log.Warn("final delete failed", zap.String("pod", key), zap.Error(err))
			a.queue.AddRateLimited(key)
		}
	}
}

func (a *Agent) deletePod(ctx context.Context, pod *corev1.Pod) error {
	err := a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func (a *Agent) stopAll() {
	a.mu.Lock()
	runs := make([]*podRun, 0, len(a.runs))
	for _, r := range a.runs {
		runs = append(runs, r)
	}
	a.runs = map[string]*podRun{}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r.beginStop() {
				r.stop(2 * time.Second)
			}
		}()
	}
	wg.Wait()
}

func (a *Agent) recordf(pod *corev1.Pod, typ, reason, format string, args ...any) {
	if a.recorder != nil {
		a.recorder.Eventf(pod, typ, reason, format, args...)
	}
}

func (a *Agent) registerNode(ctx context.Context) error {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(a.opts.CPU),
		corev1.ResourceMemory: resource.MustParse(a.opts.Memory),
		corev1.ResourcePods:   *resource.NewQuantity(int64(a.opts.Pods), resource.DecimalSI),
	}
	for k, v := range a.opts.Extra {
		capacity[k] = v
	}
	labels := map[string]string{
		"kubernetes.io/hostname": a.opts.NodeName,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
	}
	for k, v := range a.opts.NodeLabels {
		labels[k] = v
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.opts.NodeName, Labels: labels}}
	node.Spec.Taints = append([]corev1.Taint(nil), a.opts.Taints...)
	created, err := a.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = a.client.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("localnode: registering node: %w", err)
	}
	now := metav1.Now()
	created.Status.Capacity = capacity
	created.Status.Allocatable = capacity.DeepCopy()
	created.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
		{Type: corev1.NodeHostName, Address: a.opts.NodeName},
	}
	created.Status.NodeInfo = corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "localnode", ContainerRuntimeVersion: "local-process://1"}
	created.Status.Conditions = nodeConditions(now)
	if _, err := a.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("localnode: setting node status: %w", err)
	}
	return nil
}

func nodeConditions(now metav1.Time) []corev1.NodeCondition {
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return []corev1.NodeCondition{
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "local runtime is posting ready status"),
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "local runtime has sufficient memory available"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "local runtime has no disk pressure"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "local runtime has sufficient PID available"),
	}
}

// heartbeat renews the node lease and the Ready condition, so the node
// lifecycle controller keeps the node Ready.
func (a *Agent) heartbeat(ctx context.Context) {
	now := metav1.NewMicroTime(time.Now())
	leases := a.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	lease, err := leases.Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: a.opts.NodeName, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(a.opts.NodeName),
				LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime:            &now,
			},
		}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			a.log.Warn("creating node lease failed", zap.Error(err))
		}
	case err != nil:
		a.log.Warn("reading node lease failed", zap.Error(err))
	default:
		lease.Spec.RenewTime = &now
		if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
			a.log.Warn("renewing node lease failed", zap.Error(err))
		}
	}
	node, err := a.client.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		a.log.Warn("reading node failed", zap.Error(err))
		return
	}
	stamp := metav1.Now()
	for i := range node.Status.Conditions {
		node.Status.Conditions[i].LastHeartbeatTime = stamp
	}
	if _, err := a.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		a.log.Warn("node heartbeat failed", zap.Error(err))
	}
}

// podDir is the pod's own folder under StateDir: HOME and container logs.
func (a *Agent) podDir(pod *corev1.Pod) (string, error) {
	dir := filepath.Join(a.opts.StateDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, shortUID(pod.UID)))
	if err := os.MkdirAll(filepath.Join(dir, "home"), 0o755); err != nil {
		return "", fmt.Errorf("creating pod folder: %w", err)
	}
	return dir, nil
}

func shortUID(uid types.UID) string {
	s := string(uid)
	if len(s) > 8 {
		s = s[:8]
	}
	return s
}

// ipPool hands out loopback addresses 127.<block>.x.y, one per running pod, so
// every pod can listen on the same port as it would in its own network
// namespace. Several dev clusters may run on one machine, each with its own
// pools: an address is taken only while this process holds an exclusive
// flock on a file named after it in a machine-wide folder, so no two pods
// anywhere on the machine get the same one. The kernel drops the lock when
// the holder dies, so a crashed cluster leaks nothing.
type ipPool struct {
	mu    sync.Mutex
	block byte
	dir   string
	used  map[string]*os.File // address → its held lock file
	next  int
	limit int
}

func newIPPool(block byte) *ipPool {
	return &ipPool{block: block, dir: filepath.Join(os.TempDir(), "devcluster-loopback"), used: map[string]*os.File{}, limit: 65534}
}

func (p *ipPool) allocate() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := os.MkdirAll(p.dir, 0o777); err != nil {
		return "", fmt.Errorf("loopback address locks: %w", err)
	}
	for i := 0; i < p.limit; i++ {
		n := (p.next+i)%p.limit + 1
		ip := net.IPv4(127, p.block, byte(n>>8), byte(n)).String()
		if _, mine := p.used[ip]; mine {
			continue
		}
		lock, ok, err := tryLock(filepath.Join(p.dir, ip))
		if err != nil {
			return "", err
		}
		if !ok {
			continue // another cluster's pod has it
		}
		p.used[ip] = lock
		p.next = n
		return ip, nil
	}
	return "", fmt.Errorf("no free loopback address")
}

func (p *ipPool) release(ip string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if lock := p.used[ip]; lock != nil {
		_ = lock.Close() // closing the file drops its flock
	}
	delete(p.used, ip)
}

// tryLock takes an exclusive, non-blocking flock on path; ok is false when
// another holder has it.
func tryLock(path string) (f *os.File, ok bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, false, fmt.Errorf("loopback address lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("loopback address lock %s: %w", path, err)
	}
	return f, true, nil
}
