package sparkcluster

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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/dsmlp/spawner/spawner"
)

// clusterIndex indexes cached Spark objects by their cluster key,
// "<namespace>/<LabelSparkCluster value>".
const clusterIndex = "spark-cluster"

// lastAppliedAnnotation is kubectl's copy of a whole manifest.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// clusterCache holds informer caches of the Spark clusters' ConfigMaps,
// Services, Deployments, ReplicaSets, EndpointSlices and pods, all selected
// by LabelSparkCluster (ReplicaSets and pods have the pod template's
// labels, and the EndpointSlice controller copies a Service's labels onto
// its slices), and of the namespaces' ResourceQuotas. Every spawn,
// poll and status reads these instead of the API server. Cached objects
// are shared: never modify them.
type clusterCache struct {
	factory, quotaFactory                                               informers.SharedInformerFactory
	configMaps, services, deployments, replicaSets, slices, pods, quota cache.SharedIndexInformer
	synced                                                              []cache.InformerSynced

	// onChange is told the cluster key of every change; the reconciler
	// sets it before the informers start.
	onChange func(cache.ObjectName)

	subMu sync.Mutex
	subs  map[cache.ObjectName]map[chan struct{}]struct{}
}

func newClusterCache(client kubernetes.Interface, namespace string) (*clusterCache, error) {
	c := &clusterCache{subs: map[cache.ObjectName]map[chan struct{}]struct{}{}}
	c.factory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = spawner.LabelSparkCluster }),
		informers.WithTransform(trimObject),
	)
	c.quotaFactory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace), informers.WithTransform(trimObject))
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
		if err := inf.AddIndexers(cache.Indexers{clusterIndex: indexByCluster}); err != nil {
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
func (c *clusterCache) run(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	c.quotaFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("waiting for the Spark caches to sync: %w", context.Cause(ctx))
	}
	return nil
}

func (c *clusterCache) shutdown() {
	c.factory.Shutdown()
	c.quotaFactory.Shutdown()
}

func (c *clusterCache) hasSynced() bool {
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

func (c *clusterCache) changed(obj any) {
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
func (c *clusterCache) subscribe(key cache.ObjectName) (<-chan struct{}, func()) {
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

// snapshot is one cluster's cached objects.
type snapshot struct {
	configMap      *corev1.ConfigMap
	service        *corev1.Service
	master, worker *appsv1.Deployment
	replicaSets    []*appsv1.ReplicaSet
	slices         []*discoveryv1.EndpointSlice
	pods           []*corev1.Pod
}

// cluster reads one cluster's objects from the caches. Objects that carry
// the label under other names (copied by hand, say) are not the cluster's.
func (c *clusterCache) cluster(key cache.ObjectName) snapshot {
	var s snapshot
	list := func(inf cache.SharedIndexInformer) []any {
		objs, err := inf.GetIndexer().ByIndex(clusterIndex, key.String())
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
		if p, ok := o.(*corev1.Pod); ok && roleOf(p) != "" {
			s.pods = append(s.pods, p)
		}
	}
	sort.Slice(s.pods, func(i, j int) bool {
		if ri, rj := roleOf(s.pods[i]), roleOf(s.pods[j]); ri != rj {
			return ri < rj // master before worker
		}
		return s.pods[i].Name < s.pods[j].Name
	})
	return s
}

// quotas returns the namespace's ResourceQuotas.
func (c *clusterCache) quotas(namespace string) []*corev1.ResourceQuota {
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
func (s snapshot) objects() []metav1.Object {
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
func (s snapshot) empty() bool {
	return len(s.objects()) == 0 && len(s.replicaSets) == 0 && len(s.slices) == 0 && len(s.pods) == 0
}

// identity is the server an object was made for, from the annotations the
// spawner puts on every object of a cluster (the Deployment controller
// copies them onto ReplicaSets, and the pod template onto pods); ok is false
// for an object without them, an EndpointSlice say.
func identity(o metav1.Object) (user, server string, ok bool) {
	a := o.GetAnnotations()
	user, ok = a[spawner.AnnotationSpawnerUser]
	return user, a[spawner.AnnotationSpawnerServer], ok
}

// mine reports whether an object carries the identity of the server.
func mine(o metav1.Object, user, server string) bool {
	u, s, ok := identity(o)
	return ok && u == user && s == server
}

// of keeps what of the snapshot belongs to the server: the cluster's label
// is derived from the notebook pod's name, which another server's object
// can carry too (a copy by hand, a slug that collides). The ConfigMap,
// Service and Deployments must carry the server's identity. ReplicaSets
// and pods are dropped only if they carry another's, and EndpointSlices,
// which carry none, only if another's Service owns them: dependents are
// kept by label otherwise, so that a cluster whose Deployments are gone
// still shows its pods until they are.
func (s snapshot) of(user, server string) snapshot {
	out := snapshot{}
	if s.configMap != nil && mine(s.configMap, user, server) {
		out.configMap = s.configMap
	}
	if s.master != nil && mine(s.master, user, server) {
		out.master = s.master
	}
	if s.worker != nil && mine(s.worker, user, server) {
		out.worker = s.worker
	}
	var foreignService types.UID
	if s.service != nil {
		if mine(s.service, user, server) {
			out.service = s.service
		} else {
			foreignService = s.service.UID
		}
	}
	notForeign := func(o metav1.Object) bool {
		_, _, ok := identity(o)
		return !ok || mine(o, user, server)
	}
	for _, rs := range s.replicaSets {
		if notForeign(rs) {
			out.replicaSets = append(out.replicaSets, rs)
		}
	}
	for _, p := range s.pods {
		if notForeign(p) {
			out.pods = append(out.pods, p)
		}
	}
	for _, es := range s.slices {
		foreign := false
		for _, r := range es.OwnerReferences {
			foreign = foreign || (foreignService != "" && r.UID == foreignService)
		}
		if !foreign {
			out.slices = append(out.slices, es)
		}
	}
	return out
}

// roleOf is "master" or "worker" for a Spark pod, else "".
func roleOf(p *corev1.Pod) string {
	switch p.Labels[spawner.LabelComponent] {
	case spawner.SparkMasterComponent:
		return "master"
	case spawner.SparkWorkerComponent:
		return "worker"
	}
	return ""
}

// trimObject is the Spark informers' transform: managedFields and
// kubectl's last-applied copy go from every object, and pods keep only what
// readiness, status, ownership and the replacement of stopped pods read.
func trimObject(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		return trimPod(p), nil
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

func trimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
			Labels: p.Labels, Annotations: identityAnnotations(p.Annotations), OwnerReferences: p.OwnerReferences,
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

// identityAnnotations keeps of a pod's annotations the server's identity,
// which says whose the pod is.
func identityAnnotations(a map[string]string) map[string]string {
	var out map[string]string
	for _, k := range []string{spawner.AnnotationSpawnerUser, spawner.AnnotationSpawnerServer} {
		if v, ok := a[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

var _ cache.TransformFunc = trimObject
