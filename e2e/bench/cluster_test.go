package bench_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/kubeclient"
	"github.com/dsmlp/spawner/poll"
)

// podClock records, from a watch of one namespace, when the benchmark first
// saw each pod Running and ready, evicted, with a deletionTimestamp, and
// gone.
type podClock struct {
	mu                               sync.Mutex
	running, evicted, deleting, gone map[string]time.Time
}

// watchPods starts the watch and returns once its first LIST is in; it ends
// with ctx. It watches in protobuf, as spawnerd and the cluster's
// controllers do: in JSON, the API server would encode every pod event of a
// storm in JSON for this watch alone, and the benchmark's own decoding would
// take a CPU from what it measures. It offers gzip, client-go's default
// (see watchPodsUncompressed). It has a connection of its own: on the
// one the benchmark's writes share, a burst of them (the stop benchmark's
// evictions) delays the watch and so every time measured from it.
func watchPods(ctx context.Context, ns string) (*podClock, error) {
	return watchPodsWith(ctx, ns, env.Config, "")
}

// watchPodsUncompressed is watchPods with spawnerd's label selector and
// without gzip (spawnerd's --kube-compression=false). Beside the
// benchmark's watch, in the same process, it shows what an uncompressed
// watch costs in delivery under load.
func watchPodsUncompressed(ctx context.Context, ns string) (*podClock, error) {
	return watchPodsWith(ctx, ns, kubeclient.Uncompressed(env.Config), poll.DefaultLabelSelector)
}

// watchPodsWith watches the pods of ns that selector selects ("" all),
// through a client made of cfg.
func watchPodsWith(ctx context.Context, ns string, cfg *rest.Config, selector string) (*podClock, error) {
	client, err := kubernetes.NewForConfig(kubeclient.Protobuf(kubeclient.OwnConnection(cfg)))
	if err != nil {
		return nil, fmt.Errorf("watching pods of %s: %w", ns, err)
	}
	c := &podClock{running: map[string]time.Time{}, evicted: map[string]time.Time{}, deleting: map[string]time.Time{}, gone: map[string]time.Time{}}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := factory.Core().V1().Pods().Informer()
	seen := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		c.mu.Lock()
		defer c.mu.Unlock()
		first := func(m map[string]time.Time, now time.Time) {
			if _, ok := m[pod.Name]; !ok {
				m[pod.Name] = now
			}
		}
		if harness.PodRunning(pod) {
			first(c.running, now)
		}
		if pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == "Evicted" {
			first(c.evicted, now)
		}
		if pod.DeletionTimestamp != nil {
			first(c.deleting, now)
		}
	}
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				now := time.Now()
				c.mu.Lock()
				c.gone[pod.Name] = now
				c.mu.Unlock()
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watching pods of %s: %w", ns, err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("watching pods of %s: cache never synced", ns)
	}
	return c, nil
}

func (c *podClock) runningAt(pod string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.running[pod]
	return t, ok
}

// count returns how many of pods have a time in which (one of c's maps).
func (c *podClock) count(which func(*podClock) map[string]time.Time, pods []string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, n := which(c), 0
	for _, p := range pods {
		if _, ok := m[p]; ok {
			n++
		}
	}
	return n
}

// times returns the time in which for each pod, zero if none.
func (c *podClock) times(which func(*podClock) map[string]time.Time, pods []string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := which(c)
	out := make([]time.Time, len(pods))
	for i, p := range pods {
		out[i] = m[p]
	}
	return out
}

func running(c *podClock) map[string]time.Time  { return c.running }
func evicted(c *podClock) map[string]time.Time  { return c.evicted }
func deleting(c *podClock) map[string]time.Time { return c.deleting }
func gone(c *podClock) map[string]time.Time     { return c.gone }

// awaitAll waits until every pod has a time in which.
func (c *podClock) awaitAll(ctx context.Context, which func(*podClock) map[string]time.Time, pods []string, what string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return c.count(which, pods) == len(pods), nil
	})
	if err != nil {
		return fmt.Errorf("only %d of %d pods %s after %s: %w", c.count(which, pods), len(pods), what, timeout, err)
	}
	return nil
}

// createPods creates the pods from workers goroutines and returns when each
// create was sent.
func createPods(ctx context.Context, client kubernetes.Interface, pods []*corev1.Pod, workers int) ([]time.Time, error) {
	sent := make([]time.Time, len(pods))
	err := parallel(ctx, len(pods), workers, func(ctx context.Context, i int) error {
		sent[i] = time.Now()
		if _, err := client.CoreV1().Pods(pods[i].Namespace).Create(ctx, pods[i], metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s: %w", pods[i].Name, err)
		}
		return nil
	})
	return sent, err
}

// deletePods removes every pod of the namespace at once and waits until they
// are gone, so that the next measurement starts on an empty cluster.
func deletePods(ctx context.Context, client kubernetes.Interface, ns string) error {
	pods := client.CoreV1().Pods(ns)
	// Thousands of pods outlast the API server's request timeout: it then
	// answers a timeout but goes on deleting, so wait for them all the same.
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil &&
		!apierrors.IsTimeout(err) && !apierrors.IsServerTimeout(err) {
		return fmt.Errorf("deleting the pods of %s: %w", ns, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the pods of %s to go: %w", ns, err)
	}
	return nil
}
