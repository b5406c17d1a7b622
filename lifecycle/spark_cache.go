package lifecycle

import (
	"context"
	"fmt"
	"sort"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/dsmlp/spawner/spawner"
)

// sparkClusterIndex indexes cached Spark objects by their cluster key,
// "<namespace>/<LabelSparkCluster value>".
const sparkClusterIndex = "spark-cluster"

// lastAppliedAnnotation is kubectl's copy of a whole manifest.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// sparkCache holds informer caches of the Spark clusters' ConfigMaps,
// Services, Deployments, ReplicaSets, EndpointSlices and pods, all selected
// by LabelSparkCluster (ReplicaSets and pods have the pod template's
// labels, and the EndpointSlice controller copies a Service's labels onto
// its slices), and of the namespaces' ResourceQuotas. Every spawn,
// poll and status reads these instead of the API server. Cached objects
// are shared: never modify them.
type sparkCache struct {
	factory, quotaFactory                                               informers.SharedInformerFactory
	configMaps, services, deployments, replicaSets, slices, pods, quota cache.SharedIndexInformer
	synced                                                              []cache.InformerSynced

	// onChange is told the cluster key of every change; the reconciler
	// sets it before the informers start.
	onChange func(cache.ObjectName)

	subMu sync.Mutex
	subs  map[cache.ObjectName]map[chan struct{}]struct{}
}

func newSparkCache(client kubernetes.Interface, namespace string) (*sparkCache, error) {
	c := &sparkCache{subs: map[cache.ObjectName]map[chan struct{}]struct{}{}}
	c.factory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = spawner.LabelSparkCluster }),
		informers.WithTransform(trimSparkObject),
	)
	c.quotaFactory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace), informers.WithTransform(trimSparkObject))
	c.configMaps = c.factory.Core().V1().ConfigMaps().Informer()
	c.services = c.factory.Core().V1().Services().Informer()
	c.deployments = c.factory.Apps().V1().Deployments().Informer()
	c.replicaSets = c.factory.Apps().V1().ReplicaSets().Informer()
	c.slices = c.factory.Discovery().V1().EndpointSlices().Informer()
	c.pods = c.factory.Core().V1().Pods().Informer()
	c.quota = c.quotaFactory.Core().V1().ResourceQuotas().Informer()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: c.changed,
		UpdateFunc: func(oldObj, newObj any) {
			o, err1 := meta.Accessor(oldObj)
			n, err2 := meta.Accessor(newObj)
			if err1 == nil && err2 == nil && o.GetResourceVersion() == n.GetResourceVersion() {
				return
			}
			c.changed(newObj)
		},
		DeleteFunc: c.changed,
	}
	for _, inf := range []cache.SharedIndexInformer{c.configMaps, c.services, c.deployments, c.replicaSets, c.slices, c.pods} {
		if err := inf.AddIndexers(cache.Indexers{sparkClusterIndex: indexByCluster}); err != nil {
			return nil, fmt.Errorf("indexing Spark objects: %w", err)
		}
		reg, err := inf.AddEventHandler(handler)
		if err != nil {
			return nil, fmt.Errorf("adding a Spark event handler: %w", err)
		}
		c.synced = append(c.synced, reg.HasSynced)
	}
	c.synced = append(c.synced, c.quota.HasSynced)
	return c, nil
}

// run starts the informers and returns once their first LISTs are in, or
// when ctx ends.
func (c *sparkCache) run(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	c.quotaFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("waiting for the Spark caches to sync: %w", context.Cause(ctx))
	}
	return nil
}

func (c *sparkCache) shutdown() {
	c.factory.Shutdown()
	c.quotaFactory.Shutdown()
}

func (c *sparkCache) hasSynced() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

func indexByCluster(obj any) ([]string, error) {
	key, ok := clusterKeyOf(obj)
	if !ok {
		return nil, nil
	}
	return []string{key.String()}, nil
}

// clusterKeyOf returns the cluster an object belongs to, by its label.
func clusterKeyOf(obj any) (cache.ObjectName, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return cache.ObjectName{}, false
	}
	id, ok := m.GetLabels()[spawner.LabelSparkCluster]
	if !ok || id == "" {
		return cache.ObjectName{}, false
	}
	return cache.NewObjectName(m.GetNamespace(), id), true
}

func (c *sparkCache) changed(obj any) {
	key, ok := clusterKeyOf(obj)
	if !ok {
		return
	}
	if c.onChange != nil {
		c.onChange(key)
	}
	c.subMu.Lock()
	defer c.subMu.Unlock()
	for ch := range c.subs[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// subscribe returns a channel signalled, without blocking and coalescing,
// on every change to the cluster's objects; call cancel when done.
func (c *sparkCache) subscribe(key cache.ObjectName) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	c.subMu.Lock()
	if c.subs[key] == nil {
		c.subs[key] = map[chan struct{}]struct{}{}
	}
	c.subs[key][ch] = struct{}{}
	c.subMu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			c.subMu.Lock()
			defer c.subMu.Unlock()
			delete(c.subs[key], ch)
			if len(c.subs[key]) == 0 {
				delete(c.subs, key)
			}
		})
	}
}

// sparkSnapshot is one cluster's cached objects.
type sparkSnapshot struct {
	configMap      *corev1.ConfigMap
	service        *corev1.Service
	master, worker *appsv1.Deployment
	replicaSets    []*appsv1.ReplicaSet
	slices         []*discoveryv1.EndpointSlice
	pods           []*corev1.Pod
}

// cluster reads one cluster's objects from the caches. Objects that carry
// the label under other names (copied by hand, say) are not the cluster's.
func (c *sparkCache) cluster(key cache.ObjectName) sparkSnapshot {
	var s sparkSnapshot
	list := func(inf cache.SharedIndexInformer) []any {
		objs, err := inf.GetIndexer().ByIndex(sparkClusterIndex, key.String())
		if err != nil {
			return nil // only an unknown index fails
		}
		return objs
	}
	for _, o := range list(c.configMaps) {
		if cm, ok := o.(*corev1.ConfigMap); ok && cm.Name == spawner.SparkConfigMapName {
			s.configMap = cm
		}
	}
	for _, o := range list(c.services) {
		if svc, ok := o.(*corev1.Service); ok && svc.Name == spawner.SparkServiceName {
			s.service = svc
		}
	}
	for _, o := range list(c.deployments) {
		d, ok := o.(*appsv1.Deployment)
		switch {
		case !ok:
		case d.Name == spawner.SparkMasterName:
			s.master = d
		case d.Name == spawner.SparkWorkerName:
			s.worker = d
		}
	}
	for _, o := range list(c.replicaSets) {
		if rs, ok := o.(*appsv1.ReplicaSet); ok {
			s.replicaSets = append(s.replicaSets, rs)
		}
	}
	for _, o := range list(c.slices) {
		if es, ok := o.(*discoveryv1.EndpointSlice); ok && es.Labels[discoveryv1.LabelServiceName] == spawner.SparkServiceName {
			s.slices = append(s.slices, es)
		}
	}
	for _, o := range list(c.pods) {
		if p, ok := o.(*corev1.Pod); ok && sparkRole(p) != "" {
			s.pods = append(s.pods, p)
		}
	}
	sort.Slice(s.pods, func(i, j int) bool {
		if ri, rj := sparkRole(s.pods[i]), sparkRole(s.pods[j]); ri != rj {
			return ri < rj // master before worker
		}
		return s.pods[i].Name < s.pods[j].Name
	})
	return s
}

// quotas returns the namespace's ResourceQuotas.
func (c *sparkCache) quotas(namespace string) []*corev1.ResourceQuota {
	var out []*corev1.ResourceQuota
	for _, o := range c.quota.GetStore().List() {
		if q, ok := o.(*corev1.ResourceQuota); ok && q.Namespace == namespace {
			out = append(out, q)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// objects returns the cluster's top-level objects (not ReplicaSets, slices
// or pods, which their controllers own), those that exist, in creation
// order.
func (s sparkSnapshot) objects() []metav1.Object {
	var out []metav1.Object
	if s.configMap != nil {
		out = append(out, s.configMap)
	}
	if s.service != nil {
		out = append(out, s.service)
	}
	if s.master != nil {
		out = append(out, s.master)
	}
	if s.worker != nil {
		out = append(out, s.worker)
	}
	return out
}

// empty reports whether nothing of the cluster is left.
func (s sparkSnapshot) empty() bool {
	return len(s.objects()) == 0 && len(s.replicaSets) == 0 && len(s.slices) == 0 && len(s.pods) == 0
}

// sparkRole is "master" or "worker" for a Spark pod, else "".
func sparkRole(p *corev1.Pod) string {
	switch p.Labels[spawner.LabelComponent] {
	case spawner.SparkMasterComponent:
		return "master"
	case spawner.SparkWorkerComponent:
		return "worker"
	}
	return ""
}

// trimSparkObject is the Spark informers' transform: managedFields and
// kubectl's last-applied copy go from every object, and pods keep only what
// readiness, status and the replacement of stopped pods read.
func trimSparkObject(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		return trimSparkPod(p), nil
	}
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
		if _, ok := m.GetAnnotations()[lastAppliedAnnotation]; ok {
			a := make(map[string]string, len(m.GetAnnotations()))
			for k, v := range m.GetAnnotations() {
				if k != lastAppliedAnnotation {
					a[k] = v
				}
			}
			m.SetAnnotations(a)
		}
	}
	return obj, nil
}

func trimSparkPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
			Labels: p.Labels, OwnerReferences: p.OwnerReferences,
		},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{
			Phase: p.Status.Phase, Reason: p.Status.Reason, Message: p.Status.Message, PodIP: p.Status.PodIP,
		},
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.PodScheduled {
			out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: cs.Name, Ready: cs.Ready, RestartCount: cs.RestartCount,
			State: corev1.ContainerState{Terminated: cs.State.Terminated, Waiting: cs.State.Waiting},
		})
	}
	return out
}

var _ cache.TransformFunc = trimSparkObject
