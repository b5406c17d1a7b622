package poll

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// cached is the pod as the informer's store keeps it.
func cached(t *testing.T, pod *corev1.Pod) *cachedPod {
	t.Helper()
	obj, err := trimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*cachedPod)
}

func mustTrim(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	c := cached(t, pod)
	// Idempotent, as client-go requires: the cached form passes through.
	if again, err := trimPod(c); err != nil || again != any(c) {
		t.Fatalf("trimPod(cached) = %v, %v: want it back as is", again, err)
	}
	return c.pod()
}

func TestTrimPodDropsBulk(t *testing.T) {
	pod := realisticPod(7)
	pod.Annotations[lastAppliedAnnotation] = `{"apiVersion":"v1","kind":"Pod"}`
	got := mustTrim(t, pod)

	if got.ManagedFields != nil {
		t.Error("managedFields kept")
	}
	if _, ok := got.Annotations[lastAppliedAnnotation]; ok {
		t.Error("last-applied-configuration kept")
	}
	c := got.Spec.Containers[0]
	if c.Env != nil || c.VolumeMounts != nil || c.Lifecycle != nil || got.Spec.Volumes != nil ||
		got.Spec.InitContainers != nil || got.Spec.Affinity != nil || got.Spec.Tolerations != nil {
		t.Errorf("bulky spec kept: %+v", got.Spec)
	}
	if got.Status.InitContainerStatuses != nil || got.Status.ContainerStatuses[0].ImageID != "" {
		t.Error("bulky status kept")
	}
	if len(got.Status.Conditions) != 2 { // Ready and PodScheduled of the five
		t.Errorf("conditions = %v, want Ready and PodScheduled", got.Status.Conditions)
	}
	// What the service reads survives.
	if got.Name != pod.Name || got.Namespace != pod.Namespace || got.UID != pod.UID || got.ResourceVersion != pod.ResourceVersion ||
		got.Spec.NodeName != pod.Spec.NodeName || got.Status.PodIP != pod.Status.PodIP ||
		!reflect.DeepEqual(c.Ports, pod.Spec.Containers[0].Ports) || c.Image != pod.Spec.Containers[0].Image ||
		got.Annotations[AnnotationUser] != "user00007" {
		t.Errorf("trimmed pod lost fields:\n%+v", got)
	}
	// The labels spawnerd reads, and only those.
	pod.Labels["app.kubernetes.io/managed-by"] = "kubespawner"
	got = mustTrim(t, pod)
	for k, v := range pod.Labels {
		if w, ok := got.Labels[k]; ok != keptLabels[k] || (ok && w != v) {
			t.Errorf("label %s=%q: trimmed pod has %q (kept: %v), want it kept only if read", k, v, w, ok)
		}
	}
	if len(got.Labels) == 0 || len(got.Labels) == len(pod.Labels) {
		t.Errorf("labels %v of %v: want the read ones", got.Labels, pod.Labels)
	}
	if pod.ManagedFields == nil {
		t.Error("transform modified its input")
	}
}

func TestTrimPodKeepsClassification(t *testing.T) {
	pods := []*corev1.Pod{
		realisticPod(1),
		newPod("evicted").running(true).phase(corev1.PodFailed).reason("Evicted", evictedMessage).obj(),
		newPod("oom").running(false).terminated(137, "OOMKilled", time.Now()).obj(),
		newPod("pending").obj(),
		newPod("notready").running(false).obj(),
		newPod("stopping").running(true).deleting().obj(),
	}
	for _, pod := range pods {
		wantState, wantInfo := classify(pod)
		trimmed := mustTrim(t, pod)
		gotState, gotInfo := classify(trimmed)
		if gotState != wantState || !reflect.DeepEqual(gotInfo, wantInfo) {
			t.Errorf("%s: classify after trim = %q %+v, before = %q %+v", pod.Name, gotState, gotInfo, wantState, wantInfo)
		}
		if serverRefOf(trimmed) != serverRefOf(pod) {
			t.Errorf("%s: serverRefOf changed by trim", pod.Name)
		}
		if again := mustTrim(t, trimmed); !reflect.DeepEqual(again, trimmed) {
			t.Errorf("%s: a pod made from the cache does not trim to itself:\n%+v\n%+v", pod.Name, again, trimmed)
		}
	}
}

func TestTrimPassesTombstones(t *testing.T) {
	d := cache.DeletedFinalStateUnknown{Key: "ns/p"}
	if got, _ := trimPod(d); got != d {
		t.Errorf("trimPod(tombstone) = %v", got)
	}
	if got, _ := trimEvent(d); got != d {
		t.Errorf("trimEvent(tombstone) = %v", got)
	}
}
