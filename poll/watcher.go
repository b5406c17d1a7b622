// Package poll watches notebook pods and their events, decides when a server
// has stopped, and reacts to a stop at once: it deletes the pod and tells the
// hub.
package poll

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptrace"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/serverid"
)

// DefaultLabelSelector selects KubeSpawner's notebook pods (component_label).
const DefaultLabelSelector = "component=singleuser-server"

// DefaultWorkers is the number of workers when Options.Workers is 0.
const DefaultWorkers = 4

const (
	// eventFieldSelector is KubeSpawner's EventReflector selector.
	eventFieldSelector = "involvedObject.kind=Pod"
	// stopRetention bounds how long LastStop, ExpectStop and finished stop
	// records are kept for a pod that is gone.
	stopRetention = 24 * time.Hour
	// maxLastStops bounds the LastStop map; the oldest entry goes first.
	maxLastStops  = 20000
	sweepInterval = time.Minute
)

// Notifier is told when a server stopped on its own, i.e. not through
// Watcher.ExpectStop. hubclient.Notifier implements it.
type Notifier interface {
	ServerStopped(ctx context.Context, s ServerRef, why StopInfo) error
}

// Options configures a Watcher.
type Options struct {
	// Namespace to watch; "" watches all namespaces (enable_user_namespaces).
	// Namespaces, when set, replaces it: one informer per namespace, so a
	// configuration whose profiles place pods in several namespaces needs
	// no cluster-wide watch.
	Namespace  string
	Namespaces []string
	// Owns says whether a pod is really the server its identity names
	// (the namespace is one the configuration can put that server's pod
	// in); a pod it refuses is never deleted or reported. Nil owns all.
	Owns func(pod *corev1.Pod) (bool, string)
	// Elected makes the stop reaction wait for SetLeading(true): with
	// several replicas, only the holder of the Lease reacts.
	Elected bool
	// DeadlineGrace is how long after a pod's start deadline the leader
	// removes it, leaving the starting replica time to do so itself.
	// Default 10s.
	DeadlineGrace time.Duration
	// LabelSelector selects notebook pods. Defaults to DefaultLabelSelector.
	LabelSelector string
	// DeleteStoppedPods is KubeSpawner's delete_stopped_pods: delete a pod
	// once it is stopped. The service's configuration defaults it to true.
	DeleteStoppedPods bool
	// Workers is the number of stop-reaction workers. Defaults to DefaultWorkers.
	Workers int
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Notifier is told about servers that stopped on their own; may be nil.
	Notifier Notifier
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// OnStop, when set, is told of every stop the reaction handles, before
	// the hub is told and the pod is released: the session history records
	// the end while the pod still exists, so a failover loses nothing.
	OnStop func(ctx context.Context, pod *corev1.Pod, info StopInfo)
	// ReleaseClient writes the stop-report finalizer's release; nil: the
	// watcher's client. A client of its own (its own rate limiter) lets a
	// burst of stops issue every pod's delete before the releases, which
	// wait for the hub anyway, take the limiter's tokens.
	ReleaseClient kubernetes.Interface
	// WatchClient lists and watches the pods and their events; nil: the
	// watcher's client. spawnerd gives it a connection of its own (see
	// kubeclient.OwnConnection), so the stop reaction's burst of writes
	// does not share an HTTP/2 connection with the watch that drives it.
	WatchClient kubernetes.Interface
}

// Watcher keeps informer caches of notebook pods and their events, answers
// status questions from them, and runs the stop reaction.
type Watcher struct {
	client kubernetes.Interface
	opts   Options
	log    *zap.Logger
	clock  clock.PassiveClock
	// spaces are the watched namespaces by name; "" is all of them.
	spaces  map[string]*space
	queue   workqueue.TypedRateLimitingInterface[cache.ObjectName]
	started atomic.Bool
	leading atomic.Bool

	mu      sync.Mutex
	records map[types.UID]*stopRecord
	gone    map[cache.ObjectName]map[types.UID]gonePod
	last    map[cache.ObjectName]lastStop
	expect  map[cache.ObjectName]time.Time

	subMu sync.Mutex
	subs  map[cache.ObjectName]map[*subscriber]struct{}

	// keys finds a server's pods by its key label.
	keys *serverKeys
}

// stopRecord is the reaction's progress for one stopped pod UID.
type stopRecord struct {
	key      cache.ObjectName
	ref      ServerRef
	info     StopInfo
	deleted  bool // the pod is deleted or gone
	notified bool // the Notifier was told, or need not be
	// requested: someone asked for the stop (serverid.AnnotationStopRequested).
	requested bool
	at        time.Time
	// toldOnStop: Options.OnStop has been called.
	toldOnStop bool
}

type gonePod struct {
	pod *corev1.Pod // last known state
	at  time.Time
}

type lastStop struct {
	info StopInfo
	at   time.Time
}

type subscriber struct{ ch chan struct{} }

// New returns a Watcher; call Run to start it.
func New(client kubernetes.Interface, opts Options) (*Watcher, error) {
	if client == nil {
		return nil, errors.New("poll: nil client")
	}
	if opts.LabelSelector == "" {
		opts.LabelSelector = DefaultLabelSelector
	}
	if _, err := labels.Parse(opts.LabelSelector); err != nil {
		return nil, fmt.Errorf("parsing label selector %q: %w", opts.LabelSelector, err)
	}
	if opts.Workers < 0 {
		return nil, fmt.Errorf("workers must not be negative, got %d", opts.Workers)
	}
	if opts.Workers == 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.WatchClient == nil {
		opts.WatchClient = client
	}
	w := &Watcher{
		client:  client,
		opts:    opts,
		log:     opts.Logger,
		clock:   opts.Clock,
		records: map[types.UID]*stopRecord{},
		gone:    map[cache.ObjectName]map[types.UID]gonePod{},
		last:    map[cache.ObjectName]lastStop{},
		expect:  map[cache.ObjectName]time.Time{},
		subs:    map[cache.ObjectName]map[*subscriber]struct{}{},
		keys:    newServerKeys(),
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](200*time.Millisecond, 10*time.Second),
			// Overall retry speed, as workqueue.DefaultTypedControllerRateLimiter.
			&workqueue.TypedBucketRateLimiter[cache.ObjectName]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
		)),
	}

	if opts.DeadlineGrace == 0 {
		opts.DeadlineGrace = 10 * time.Second
	}
	w.opts = opts
	namespaces := opts.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{opts.Namespace}
	}
	w.spaces = map[string]*space{}
	for _, ns := range namespaces {
		if _, dup := w.spaces[ns]; dup {
			continue
		}
		sp, err := w.newSpace(ns)
		if err != nil {
			return nil, err
		}
		w.spaces[ns] = sp
	}
	if _, all := w.spaces[""]; all && len(w.spaces) > 1 {
		return nil, errors.New("poll: all namespaces (\"\") cannot be combined with others")
	}
	return w, nil
}

// space is the pod informer and event reflector of one watched namespace.
type space struct {
	namespace string
	factory   informers.SharedInformerFactory
	pods      cache.SharedIndexInformer
	// podsSynced reports that the pod handler has seen the first LIST;
	// benchmarks that fill the store by hand replace it.
	podsSynced func() bool
	events     *eventCache
	eventsRf   *cache.Reflector
}

func (w *Watcher) newSpace(ns string) (*space, error) {
	client, opts := w.opts.WatchClient, w.opts
	sp := &space{namespace: ns}
	sp.factory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = opts.LabelSelector }),
		informers.WithTransform(w.transformPod),
	)
	podInformer := sp.factory.Core().V1().Pods()
	// Not the typed lister: the store holds cachedPods (see trimPod).
	sp.pods = podInformer.Informer()
	reg, err := sp.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.podAdded,
		UpdateFunc: w.podUpdated,
		DeleteFunc: w.podDeleted,
	})
	if err != nil {
		return nil, fmt.Errorf("adding pod event handler: %w", err)
	}
	sp.podsSynced = reg.HasSynced

	cached := func(k cache.ObjectName) bool {
		_, exists, err := sp.pods.GetIndexer().GetByKey(k.String())
		return err == nil && exists
	}
	sp.events = newEventCache(cached, w.signal, w.clock)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = eventFieldSelector
			return client.CoreV1().Events(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = eventFieldSelector
			return client.CoreV1().Events(ns).Watch(ctx, o)
		},
	}
	sp.eventsRf = cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client),
		&corev1.Event{}, sp.events, cache.ReflectorOptions{Name: "poll-events-" + cmp.Or(ns, "all")})
	return sp, nil
}

// AddPodHandler adds a handler to the pod informer of every watched
// namespace (the session history observes the pods this way). It is handed
// *corev1.Pod objects, or cache.DeletedFinalStateUnknown holding one, made
// from the cache: shared with it, never modify them. Add it before Run.
func (w *Watcher) AddPodHandler(h cache.ResourceEventHandler) error {
	asPods := podHandler{h}
	for ns, sp := range w.spaces {
		if _, err := sp.pods.AddEventHandler(asPods); err != nil {
			return fmt.Errorf("adding a pod handler for namespace %q: %w", ns, err)
		}
	}
	return nil
}

// spaceOf returns the space that watches namespace ns, nil if none does.
func (w *Watcher) spaceOf(ns string) *space {
	if sp, ok := w.spaces[ns]; ok {
		return sp
	}
	return w.spaces[""]
}

// Namespaces returns the watched namespaces, sorted; [""] is all of them.
func (w *Watcher) Namespaces() []string {
	out := make([]string, 0, len(w.spaces))
	for ns := range w.spaces {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

// PodsSynced reports whether the pod cache of every watched namespace holds
// its first LIST: what polls, starts and the stop reaction read. The event
// cache fills after it (see Run) and only completes progress logs.
func (w *Watcher) PodsSynced() bool {
	for _, sp := range w.spaces {
		if !sp.podsSynced() {
			return false
		}
	}
	return true
}

// Run starts the informers and workers and blocks until ctx is done. The
// event watch starts once the pod cache has synced, so its first LIST can
// tell which events belong to notebook pods.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("poll: Run called twice")
	}
	defer w.queue.ShutDown()
	for _, sp := range w.spaces {
		sp.factory.Start(ctx.Done())
		defer sp.factory.Shutdown()
	}
	if !cache.WaitForCacheSync(ctx.Done(), w.PodsSynced) {
		return fmt.Errorf("waiting for the pod cache to sync: %w", context.Cause(ctx))
	}
	var wg sync.WaitGroup
	for _, sp := range w.spaces {
		wg.Go(func() { sp.eventsRf.RunWithContext(ctx) })
	}
	for range w.opts.Workers {
		wg.Go(func() { wait.UntilWithContext(ctx, w.runWorker, time.Second) })
	}
	wg.Go(func() { wait.UntilWithContext(ctx, func(context.Context) { w.sweep() }, sweepInterval) })
	w.log.Info("pod watcher started", zap.Strings("namespaces", w.Namespaces()),
		zap.String("selector", w.opts.LabelSelector), zap.Int("workers", w.opts.Workers), zap.Bool("elected", w.opts.Elected))
	<-ctx.Done()
	w.queue.ShutDown()
	wg.Wait()
	return nil
}

// HasSynced reports whether both the pod and the event caches hold a full
// LIST; the history's rescan waits for it (/readyz for PodsSynced alone).
func (w *Watcher) HasSynced() bool {
	if !w.PodsSynced() {
		return false
	}
	for _, sp := range w.spaces {
		if !sp.events.hasSynced() {
			return false
		}
	}
	return true
}

// Status answers from the cache only. Until the pod cache has synced every
// pod reads pending: answering "absent" then would make the hub drop live
// servers (the KubeSpawner 5.0 regression, kubespawner.md §3.6).
func (w *Watcher) Status(namespace, pod string) Status {
	if !w.PodsSynced() {
		return Status{State: StatePending}
	}
	key := cache.NewObjectName(namespace, pod)
	p, ok := w.cachedPod(key)
	if !ok {
		st := Status{State: StateAbsent, ExitCode: defaultExitCode}
		if info, ok := w.LastStop(namespace, pod); ok {
			st.ExitCode = info.ExitCode
			st.Stop = &info
		}
		return st
	}
	state, info := classify(p)
	st := Status{State: state, Pod: p}
	if state != StateStopped {
		return st
	}
	w.mu.Lock()
	if rec, ok := w.records[p.UID]; ok && rec.key == key {
		cp := rec.info
		info = &cp
	}
	w.mu.Unlock()
	if info.At.IsZero() {
		info.At = w.clock.Now()
	}
	st.ExitCode = info.ExitCode
	st.Stop = info
	return st
}

// Pods returns all cached pods, as kept by trimPod. Their maps and slices
// are the cache's: never modify them.
func (w *Watcher) Pods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, sp := range w.spaces {
		for _, obj := range sp.pods.GetIndexer().List() {
			if pod := asPod(obj); pod != nil {
				out = append(out, pod)
			}
		}
	}
	return out
}

// PodMetas returns the metadata of every cached pod, without making each
// pod whole as Pods does: a list of every server reads the identities
// alone. They are the cache's own: never modify them.
func (w *Watcher) PodMetas() []*metav1.ObjectMeta {
	var out []*metav1.ObjectMeta
	for _, sp := range w.spaces {
		objs := sp.pods.GetIndexer().List()
		out = slices.Grow(out, len(objs))
		for _, obj := range objs {
			if c, ok := obj.(*cachedPod); ok {
				out = append(out, &c.ObjectMeta)
			}
		}
	}
	return out
}

// PodsOf returns the cached pods labelled with a server's key (see
// serverid.Key), in every watched namespace, oldest first. Their maps and
// slices are the cache's: never modify them.
func (w *Watcher) PodsOf(key string) []*corev1.Pod {
	cached := w.keys.of(key)
	if len(cached) > 1 {
		sort.Slice(cached, func(i, j int) bool { return cached[i].CreationTimestamp.Before(&cached[j].CreationTimestamp) })
	}
	out := make([]*corev1.Pod, len(cached))
	for i, c := range cached {
		out[i] = c.pod()
	}
	return out
}

// OnlyPodOf returns the version of the cached pod labelled with a server's
// key when it is the only one, and how many there are (PodsOf lists them
// when not one). It allocates nothing: the poll's answer cache checks with
// it, at every hit, that the pod it answered from is still the server's one
// pod, unchanged.
func (w *Watcher) OnlyPodOf(key string) (PodVersion, int) {
	return w.keys.only(key)
}

// Events returns the cached events of a pod, oldest first. They are shared
// cache objects: never modify them.
func (w *Watcher) Events(namespace, pod string) []*corev1.Event {
	sp := w.spaceOf(namespace)
	if sp == nil {
		return nil
	}
	return sp.events.eventsOf(cache.NewObjectName(namespace, pod))
}

// NewestEvent returns the pod's newest cached event, the last of Events,
// or nil; it makes that one alone from the cache's compact copies.
func (w *Watcher) NewestEvent(namespace, pod string) *corev1.Event {
	sp := w.spaceOf(namespace)
	if sp == nil {
		return nil
	}
	return sp.events.newestOf(cache.NewObjectName(namespace, pod))
}

// LastStop says why the latest pod of that name stopped. It is kept after the
// pod is gone, for stopRetention, until ForgetStop.
func (w *Watcher) LastStop(namespace, pod string) (StopInfo, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l, ok := w.last[cache.NewObjectName(namespace, pod)]
	return l.info, ok
}

// Subscribe returns a channel that is signalled on every change to the pod
// or its events, or its LastStop. Signals do not block and coalesce: a
// receiver re-reads Status and Events after each. The channel is never
// closed; call cancel when done.
func (w *Watcher) Subscribe(namespace, pod string) (<-chan struct{}, func()) {
	key := cache.NewObjectName(namespace, pod)
	s := &subscriber{ch: make(chan struct{}, 1)}
	w.subMu.Lock()
	m := w.subs[key]
	if m == nil {
		m = map[*subscriber]struct{}{}
		w.subs[key] = m
	}
	m[s] = struct{}{}
	w.subMu.Unlock()
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			w.subMu.Lock()
			defer w.subMu.Unlock()
			delete(w.subs[key], s)
			if len(w.subs[key]) == 0 {
				delete(w.subs, key)
			}
		})
	}
}

// ExpectStop tells the watcher that the service itself is stopping that pod,
// so its stop is not reported to the Notifier.
func (w *Watcher) ExpectStop(namespace, pod string) {
	key := cache.NewObjectName(namespace, pod)
	w.mu.Lock()
	w.expect[key] = w.clock.Now()
	w.mu.Unlock()
}

// ForgetStop is called when a new spawn of that pod begins: it clears
// LastStop and ExpectStop, and drops any pending report about an earlier pod
// of that name, which would otherwise stop the new server.
func (w *Watcher) ForgetStop(namespace, pod string) {
	key := cache.NewObjectName(namespace, pod)
	w.mu.Lock()
	delete(w.last, key)
	delete(w.expect, key)
	for _, rec := range w.records {
		if rec.key == key {
			rec.notified = true
		}
	}
	w.mu.Unlock()
	// Keep the new pod's events even if they beat the pod into the cache.
	if sp := w.spaceOf(namespace); sp != nil {
		sp.events.remember(key)
	}
	w.signal(key)
}

// cachedPod reads the pod cache, as a corev1.Pod.
func (w *Watcher) cachedPod(key cache.ObjectName) (*corev1.Pod, bool) {
	c, ok := w.lookup(key)
	if !ok {
		return nil, false
	}
	return c.pod(), true
}

// lookup reads the pod cache as it is kept.
func (w *Watcher) lookup(key cache.ObjectName) (*cachedPod, bool) {
	sp := w.spaceOf(key.Namespace)
	if sp == nil {
		return nil, false
	}
	obj, exists, err := sp.pods.GetIndexer().GetByKey(key.String())
	if err != nil || !exists {
		return nil, false
	}
	pod, ok := obj.(*cachedPod)
	return pod, ok
}

func (w *Watcher) signal(key cache.ObjectName) {
	w.subMu.Lock()
	defer w.subMu.Unlock()
	for s := range w.subs[key] {
		select {
		case s.ch <- struct{}{}:
		default:
		}
	}
}

func (w *Watcher) podAdded(obj any) {
	pod, ok := obj.(*cachedPod)
	if !ok {
		return
	}
	w.keys.set(nil, pod)
	key := cache.MetaObjectToName(pod)
	if sp := w.spaceOf(pod.Namespace); sp != nil {
		sp.events.podAdded(key)
	}
	w.queue.Add(key)
	w.signal(key)
}

func (w *Watcher) podUpdated(oldObj, newObj any) {
	oldPod, ok1 := oldObj.(*cachedPod)
	newPod, ok2 := newObj.(*cachedPod)
	if !ok1 || !ok2 {
		return
	}
	// Even an unchanged pod (a relist) is a new object in the store: keep
	// no pointer to the one it replaced.
	w.keys.set(oldPod, newPod)
	if oldPod.ResourceVersion == newPod.ResourceVersion {
		return
	}
	key := cache.MetaObjectToName(newPod)
	// When the informer delivered a failure, to tell informer lag from
	// queue lag (the stop benchmark reads it).
	if newPod.phase == corev1.PodFailed && oldPod.phase != corev1.PodFailed {
		if ce := w.log.Check(zap.DebugLevel, "pod failed: seen by the informer"); ce != nil {
			ce.Write(zap.String("user", newPod.Annotations[serverid.AnnotationUser]), zap.String("server", newPod.Annotations[serverid.AnnotationServer]),
				zap.String("pod", newPod.Name), zap.String("namespace", newPod.Namespace), zap.Int("queue", w.queue.Len()))
		}
	}
	w.queue.Add(key)
	w.signal(key)
}

// transformPod is the pod informer's transform: trimPod, and in debug mode
// a line when the reflector hands a failed pod to the informer's queue.
// With the handler's line below, the stop benchmark tells the watch's
// delivery from the time the event waits in client-go's FIFO.
func (w *Watcher) transformPod(obj any) (any, error) {
	out, err := trimPod(obj)
	if p, ok := out.(*cachedPod); ok && p.phase == corev1.PodFailed && p.DeletionTimestamp == nil {
		if ce := w.log.Check(zap.DebugLevel, "pod failed: queued by the reflector"); ce != nil {
			ce.Write(zap.String("user", p.Annotations[serverid.AnnotationUser]), zap.String("server", p.Annotations[serverid.AnnotationServer]),
				zap.String("pod", p.Name), zap.String("namespace", p.Namespace))
		}
	}
	return out, err
}

// podDeleted records the pod's last state: once it is gone from the cache,
// the worker has nothing else to learn the user and server from.
func (w *Watcher) podDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	cached, ok := obj.(*cachedPod)
	if !ok {
		return
	}
	w.keys.remove(cached)
	pod := cached.pod()
	key := cache.MetaObjectToName(pod)
	w.mu.Lock()
	m := w.gone[key]
	if m == nil {
		m = map[types.UID]gonePod{}
		w.gone[key] = m
	}
	now := w.clock.Now()
	m[pod.UID] = gonePod{pod: pod, at: now}
	// Every replica answers polls, not only the one that reacts: keep
	// why the pod ended for them too.
	if _, recorded := w.records[pod.UID]; !recorded {
		info := deletedStopInfo(pod)
		if info.At.IsZero() {
			info.At = now
		}
		w.setLastLocked(key, *info, now)
	}
	w.mu.Unlock()
	if sp := w.spaceOf(pod.Namespace); sp != nil {
		sp.events.remember(key)
	}
	w.queue.Add(key)
	w.signal(key)
}

func (w *Watcher) runWorker(ctx context.Context) {
	for w.processNextItem(ctx) {
	}
}

func (w *Watcher) processNextItem(ctx context.Context) bool {
	key, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(key)
	if err := w.sync(ctx, key); err != nil {
		w.log.Warn("stop reaction failed, will retry", zap.String("pod", key.Name),
			zap.String("namespace", key.Namespace), zap.Int("retries", w.queue.NumRequeues(key)), zap.Error(err))
		w.queue.AddRateLimited(key)
		return true
	}
	w.queue.Forget(key)
	return true
}

// SetLeading switches the stop reaction on or off for an elected watcher.
// On taking the lead every cached pod is looked at again, so a stop that
// happened while another replica led (or none did) is still handled: the
// pods it concerns are kept by FinalizerStopReport until reported.
func (w *Watcher) SetLeading(leading bool) {
	if w.leading.Swap(leading) == leading {
		return
	}
	w.log.Info("stop reaction lead changed", zap.Bool("leading", leading))
	if !leading {
		return
	}
	for _, sp := range w.spaces {
		for _, key := range sp.pods.GetIndexer().ListKeys() {
			if name, err := cache.ParseObjectName(key); err == nil {
				w.queue.Add(name)
			}
		}
	}
	w.mu.Lock()
	for key := range w.gone {
		w.queue.Add(key)
	}
	w.mu.Unlock()
}

// releaser is the client that releases pods.
func (w *Watcher) releaser() kubernetes.Interface {
	if w.opts.ReleaseClient != nil {
		return w.opts.ReleaseClient
	}
	return w.client
}

// Leading reports whether this watcher runs the stop reaction now.
func (w *Watcher) Leading() bool { return !w.opts.Elected || w.leading.Load() }

// sync converges one pod name: every pod of that name that went away is
// reported, and the pod now cached is deleted and reported if it is stopped
// or being deleted, or removed if its start deadline passed. It reads the
// cache each time, so repeated or missed events converge. A follower does
// nothing: the leader's rescan covers what it skips.
func (w *Watcher) sync(ctx context.Context, key cache.ObjectName) error {
	leading := w.Leading()
	var errs []error
	w.mu.Lock()
	var gone []gonePod
	for uid, g := range w.gone[key] {
		if managed(g.pod) {
			// Its finalizer kept it until its stop was reported (or was
			// asked for): nothing is left to do, on any replica.
			w.forgetGoneLocked(key, uid)
			continue
		}
		gone = append(gone, g)
	}
	w.mu.Unlock()
	if !leading {
		return nil
	}
	for _, g := range gone {
		if err := w.reactGone(ctx, key, g); err != nil {
			errs = append(errs, err)
		}
	}

	pod, ok := w.cachedPod(key)
	if !ok {
		return errors.Join(errs...)
	}
	if owned, why := w.owns(pod); !owned {
		w.log.Warn("ignoring a pod that is not the server it names", zap.String("pod", pod.Name),
			zap.String("namespace", pod.Namespace), zap.String("user", pod.Annotations[AnnotationUser]),
			zap.String("server", pod.Annotations[AnnotationServerName]), zap.String("why", why))
		return errors.Join(errs...)
	}
	state, info := classify(pod)
	switch {
	case pod.DeletionTimestamp != nil && serverid.HasFinalizer(pod):
		if state != StateStopped {
			// Deleted while it ran: by someone else, or by a stop whose
			// replica died before releasing the pod.
			info = deletedStopInfo(pod)
			info.PodDeleted = false
		}
		errs = append(errs, w.reactStopped(ctx, key, pod, info))
	case state == StateStopped:
		errs = append(errs, w.reactStopped(ctx, key, pod, info))
	case state == StatePending && pod.DeletionTimestamp == nil:
		errs = append(errs, w.enforceDeadline(ctx, key, pod))
	}
	return errors.Join(errs...)
}

// owns applies Options.Owns.
func (w *Watcher) owns(pod *corev1.Pod) (bool, string) {
	if w.opts.Owns == nil {
		return true, ""
	}
	return w.opts.Owns(pod)
}

// enforceDeadline removes a pod that is still not running DeadlineGrace
// after its start deadline: the replica that started it would have, so it
// is gone. The spawn fails for the hub through poll and progress.
func (w *Watcher) enforceDeadline(ctx context.Context, key cache.ObjectName, pod *corev1.Pod) error {
	deadline, ok := serverid.StartDeadline(pod)
	if !ok {
		return nil
	}
	left := deadline.Add(w.opts.DeadlineGrace).Sub(w.clock.Now())
	if left > 0 {
		w.queue.AddAfter(key, left)
		return nil
	}
	w.log.Warn("start deadline passed; removing the pod", zap.String("user", pod.Annotations[AnnotationUser]),
		zap.String("server", pod.Annotations[AnnotationServerName]), zap.String("pod", pod.Name),
		zap.String("namespace", pod.Namespace), zap.Time("deadline", deadline))
	if err := Release(ctx, w.releaser(), pod.Namespace, pod.Name, pod.UID, serverid.StopByTimeout); err != nil {
		return err
	}
	return w.deletePod(ctx, pod)
}

func (w *Watcher) reactStopped(ctx context.Context, key cache.ObjectName, pod *corev1.Pod, info *StopInfo) error {
	rec := w.recordStop(key, pod.UID, serverRefOf(pod), *info, false, requestedStop(pod))
	w.mu.Lock()
	deleted := rec.deleted || pod.DeletionTimestamp != nil
	w.mu.Unlock()
	// The history's record, the delete and the hub's report do not wait
	// for each other: each is one round trip to a different server. The
	// pod is released (its finalizer dropped) only once all are done, so a
	// replica that dies midway leaves the rest to the next leader. The hub
	// is told even if the delete failed (it is retried): the hub sees the
	// stop through poll either way and should not wait for RBAC or API
	// trouble to be fixed.
	var delErr, notifyErr error
	var wg sync.WaitGroup
	wg.Go(func() { w.tellOnStop(ctx, pod, rec) })
	if w.opts.DeleteStoppedPods && !deleted {
		wg.Go(func() {
			if delErr = w.deletePod(ctx, pod); delErr == nil {
				w.mu.Lock()
				rec.deleted = true
				w.mu.Unlock()
			}
		})
	}
	wg.Go(func() { notifyErr = w.notify(ctx, pod.UID) })
	wg.Wait()
	if notifyErr != nil {
		return errors.Join(delErr, notifyErr)
	}
	// Told (or nothing to tell): the pod may go now.
	if serverid.HasFinalizer(pod) && (pod.DeletionTimestamp != nil || rec.deleted || !w.opts.DeleteStoppedPods) {
		if err := Release(ctx, w.releaser(), pod.Namespace, pod.Name, pod.UID, ""); err != nil {
			return errors.Join(delErr, err)
		}
	}
	return delErr
}

// tellOnStop hands a stop to Options.OnStop once per pod UID.
func (w *Watcher) tellOnStop(ctx context.Context, pod *corev1.Pod, rec *stopRecord) {
	if w.opts.OnStop == nil {
		return
	}
	w.mu.Lock()
	told := rec.toldOnStop
	rec.toldOnStop = true
	info := rec.info
	w.mu.Unlock()
	if !told {
		w.opts.OnStop(ctx, pod, info)
	}
}

// requestedStop reports whether someone asked for the pod to stop (the hub,
// a timed-out spawn): such a stop is not the hub's news.
func requestedStop(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[serverid.AnnotationStopRequested]
	return ok
}

// Release records on a pod who asked for it to stop (by, unless empty) and
// drops FinalizerStopReport, in one patch. The UID in the patch makes it
// fail, harmlessly, on a newer pod of the same name.
func Release(ctx context.Context, client kubernetes.Interface, namespace, name string, uid types.UID, by string) error {
	meta := map[string]any{
		"uid":                                 uid,
		"$deleteFromPrimitiveList/finalizers": []string{serverid.FinalizerStopReport},
	}
	if by != "" {
		meta["annotations"] = map[string]string{serverid.AnnotationStopRequested: by}
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return fmt.Errorf("encoding the release patch: %w", err)
	}
	_, err = client.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	case apierrors.IsInvalid(err) && uid != "":
		// The UID did not match: the name belongs to a newer pod now.
		return nil
	default:
		return fmt.Errorf("releasing pod %s/%s: %w", namespace, name, err)
	}
}

func (w *Watcher) reactGone(ctx context.Context, key cache.ObjectName, g gonePod) error {
	info := deletedStopInfo(g.pod)
	if info.At.IsZero() {
		info.At = g.at
	}
	if owned, _ := w.owns(g.pod); owned {
		rec := w.recordStop(key, g.pod.UID, serverRefOf(g.pod), *info, true, requestedStop(g.pod))
		w.tellOnStop(ctx, g.pod, rec)
		if err := w.notify(ctx, g.pod.UID); err != nil {
			return err
		}
	}
	w.mu.Lock()
	w.forgetGoneLocked(key, g.pod.UID)
	w.mu.Unlock()
	return nil
}

// forgetGoneLocked drops a gone pod and its stop record; w.mu is held.
func (w *Watcher) forgetGoneLocked(key cache.ObjectName, uid types.UID) {
	delete(w.gone[key], uid)
	if len(w.gone[key]) == 0 {
		delete(w.gone, key)
	}
	delete(w.records, uid)
}

// managed reports whether the pod was made with FinalizerStopReport (this
// version's pods carry a start deadline with it): such a pod leaves the
// API only after its stop was reported, so its going away is no news.
func managed(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[serverid.AnnotationStartDeadline]
	return ok || serverid.HasFinalizer(pod)
}

// recordStop returns the stop record of a pod UID, creating it (and logging
// the stop once) on first sight. gone marks the pod object as deleted.
func (w *Watcher) recordStop(key cache.ObjectName, uid types.UID, ref ServerRef, info StopInfo, gone, requested bool) *stopRecord {
	now := w.clock.Now()
	w.mu.Lock()
	rec, ok := w.records[uid]
	changed := !ok
	if !ok {
		if info.At.IsZero() {
			info.At = now
		}
		rec = &stopRecord{key: key, ref: ref, info: info, at: now, requested: requested}
		w.records[uid] = rec
	}
	if gone && !rec.info.PodDeleted {
		rec.info.PodDeleted = true
		changed = true
	}
	if gone {
		rec.deleted = true
	}
	rec.requested = rec.requested || requested
	if changed {
		w.setLastLocked(key, rec.info, now)
	}
	logged := rec.info
	w.mu.Unlock()
	if !ok {
		w.log.Info("server stopped",
			zap.String("user", ref.User), zap.String("server", ref.Server),
			zap.String("pod", ref.Pod), zap.String("namespace", ref.Namespace),
			zap.String("phase", logged.Phase), zap.String("reason", logged.Reason),
			zap.String("message", logged.Message), zap.String("container_reason", logged.ContainerReason),
			zap.Int("exit_code", logged.ExitCode), zap.Bool("pod_deleted", logged.PodDeleted),
			zap.String("uid", string(uid)))
	}
	if changed {
		w.signal(key)
	}
	return rec
}

func (w *Watcher) setLastLocked(key cache.ObjectName, info StopInfo, now time.Time) {
	if _, ok := w.last[key]; !ok && len(w.last) >= maxLastStops {
		var oldest cache.ObjectName
		var oldestAt time.Time
		for k, l := range w.last {
			if oldestAt.IsZero() || l.at.Before(oldestAt) {
				oldest, oldestAt = k, l.at
			}
		}
		delete(w.last, oldest)
	}
	w.last[key] = lastStop{info: info, at: now}
}

// deletePod deletes a stopped pod at once. The UID precondition makes sure a
// new pod of the same name is never deleted. At debug level it logs when
// the request went out (after client-go's rate limiter) and how long the
// API server took: how soon a stop is acted on, told apart from the API
// server's own latency.
func (w *Watcher) deletePod(ctx context.Context, pod *corev1.Pod) error {
	ce := w.log.Check(zap.DebugLevel, "stopped pod delete sent")
	var sent atomic.Int64 // unix nanoseconds the request was written
	if ce != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
			sent.CompareAndSwap(0, time.Now().UnixNano())
		}})
	}
	err := w.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if ce != nil && sent.Load() != 0 {
		at := time.Unix(0, sent.Load())
		ce.Write(zap.String("pod", pod.Name), zap.String("namespace", pod.Namespace), zap.Time("sent", at),
			zap.Duration("took", time.Since(at)), zap.Error(err))
	}
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		// UID precondition failed: that name now belongs to another pod, ours is gone.
		return nil
	default:
		return fmt.Errorf("deleting stopped pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
}

// notify tells the Notifier about a stop once per pod UID.
func (w *Watcher) notify(ctx context.Context, uid types.UID) error {
	w.mu.Lock()
	rec, ok := w.records[uid]
	if !ok || rec.notified {
		w.mu.Unlock()
		return nil
	}
	_, expected := w.expect[rec.key]
	expected = expected || rec.requested
	ref, info := rec.ref, rec.info
	w.mu.Unlock()

	skip := expected || w.opts.Notifier == nil
	if !skip {
		// A newer pod of that name means the server was spawned again;
		// reporting the old stop would stop the new server.
		if cur, ok := w.lookup(rec.key); ok && cur.UID != uid {
			skip = true
		}
	}
	if !skip && ref.User == "" {
		w.log.Warn("stopped pod names no hub user, not telling the hub",
			zap.String("pod", ref.Pod), zap.String("namespace", ref.Namespace))
		skip = true
	}
	if !skip {
		if err := w.opts.Notifier.ServerStopped(ctx, ref, info); err != nil {
			return fmt.Errorf("telling the hub that %s/%s stopped: %w", ref.User, ref.Server, err)
		}
	}
	w.mu.Lock()
	rec.notified = true
	w.mu.Unlock()
	return nil
}

// sweep expires what is kept for pods that are gone.
func (w *Watcher) sweep() {
	for _, sp := range w.spaces {
		sp.events.sweep()
	}
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, l := range w.last {
		if now.Sub(l.at) >= stopRetention {
			delete(w.last, k)
		}
	}
	for k, t := range w.expect {
		if now.Sub(t) >= stopRetention {
			delete(w.expect, k)
		}
	}
	for key, m := range w.gone {
		for uid, g := range m {
			if now.Sub(g.at) >= stopRetention {
				w.forgetGoneLocked(key, uid)
			}
		}
	}
	for uid, rec := range w.records {
		if _, pending := w.gone[rec.key][uid]; pending || now.Sub(rec.at) < stopRetention {
			continue
		}
		if cur, ok := w.lookup(rec.key); ok && cur.UID == uid {
			continue
		}
		delete(w.records, uid)
	}
}

// podHandler hands a handler added with AddPodHandler corev1.Pods made from
// the cached ones.
type podHandler struct{ h cache.ResourceEventHandler }

func (p podHandler) OnAdd(obj any, isInInitialList bool) {
	if pod := asPod(obj); pod != nil {
		p.h.OnAdd(pod, isInInitialList)
	}
}

func (p podHandler) OnUpdate(oldObj, newObj any) {
	oldPod, newPod := asPod(oldObj), asPod(newObj)
	if oldPod != nil && newPod != nil {
		p.h.OnUpdate(oldPod, newPod)
	}
}

func (p podHandler) OnDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		if pod := asPod(d.Obj); pod != nil {
			p.h.OnDelete(cache.DeletedFinalStateUnknown{Key: d.Key, Obj: pod})
		}
		return
	}
	if pod := asPod(obj); pod != nil {
		p.h.OnDelete(pod)
	}
}
