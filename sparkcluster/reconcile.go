package sparkcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/poll"
)

// AnnotationReplaced, on a cluster's ConfigMap, lists the cluster's recent
// stopped pods that a reconciler deleted so that their ReplicaSet replaced
// them (JSON, a list of PodStop, newest last). It is kept on the cluster,
// not in memory, so that every replica's status shows them.
const AnnotationReplaced = "spawner.dsmlp.io/spark-replaced"

func (r *Reconciler) runWorker(ctx context.Context) {
	for r.processItem(ctx) {
	}
}

func (r *Reconciler) processItem(ctx context.Context) bool {
	key, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	defer r.queue.Done(key)
	if err := r.sync(ctx, key); err != nil {
		r.log.Warn("spark reconcile failed, will retry", zap.String("namespace", key.Namespace),
			zap.String("cluster", key.Name), zap.Int("retries", r.queue.NumRequeues(key)), zap.Error(err))
		r.queue.AddRateLimited(key)
		return true
	}
	r.queue.Forget(key)
	return true
}

// sync converges one cluster from the caches, so that repeated or missed
// events, restarts and resyncs all end the same way. It acts only on the
// objects of the server whose notebook pod owns the cluster:
//  1. a cluster whose notebook pod is stopped is removed (a deleted
//     notebook's cluster is the garbage collector's: every object is owned
//     by the pod);
//  2. a master or worker pod that stopped (evicted, say) is recorded on
//     the cluster's ConfigMap and deleted, so that its ReplicaSet replaces
//     it: a Failed pod stays until the pod garbage collector's threshold,
//     holding its name and the status.
func (r *Reconciler) sync(ctx context.Context, key cache.ObjectName) error {
	snap := r.cache.cluster(key)
	owner, ok := ownerOf(snap)
	if !ok {
		r.unwatchOwner(key)
		return nil
	}
	r.watchOwner(key, owner.Name)
	snap = snap.of(owner.user, owner.server)
	log := r.log.With(zap.String("user", owner.user), zap.String("server", owner.server),
		zap.String("pod", owner.Name), zap.String("namespace", key.Namespace))

	// 1. The notebook stopped: the server is stopped, and so is its cluster.
	if st := r.notebooks.Status(key.Namespace, owner.Name); st.Pod != nil && st.Pod.UID == owner.UID && st.State == poll.StateStopped {
		if objs := snap.objects(); len(objs) > 0 {
			log.Info("spark: the notebook stopped; removing its cluster")
			return r.deleteObjects(ctx, objs)
		}
		return nil
	}

	// 2. Replace stopped Spark pods of this server, once they are recorded.
	var stopped []*corev1.Pod
	var stops []PodStop
	for _, p := range snap.pods {
		if p.DeletionTimestamp != nil || (p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded) || !mine(p, owner.user, owner.server) {
			continue
		}
		stopped = append(stopped, p)
		stops = append(stops, PodStop{Pod: p.Name, Role: roleOf(p), Phase: string(p.Status.Phase),
			Reason: p.Status.Reason, Message: p.Status.Message, At: r.clock.Now()})
	}
	if len(stopped) == 0 {
		return nil
	}
	if err := r.recordReplaced(ctx, snap.configMap, stops); err != nil {
		return err
	}
	var errs []error
	for i, p := range stopped {
		err := r.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      metav1.NewUIDPreconditions(string(p.UID)),
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting stopped Spark pod %s/%s: %w", p.Namespace, p.Name, err))
			continue
		}
		stop := stops[i]
		log.Info("spark: pod stopped; deleted so that its ReplicaSet replaces it",
			zap.String("spark_pod", p.Name), zap.String("role", stop.Role), zap.String("phase", stop.Phase),
			zap.String("reason", stop.Reason), zap.String("message", stop.Message))
	}
	return errors.Join(errs...)
}

// recordReplaced adds the stopped pods that are not listed yet to the
// ConfigMap's AnnotationReplaced, keeping the newest maxReplacedKept. The
// patch names the cached resourceVersion, so that two replicas recording at
// once do not drop each other's: the loser retries from a newer cache. A
// cluster without its ConfigMap is going, and nothing is recorded.
func (r *Reconciler) recordReplaced(ctx context.Context, cm *corev1.ConfigMap, stops []PodStop) error {
	if cm == nil {
		return nil
	}
	list := replacedOf(cm)
	listed := map[string]bool{}
	for _, s := range list {
		listed[s.Pod] = true
	}
	added := false
	for _, s := range stops {
		if !listed[s.Pod] {
			list, added = append(list, s), true
		}
	}
	if !added {
		return nil
	}
	if len(list) > maxReplacedKept {
		list = list[len(list)-maxReplacedKept:]
	}
	value, err := json.Marshal(list)
	if err != nil {
		return fmt.Errorf("encoding the replaced Spark pods: %w", err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": cm.ResourceVersion,
		"annotations":     map[string]string{AnnotationReplaced: string(value)},
	}})
	if err != nil {
		return fmt.Errorf("encoding the replaced Spark pods: %w", err)
	}
	if _, err := r.client.CoreV1().ConfigMaps(cm.Namespace).Patch(ctx, cm.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("recording replaced Spark pods on ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return nil
}

// replacedOf reads a ConfigMap's AnnotationReplaced; a value that does not
// parse (edited by hand, say) reads as none.
func replacedOf(cm *corev1.ConfigMap) []PodStop {
	if cm == nil {
		return nil
	}
	v, ok := cm.Annotations[AnnotationReplaced]
	if !ok {
		return nil
	}
	var list []PodStop
	if err := json.Unmarshal([]byte(v), &list); err != nil {
		return nil
	}
	return list
}

// owner is the notebook pod a cluster belongs to.
type owner struct {
	metav1.OwnerReference
	user, server string
}

// ownerOf reads the notebook pod that owns the cluster's objects, and the
// server whose identity the owned object carries.
func ownerOf(s snapshot) (owner, bool) {
	for _, o := range s.objects() {
		user, server, ok := identity(o)
		if !ok {
			continue
		}
		for _, r := range o.GetOwnerReferences() {
			if r.Kind == "Pod" && r.APIVersion == "v1" {
				return owner{OwnerReference: r, user: user, server: server}, true
			}
		}
	}
	return owner{}, false
}

// watchOwner makes every change to the notebook pod in the pod cache
// requeue the cluster, so that the cluster goes when its notebook stops
// even if the pod is kept (delete_stopped_pods false).
func (r *Reconciler) watchOwner(key cache.ObjectName, pod string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.owners[key]; ok {
		if cur.pod == pod {
			return
		}
		cur.cancel()
	}
	changed, unsubscribe := r.notebooks.Subscribe(key.Namespace, pod)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-changed:
				r.queue.Add(key)
			}
		}
	}()
	r.owners[key] = ownerWatch{pod: pod, cancel: func() { unsubscribe(); close(done) }}
}

func (r *Reconciler) unwatchOwner(key cache.ObjectName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.owners[key]; ok {
		cur.cancel()
		delete(r.owners, key)
	}
}

func (r *Reconciler) unwatchAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, cur := range r.owners {
		cur.cancel()
		delete(r.owners, key)
	}
}
