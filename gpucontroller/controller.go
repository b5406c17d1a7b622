// Package gpucontroller runs the GPU reservation engine against the cluster:
// it keeps informer caches of GPU pods, nodes and reservations, runs a
// decision cycle whenever they change (and on a tick, for timers), and
// writes each plan: evictions, lease cancels and mints, one admission PATCH
// per pod, annotation updates and the reservation events. Only the holder
// of a coordination Lease decides; every replica serves the admin view.
package gpucontroller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"

	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/reservationstore"
)

// Options configures a Controller.
type Options struct {
	// Config is the engine's configuration (defaulted and validated).
	Config reservation.Config
	// Namespace holds the leader-election Lease and the pause ConfigMap.
	Namespace string
	// Name names both; defaults to "gpu-reservation-controller".
	Name string
	// Identity is this replica's name in the Lease; defaults to the host name.
	Identity string
	// LeaderElection, when false, decides without a Lease (one replica only).
	LeaderElection bool
	// Tick is the longest time between cycles; bookings open and
	// guarantees end on it. Defaults to 10s.
	Tick time.Duration
	// Workers bounds the writes in flight within one plan step, and is the
	// number of event writers. Defaults to 64: the next cycle waits for a
	// plan's writes, so at 100 ms of API latency 64 in flight allow 640
	// writes/s, above the client's rate limit, which then sets the pace.
	Workers int
	// EventsClient writes the events, off the decision loop and with a
	// rate limit of its own, so a backlog of them (10,000 pods told why
	// they wait) never delays an admission. Stop events of evictions are
	// the exception: the client writes them before the delete. Defaults to
	// the client.
	EventsClient kubernetes.Interface
	// WatchClient lists and watches pods, nodes and the pause ConfigMap;
	// nil: the client. spawnerd gives it a connection of its own (see
	// kubeclient.OwnConnection), apart from the admissions' writes.
	WatchClient kubernetes.Interface
	// Clock is the engine's clock; defaults to the real clock.
	Clock clock.WithTicker
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Registry receives the controller's metrics; may be nil.
	Registry prometheus.Registerer
	// OnEvict, when set, is told of every eviction after its event is
	// written and before the pod is deleted (the session history records
	// who ended the pod while it still exists).
	OnEvict func(ctx context.Context, pod *corev1.Pod, reason, message string)
}

// Controller is the reservation controller.
type Controller struct {
	client kubernetes.Interface
	store  *reservationstore.Store
	opts   Options
	log    *zap.Logger
	clock  clock.WithTicker
	m      *metrics

	factory   informers.SharedInformerFactory
	pods      cache.SharedIndexInformer
	podLister corelisters.PodLister
	nodes     corelisters.NodeLister
	nodeInf   cache.SharedIndexInformer
	pauseInf  cache.SharedIndexInformer
	// unmanaged are the bound, live pods without the class label, trimmed
	// to where they run and how many GPUs they hold.
	unmanaged cache.SharedIndexInformer
	wake      chan struct{}
	events    chan queuedEvent // waiting events; dropped when full
	told      chan queuedEvent // the events of PATCHes that succeeded
	backlog   atomic.Int64

	startFactories []interface{ Start(<-chan struct{}) }

	mu        sync.Mutex
	seen      map[types.UID]time.Time  // when (wall time) the informer first delivered each waiting pod
	overlay   map[types.UID]overlayPod // pods as our last PATCH left them, until the cache catches up
	leader    bool
	lastCycle time.Time
}

// overlayPod is a pod as our PATCH left it. It stands in for the cached
// pod only while the cache still shows the version the PATCH was made
// from: any newer cached version already includes the PATCH.
type overlayPod struct {
	pod  *corev1.Pod
	base string // resourceVersion the PATCH was planned from
	at   time.Time
}

// overlayTTL bounds how long a patched pod shadows the cache: the watch
// normally delivers the patched version within milliseconds.
const overlayTTL = 30 * time.Second

// resync is the informers' full resync (§3.9: about 10 minutes).
const resync = 10 * time.Minute

var everything = labels.Everything()

// New builds a controller; call Run.
func New(client kubernetes.Interface, store *reservationstore.Store, opts Options) (*Controller, error) {
	if opts.Namespace == "" {
		return nil, errors.New("gpucontroller: Options.Namespace is required")
	}
	if opts.Name == "" {
		opts.Name = "gpu-reservation-controller"
	}
	if opts.Tick <= 0 {
		opts.Tick = 10 * time.Second
	}
	if opts.Workers <= 0 {
		opts.Workers = 64
	}
	if opts.EventsClient == nil {
		opts.EventsClient = client
	}
	if opts.WatchClient == nil {
		opts.WatchClient = client
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	opts.Config = opts.Config.WithDefaults()
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{
		client: client, store: store, opts: opts, log: opts.Logger, clock: opts.Clock,
		m:    newMetrics(opts.Registry),
		wake: make(chan struct{}, 1), events: make(chan queuedEvent, eventQueue), told: make(chan queuedEvent, eventQueue),
		seen: map[types.UID]time.Time{}, overlay: map[types.UID]overlayPod{},
	}
	// Managed pods only: a pod without the gpu-class label is not the
	// engine's, and only managed pods may tolerate the class taint (the
	// admission policy refuses the toleration elsewhere).
	c.factory = informers.NewSharedInformerFactoryWithOptions(opts.WatchClient, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = reservation.ClassLabel }))
	podInf := c.factory.Core().V1().Pods()
	c.pods = podInf.Informer()
	_ = c.pods.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			p.ManagedFields = nil
		}
		return obj, nil
	})
	c.podLister = podInf.Lister()
	// Nodes: a factory of their own, without the pod label selector.
	nodeFactory := informers.NewSharedInformerFactory(opts.WatchClient, resync)
	c.nodeInf = nodeFactory.Core().V1().Nodes().Informer()
	c.nodes = nodeFactory.Core().V1().Nodes().Lister()
	pauseFactory := informers.NewSharedInformerFactoryWithOptions(opts.WatchClient, resync,
		informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.pauseName()).String()
		}))
	c.pauseInf = pauseFactory.Core().V1().ConfigMaps().Informer()
	// A pod without the class label that holds GPUs on a class node (made
	// before the toleration policy, by an exempt identity, or bound straight
	// to the node) still uses them: it is counted, or capacity would be
	// promised twice. Only its node, phase and GPU count are kept.
	unmanagedFactory := informers.NewSharedInformerFactoryWithOptions(opts.WatchClient, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = "!" + reservation.ClassLabel
			o.FieldSelector = "spec.nodeName!=,status.phase!=" + string(corev1.PodSucceeded) + ",status.phase!=" + string(corev1.PodFailed)
		}))
	c.unmanaged = unmanagedFactory.Core().V1().Pods().Informer()
	_ = c.unmanaged.SetTransform(gpuStub)
	c.startFactories = []interface{ Start(<-chan struct{}) }{c.factory, nodeFactory, pauseFactory, unmanagedFactory}

	_, _ = c.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				c.mu.Lock()
				if _, ok := c.seen[p.UID]; !ok {
					c.seen[p.UID] = time.Now() // a latency: wall time, whatever the engine's clock
				}
				c.mu.Unlock()
			}
			c.poke()
		},
		UpdateFunc: func(_, _ any) { c.poke() },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				c.mu.Lock()
				delete(c.seen, p.UID)
				delete(c.overlay, p.UID)
				c.mu.Unlock()
			}
			c.poke()
		},
	})
	poke := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.poke() }, UpdateFunc: func(_, _ any) { c.poke() }, DeleteFunc: func(any) { c.poke() },
	}
	_, _ = c.nodeInf.AddEventHandler(poke)
	_, _ = c.pauseInf.AddEventHandler(poke)
	// Only a change of GPUs held wakes the engine: notebook pods come and go
	// far more often than GPUs move.
	_, _ = c.unmanaged.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if holdsGPUs(obj) {
				c.poke()
			}
		},
		UpdateFunc: func(old, obj any) {
			if holdsGPUs(old) || holdsGPUs(obj) {
				c.poke()
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if holdsGPUs(obj) {
				c.poke()
			}
		},
	})
	_, _ = store.Informer().AddEventHandler(poke)
	return c, nil
}

// gpuStub trims an unmanaged pod to what occupancy needs: where it runs,
// whether it is live, and one container holding its GPUs (none if it holds
// none), so that thousands of CPU pods cost little memory.
func gpuStub(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	stub := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			DeletionTimestamp: p.DeletionTimestamp, CreationTimestamp: p.CreationTimestamp},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}
	if n := reservation.PodGPUs(p); n > 0 {
		stub.Spec.Containers = []corev1.Container{{Name: "gpus", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{reservation.GPUResource: *resource.NewQuantity(int64(n), resource.DecimalSI)}}}}
	}
	return stub, nil
}

// holdsGPUs reports whether a trimmed unmanaged pod holds any GPU.
func holdsGPUs(obj any) bool {
	p, ok := obj.(*corev1.Pod)
	return ok && len(p.Spec.Containers) > 0
}

func (c *Controller) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Controller) pauseName() string { return c.opts.Name + "-paused" }

// HasSynced reports whether every cache has synced.
func (c *Controller) HasSynced() bool {
	return c.pods.HasSynced() && c.nodeInf.HasSynced() && c.pauseInf.HasSynced() && c.unmanaged.HasSynced() &&
		c.store.Informer().HasSynced()
}

// Leading reports whether this replica decides.
func (c *Controller) Leading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// Run starts the caches and, while this replica leads, the decision loop.
// It returns when ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	go c.store.Informer().Run(ctx.Done())
	for _, f := range c.startFactories {
		f.Start(ctx.Done())
	}
	for range c.opts.Workers {
		go c.eventWriter(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.HasSynced) {
		return ctx.Err()
	}
	c.log.Info("reservation caches synced", zap.Int("pods", len(c.pods.GetStore().ListKeys())),
		zap.Int("reservations", len(c.store.Informer().GetStore().ListKeys())))
	if !c.opts.LeaderElection {
		return c.lead(ctx)
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, c.opts.Namespace, c.opts.Name,
		c.client.CoreV1(), c.client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: c.opts.Identity})
	if err != nil {
		return fmt.Errorf("leader election lock: %w", err)
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			ReleaseOnCancel: true, Name: c.opts.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					if err := c.lead(ctx); err != nil && ctx.Err() == nil {
						c.log.Error("reservation loop ended", zap.Error(err))
					}
				},
				OnStoppedLeading: func() { c.log.Info("no longer leading reservation decisions", zap.String("identity", c.opts.Identity)) },
				OnNewLeader: func(id string) {
					c.log.Info("reservation leader", zap.String("leader", id), zap.String("identity", c.opts.Identity))
				},
			},
		})
	}
	return nil
}

// lead runs decision cycles until ctx ends. Each leadership term starts a
// fresh engine: everything it decides from is in the cluster.
func (c *Controller) lead(ctx context.Context) error {
	engine, err := reservation.New(c.opts.Config, reservation.WithClock(c.clock))
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.leader = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.leader = false
		c.mu.Unlock()
	}()
	c.log.Info("leading reservation decisions", zap.String("identity", c.opts.Identity))
	tick := c.clock.NewTicker(c.opts.Tick)
	defer tick.Stop()
	for {
		c.cycle(ctx, engine)
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		case <-tick.C():
		}
	}
}

// Snapshot is what a cycle decides from: the caches, with pods this
// controller just patched shown as the PATCH left them.
func (c *Controller) Snapshot() reservation.Snapshot {
	pods, _ := c.podLister.List(everything)
	now := c.clock.Now()
	c.mu.Lock()
	for i, p := range pods {
		if ov, ok := c.overlay[p.UID]; ok {
			if ov.base == p.ResourceVersion && now.Sub(ov.at) < overlayTTL {
				pods[i] = ov.pod
			} else {
				delete(c.overlay, p.UID)
			}
		}
	}
	c.mu.Unlock()
	for _, obj := range c.unmanaged.GetStore().List() {
		if holdsGPUs(obj) {
			pods = append(pods, obj.(*corev1.Pod))
		}
	}
	nodes, _ := c.nodes.List(everything)
	snap := reservation.Snapshot{Now: now, Pods: pods, Nodes: nodes, Reservations: c.store.List()}
	if items := c.pauseInf.GetStore().List(); len(items) > 0 {
		if cm, ok := items[0].(*corev1.ConfigMap); ok && len(cm.Data) > 0 {
			snap.Paused = cm.Data
		}
	}
	return snap
}

func (c *Controller) cycle(ctx context.Context, engine *reservation.Engine) {
	start := time.Now()
	snap := c.Snapshot()
	plan := engine.Decide(snap)
	c.m.cycleSeconds.Observe(time.Since(start).Seconds())
	c.m.pending.Set(float64(pendingOf(plan.Classes)))
	if !plan.Empty() {
		applyStart := time.Now()
		c.apply(ctx, &plan, snap.Pods)
		c.m.applySeconds.Observe(time.Since(applyStart).Seconds())
	}
	for _, u := range plan.Unmet {
		c.log.Warn("unmet reserved demand: only pods inside their guarantee could free it",
			zap.String("class", u.Class), zap.Time("boundary", u.Boundary), zap.Int("gpus", u.GPUs))
	}
	c.mu.Lock()
	c.lastCycle = start
	c.mu.Unlock()
}

func pendingOf(classes []reservation.ClassStatus) int {
	n := 0
	for _, cs := range classes {
		n += cs.WaitingPods
	}
	return n
}

// Classes computes the per-class view (capacity, occupancy, queue, risk
// over horizon) from the caches with a throwaway engine, so that every
// replica can answer and the deciding engine's state is not touched.
func (c *Controller) Classes(horizon time.Duration) ([]reservation.ClassStatus, error) {
	cfg := c.opts.Config
	if horizon > 0 {
		cfg.RiskHorizon = metav1.Duration{Duration: horizon}
	}
	e, err := reservation.New(cfg, reservation.WithClock(c.clock))
	if err != nil {
		return nil, err
	}
	plan := e.Decide(c.Snapshot())
	return plan.Classes, nil
}

// Reservations lists the cached reservations, by ID.
func (c *Controller) Reservations() []reservation.Reservation { return c.store.List() }

// Store is the reservation store the controller reads.
func (c *Controller) Store() *reservationstore.Store { return c.store }

// Now is the controller's clock.
func (c *Controller) Now() time.Time { return c.clock.Now() }

// KnownClass reports whether a class is in the catalogue.
func (c *Controller) KnownClass(class string) bool {
	return slices.ContainsFunc(c.opts.Config.Classes, func(g reservation.GPUClass) bool { return g.Label == class })
}
