package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/spawner"
)

// sparkWorkerCount is the number of reconciler workers.
const sparkWorkerCount = 2

// sparkSupport is the manager's part for Spark clusters: their caches, and
// the reconciler that has stopped Spark pods replaced and removes a cluster
// whose notebook stopped. It exists only when the configuration can declare
// a cluster.
type sparkSupport struct {
	cache *sparkCache
	queue workqueue.TypedRateLimitingInterface[cache.ObjectName]

	mu sync.Mutex
	// owners are the subscriptions to each cluster's notebook pod.
	owners map[cache.ObjectName]ownerWatch
	// replaced are each cluster's recent stopped pods, for the status.
	replaced map[cache.ObjectName][]SparkPodStop
}

type ownerWatch struct {
	pod    string
	cancel func()
}

func newSparkSupport(client kubernetes.Interface, namespace string) (*sparkSupport, error) {
	c, err := newSparkCache(client, namespace)
	if err != nil {
		return nil, err
	}
	s := &sparkSupport{
		cache:    c,
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName]()),
		owners:   map[cache.ObjectName]ownerWatch{},
		replaced: map[cache.ObjectName][]SparkPodStop{},
	}
	c.onChange = s.queue.Add
	return s, nil
}

// initSpark sets up Spark support when some spawn can declare a cluster.
func (m *Manager) initSpark() error {
	if !m.cfg.UsesSpark() {
		return nil
	}
	ns := m.base.Namespace
	if m.base.EnableUserNamespaces {
		ns = ""
	}
	s, err := newSparkSupport(m.client, ns)
	if err != nil {
		return fmt.Errorf("setting up Spark clusters: %w", err)
	}
	m.spark = s
	return nil
}

// Run runs the manager's own caches and workers, those of the Spark
// clusters, until ctx ends. Without Spark in the configuration it only
// waits for ctx.
func (m *Manager) Run(ctx context.Context) error {
	if m.spark == nil {
		<-ctx.Done()
		return nil
	}
	defer m.spark.cache.shutdown()
	defer m.spark.queue.ShutDown()
	if err := m.spark.cache.run(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before the caches synced
		}
		return err
	}
	var wg sync.WaitGroup
	for range sparkWorkerCount {
		wg.Go(func() { wait.UntilWithContext(ctx, m.runSparkWorker, time.Second) })
	}
	m.log.Info("spark clusters watched", zap.Int("workers", sparkWorkerCount))
	<-ctx.Done()
	m.spark.queue.ShutDown()
	wg.Wait()
	m.spark.unwatchAll()
	return nil
}

// HasSynced reports whether the manager's caches hold a full LIST; /readyz
// reports it beside the pod watcher's.
func (m *Manager) HasSynced() bool {
	return m.spark == nil || m.spark.cache.hasSynced()
}

// sparkKeyOf is the cluster key of the server whose notebook pod is ref.
func sparkKeyOf(ref podRef) cache.ObjectName {
	return cache.NewObjectName(ref.namespace, spawner.SparkClusterID(ref.name))
}

// buildSpark returns the Spark cluster of a spawn, nil if it has none, and
// points the notebook pod at it.
func (m *Manager) buildSpark(req spawner.Request, objs *spawner.Objects, s *spawner.Settings) (*spawner.SparkCluster, error) {
	c, err := spawner.BuildSpark(s, req, objs.Pod)
	if err != nil || c == nil {
		return nil, err
	}
	if m.spark == nil {
		// UsesSpark covers every override; this is a defect, not input.
		return nil, errors.New("spark cluster requested but Spark support is not set up")
	}
	return c, nil
}

// sparkNeedsCheck reports whether a spawn starts its cluster from nothing,
// so that its quota check must count every pod it will make; a spawn that
// adopts a running notebook or meets a cluster already there does not.
func (m *Manager) sparkNeedsCheck(ref podRef) bool {
	return m.watcher.Status(ref.namespace, ref.name).Pod == nil && m.spark.cache.cluster(sparkKeyOf(ref)).empty()
}

// sparkOwnerRef makes the notebook pod the owner of a cluster object, so
// that the garbage collector removes the cluster with the pod.
func sparkOwnerRef(pod string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod, UID: uid,
		BlockOwnerDeletion: ptr.To(true), Controller: ptr.To(false)}
}

func ownedBy(o metav1.Object, uid types.UID) bool {
	for _, r := range o.GetOwnerReferences() {
		if r.Kind == "Pod" && r.UID == uid {
			return true
		}
	}
	return false
}

// checkSparkOwner refuses an object of another server: a cluster's names
// are fixed, so a namespace holds one.
func checkSparkOwner(o metav1.Object, key Key) error {
	a := o.GetAnnotations()
	if a[poll.AnnotationUser] == key.User && a[poll.AnnotationServerName] == key.Server {
		return nil
	}
	return fmt.Errorf("%s %s/%s belongs to server %q of user %q, and a namespace holds one Spark cluster: %w",
		kindOf(o), o.GetNamespace(), o.GetName(), a[poll.AnnotationServerName], a[poll.AnnotationUser], ErrConflict)
}

// ensureSpark creates the cluster's objects, owned by the notebook pod.
// Objects this pod already owns are kept (adoption after a restart), with
// no write; objects of an earlier pod of this server that the garbage
// collector has not removed yet are deleted first.
func (m *Manager) ensureSpark(ctx context.Context, c *spawner.SparkCluster, owner metav1.OwnerReference, key Key, wait time.Duration) error {
	ck := cache.NewObjectName(c.Namespace, c.ID)
	snap := m.spark.cache.cluster(ck)
	var stale []metav1.Object
	for _, o := range snap.objects() {
		if err := checkSparkOwner(o, key); err != nil {
			return err
		}
		if !ownedBy(o, owner.UID) {
			stale = append(stale, o)
		}
	}
	if len(stale) > 0 {
		if err := m.deleteSparkObjects(ctx, stale); err != nil {
			return err
		}
		if err := m.waitSpark(ctx, ck, wait, func(s sparkSnapshot) bool {
			for _, o := range s.objects() {
				if !ownedBy(o, owner.UID) {
					return false
				}
			}
			return true
		}); err != nil {
			return fmt.Errorf("waiting for the Spark cluster of an earlier pod to go: %w", err)
		}
		snap = m.spark.cache.cluster(ck)
	}
	cached := map[string]metav1.Object{}
	for _, o := range snap.objects() {
		cached[kindOf(o)+"/"+o.GetName()] = o
	}
	for _, obj := range c.Objects() {
		if o, ok := cached[kindOf(obj)+"/"+obj.GetName()]; ok && ownedBy(o, owner.UID) {
			continue
		}
		obj.SetOwnerReferences([]metav1.OwnerReference{owner})
		err := m.createSparkObject(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			existing, gerr := m.getSparkObject(ctx, obj)
			if gerr != nil {
				return fmt.Errorf("reading existing %s %s/%s: %w", kindOf(obj), obj.GetNamespace(), obj.GetName(), gerr)
			}
			if err := checkSparkOwner(existing, key); err != nil {
				return err
			}
			if ownedBy(existing, owner.UID) {
				continue
			}
			return fmt.Errorf("%s %s/%s still belongs to an earlier pod of this server: %w", kindOf(obj), obj.GetNamespace(), obj.GetName(), ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("creating %s %s/%s: %w", kindOf(obj), obj.GetNamespace(), obj.GetName(), classify(err))
		}
	}
	return nil
}

func kindOf(o metav1.Object) string {
	switch o.(type) {
	case *corev1.ConfigMap:
		return "ConfigMap"
	case *corev1.Service:
		return "Service"
	case *appsv1.Deployment:
		return "Deployment"
	}
	return fmt.Sprintf("%T", o)
}

func (m *Manager) createSparkObject(ctx context.Context, obj metav1.Object) error {
	var err error
	opts := metav1.CreateOptions{}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		_, err = m.client.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, opts)
	case *corev1.Service:
		_, err = m.client.CoreV1().Services(o.Namespace).Create(ctx, o, opts)
	case *appsv1.Deployment:
		_, err = m.client.AppsV1().Deployments(o.Namespace).Create(ctx, o, opts)
	default:
		err = fmt.Errorf("unexpected Spark object %T", obj)
	}
	return err
}

func (m *Manager) getSparkObject(ctx context.Context, obj metav1.Object) (metav1.Object, error) {
	opts := metav1.GetOptions{}
	ns, name := obj.GetNamespace(), obj.GetName()
	switch obj.(type) {
	case *corev1.ConfigMap:
		return m.client.CoreV1().ConfigMaps(ns).Get(ctx, name, opts)
	case *corev1.Service:
		return m.client.CoreV1().Services(ns).Get(ctx, name, opts)
	case *appsv1.Deployment:
		return m.client.AppsV1().Deployments(ns).Get(ctx, name, opts)
	}
	return nil, fmt.Errorf("unexpected Spark object %T", obj)
}

// deleteSparkObjects deletes objects as the cache shows them; the UID
// precondition leaves alone a newer object of the same name. Deployments go
// in the background: the garbage collector then removes their ReplicaSets
// and pods, which the cache shows going. (Foreground deletion, which keeps
// each Deployment until its pods are gone, made the garbage collector
// nearly three times slower: 43 s against 16 s to remove 200 clusters.)
func (m *Manager) deleteSparkObjects(ctx context.Context, objs []metav1.Object) error {
	var errs []error
	for _, obj := range objs {
		opts := metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(obj.GetUID()))}
		ns, name := obj.GetNamespace(), obj.GetName()
		var err error
		switch obj.(type) {
		case *corev1.ConfigMap:
			err = m.client.CoreV1().ConfigMaps(ns).Delete(ctx, name, opts)
		case *corev1.Service:
			err = m.client.CoreV1().Services(ns).Delete(ctx, name, opts)
		case *appsv1.Deployment:
			if obj.GetDeletionTimestamp() != nil {
				continue // already going
			}
			opts.PropagationPolicy = ptr.To(metav1.DeletePropagationBackground)
			err = m.client.AppsV1().Deployments(ns).Delete(ctx, name, opts)
		default:
			err = fmt.Errorf("unexpected Spark object %T", obj)
		}
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting %s %s/%s: %w", kindOf(obj), ns, name, err))
		}
	}
	return errors.Join(errs...)
}

// removeSpark deletes the cluster of the server whose notebook pod is ref,
// as far as the cache shows one.
func (m *Manager) removeSpark(ctx context.Context, ref podRef) error {
	if m.spark == nil {
		return nil
	}
	return m.deleteSparkObjects(ctx, m.spark.cache.cluster(sparkKeyOf(ref)).objects())
}

// waitSparkGone waits until nothing of the cluster is left in the cache:
// objects, ReplicaSets, EndpointSlices and pods.
func (m *Manager) waitSparkGone(ctx context.Context, ref podRef, wait time.Duration) error {
	if m.spark == nil {
		return nil
	}
	return m.waitSpark(ctx, sparkKeyOf(ref), wait, sparkSnapshot.empty)
}

// waitSpark waits, on the cache's change signal, until done holds for the
// cluster.
func (m *Manager) waitSpark(ctx context.Context, key cache.ObjectName, wait time.Duration, done func(sparkSnapshot) bool) error {
	changed, unsubscribe := m.spark.cache.subscribe(key)
	defer unsubscribe()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for !done(m.spark.cache.cluster(key)) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
	return nil
}

// subscribeSpark returns the change signal of a spawn's cluster; nil (which
// never fires) for a spawn without one.
func (m *Manager) subscribeSpark(sp *spawn) (<-chan struct{}, func()) {
	if sp.spark == nil {
		return nil, func() {}
	}
	return m.spark.cache.subscribe(cache.NewObjectName(sp.spark.Namespace, sp.spark.ID))
}

// sparkMilestones are the cluster's progress events already reported.
type sparkMilestones struct {
	announced, master, reachable bool
	workers                      int
}

// sparkProgress appends a progress event for each new milestone of the
// spawn's cluster and returns the progress reached. Milestones are read from
// the cache on every change, so a missed signal only delays them.
func (m *Manager) sparkProgress(sp *spawn, progress int) int {
	if sp.spark == nil {
		return progress
	}
	v := newSparkView(m.spark.cache.cluster(cache.NewObjectName(sp.spark.Namespace, sp.spark.ID)))
	add := func(msg string) {
		progress += (90 - progress) / 3
		p := progress
		sp.events.append(Event{Progress: &p, Message: msg})
	}
	seen := &sp.sparkSeen
	if !seen.announced {
		seen.announced = true
		add(fmt.Sprintf("Spark cluster requested: a master and %d workers at %s", sp.spark.Workers, spawner.SparkMasterURL))
	}
	if name := v.readyMaster(); name != "" && !seen.master {
		seen.master = true
		add("Spark master " + name + " is ready")
	}
	if n := v.readyWorkers(); n > seen.workers {
		seen.workers = n
		add(fmt.Sprintf("Spark workers ready: %d/%d", n, sp.spark.Workers))
	}
	if eps := v.readyEndpoints(); len(eps) > 0 && !seen.reachable {
		seen.reachable = true
		add(fmt.Sprintf("Spark master reachable at %s (endpoint %s)", spawner.SparkMasterURL, eps[0]))
	}
	return progress
}

// sparkReady reports whether the spawn's cluster, if any, lets the spawn
// end: its master is reachable through the Service's endpoints.
func (m *Manager) sparkReady(sp *spawn) bool {
	return sp.spark == nil || len(newSparkView(m.spark.cache.cluster(cache.NewObjectName(sp.spark.Namespace, sp.spark.ID))).readyEndpoints()) > 0
}

// sparkFailure says why the spawn's cluster cannot come up, or "": a
// ReplicaSet refused its pods by the quota or by pod security, which no
// retry fixes while the spawn waits.
func (m *Manager) sparkFailure(ctx context.Context, sp *spawn) string {
	if sp.spark == nil {
		return ""
	}
	for _, d := range newSparkView(m.spark.cache.cluster(cache.NewObjectName(sp.spark.Namespace, sp.spark.ID))).deployments() {
		msg := replicaFailure(d)
		switch {
		case strings.Contains(msg, "exceeded quota"):
			return fmt.Sprintf("the Spark cluster cannot start: Deployment %s: %s", d.Name, m.explainQuotaRefusal(ctx, d.Namespace, msg))
		case strings.Contains(msg, "violates PodSecurity"):
			return fmt.Sprintf("the Spark cluster cannot start: Deployment %s: %s", d.Name, msg)
		}
	}
	return ""
}

// sparkState describes the spawn's cluster for a timeout message.
func (m *Manager) sparkState(sp *spawn) string {
	v := newSparkView(m.spark.cache.cluster(cache.NewObjectName(sp.spark.Namespace, sp.spark.ID)))
	master := "not ready"
	if v.readyMaster() != "" {
		master = "ready"
	}
	s := fmt.Sprintf("Spark master %s, %d/%d workers ready, %d ready endpoints of %s", master, v.readyWorkers(), sp.spark.Workers, len(v.readyEndpoints()), spawner.SparkServiceName)
	for _, d := range v.deployments() {
		if msg := replicaFailure(d); msg != "" {
			s += "; " + d.Name + ": " + msg
		}
	}
	return s
}

// failSpark ends a spawn whose cluster cannot come up and removes all of
// it, notebook included, so that nothing is left holding the quota.
func (m *Manager) failSpark(ctx context.Context, sp *spawn, why string, log *zap.Logger) {
	log.Warn("start: the Spark cluster cannot start; removing the server", zap.String("why", why))
	m.watcher.ExpectStop(sp.ref.namespace, sp.ref.name)
	if err := m.deletePod(ctx, sp.ref, sp.uid, 0); err != nil {
		log.Warn("start: removing the pod failed", zap.Error(err))
	}
	if err := m.removeSpark(ctx, sp.ref); err != nil {
		log.Warn("start: removing the Spark cluster failed", zap.Error(err))
	}
	m.finish(sp, "", why)
	m.metrics.spawns.WithLabelValues("failed").Inc()
}

// undoStart removes what a start created before it failed: the notebook pod
// and whatever of its cluster exists.
func (m *Manager) undoStart(ctx context.Context, ref podRef, uid types.UID, log *zap.Logger) {
	m.watcher.ExpectStop(ref.namespace, ref.name)
	// Wait for the cache too, so that a poll right after the refusal does
	// not report the removed pod as pending.
	if err := m.deletePodAndWait(ctx, ref, uid, 0, 10*time.Second); err != nil {
		log.Warn("start: removing the pod failed", zap.Error(err))
	}
	// The cache may not show objects created a moment ago; the garbage
	// collector removes those with the pod they belong to.
	if err := m.removeSpark(ctx, ref); err != nil {
		log.Warn("start: removing the Spark cluster failed", zap.Error(err))
	}
}
