package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/poll"
)

func (m *Manager) runSparkWorker(ctx context.Context) {
	for m.processSparkItem(ctx) {
	}
}

func (m *Manager) processSparkItem(ctx context.Context) bool {
	q := m.spark.queue
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	if err := m.syncSpark(ctx, key); err != nil {
		m.log.Warn("spark reconcile failed, will retry", zap.String("namespace", key.Namespace),
			zap.String("cluster", key.Name), zap.Int("retries", q.NumRequeues(key)), zap.Error(err))
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}

// syncSpark converges one cluster from the caches, so that repeated or
// missed events, restarts and resyncs all end the same way:
//  1. a cluster whose notebook pod is stopped is removed (a deleted
//     notebook's cluster is the garbage collector's: every object is owned
//     by the pod);
//  2. a master or worker pod that stopped (evicted, say) is deleted, so
//     that its ReplicaSet replaces it: a Failed pod stays until the pod
//     garbage collector's threshold, holding its name and the status.
func (m *Manager) syncSpark(ctx context.Context, key cache.ObjectName) error {
	snap := m.spark.cache.cluster(key)
	owner, ok := sparkOwner(snap)
	if !ok {
		m.spark.unwatchOwner(key)
		if snap.empty() {
			m.spark.forget(key)
		}
		return nil
	}
	m.spark.watchOwner(key, owner.Name, m.watcher)
	log := m.log.With(zap.String("user", owner.user), zap.String("server", owner.server),
		zap.String("pod", owner.Name), zap.String("namespace", key.Namespace))

	// 1. The notebook stopped: the server is stopped, and so is its cluster.
	if st := m.watcher.Status(key.Namespace, owner.Name); st.Pod != nil && st.Pod.UID == owner.UID && st.State == poll.StateStopped {
		if objs := snap.objects(); len(objs) > 0 {
			log.Info("spark: the notebook stopped; removing its cluster")
			return m.deleteSparkObjects(ctx, objs)
		}
		return nil
	}

	// 2. Replace stopped Spark pods.
	var errs []error
	for _, p := range snap.pods {
		if p.DeletionTimestamp != nil || (p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded) {
			continue
		}
		err := m.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      metav1.NewUIDPreconditions(string(p.UID)),
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting stopped Spark pod %s/%s: %w", p.Namespace, p.Name, err))
			continue
		}
		stop := SparkPodStop{Pod: p.Name, Role: sparkRole(p), Phase: string(p.Status.Phase),
			Reason: p.Status.Reason, Message: p.Status.Message, At: m.clock.Now()}
		m.spark.recordReplaced(key, stop)
		log.Info("spark: pod stopped; deleted so that its ReplicaSet replaces it",
			zap.String("spark_pod", p.Name), zap.String("role", stop.Role), zap.String("phase", stop.Phase),
			zap.String("reason", stop.Reason), zap.String("message", stop.Message))
	}
	return errors.Join(errs...)
}

// sparkOwnerInfo is the notebook pod a cluster belongs to.
type sparkOwnerInfo struct {
	metav1.OwnerReference
	user, server string
}

// sparkOwner reads the notebook pod that owns the cluster's objects.
func sparkOwner(s sparkSnapshot) (sparkOwnerInfo, bool) {
	for _, o := range s.objects() {
		for _, r := range o.GetOwnerReferences() {
			if r.Kind == "Pod" && r.APIVersion == "v1" {
				a := o.GetAnnotations()
				return sparkOwnerInfo{OwnerReference: r, user: a[poll.AnnotationUser], server: a[poll.AnnotationServerName]}, true
			}
		}
	}
	return sparkOwnerInfo{}, false
}

// watchOwner makes every change to the notebook pod in the pod watcher's
// cache requeue the cluster, so that the cluster goes when its notebook
// stops even if the pod is kept (delete_stopped_pods false).
func (s *sparkSupport) watchOwner(key cache.ObjectName, pod string, w Watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.owners[key]; ok {
		if cur.pod == pod {
			return
		}
		cur.cancel()
	}
	changed, unsubscribe := w.Subscribe(key.Namespace, pod)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-changed:
				s.queue.Add(key)
			}
		}
	}()
	s.owners[key] = ownerWatch{pod: pod, cancel: func() { unsubscribe(); close(done) }}
}

func (s *sparkSupport) unwatchOwner(key cache.ObjectName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.owners[key]; ok {
		cur.cancel()
		delete(s.owners, key)
	}
}

func (s *sparkSupport) unwatchAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, cur := range s.owners {
		cur.cancel()
		delete(s.owners, key)
	}
}

// forget drops what is kept for a cluster that is gone.
func (s *sparkSupport) forget(key cache.ObjectName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.replaced, key)
}
