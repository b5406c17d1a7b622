package poll

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dsmlp/spawner/serverid"
)

// TestElectedWatcherReactsOnlyWhileLeading: a follower leaves a stopped pod
// alone; on taking the lead it finds the pod in its cache, deletes it,
// tells the hub once and releases the stop-report finalizer.
func TestElectedWatcherReactsOnlyWhileLeading(t *testing.T) {
	pod := newPod("jupyter-alice").user("alice", "").running(true).phase(corev1.PodFailed).reason("Evicted", evictedMessage).obj()
	pod.Finalizers = []string{serverid.FinalizerStopReport}
	client := fake.NewClientset(pod)
	n := &fakeNotifier{}
	w := startWatcher(t, client, Options{DeleteStoppedPods: true, Notifier: n, Elected: true})
	waitFor(t, "pod cached", func() bool { return w.Status(testNS, pod.Name).Pod != nil })
	never(t, "a follower reacted", func() bool { return len(n.snapshot()) > 0 || len(podDeletes(client)) > 0 })

	w.SetLeading(true)
	// The hub is told and the pod deleted at once; the finalizer is
	// released once both are done.
	waitFor(t, "the leader told the hub", func() bool { return len(n.snapshot()) == 1 })
	waitFor(t, "the pod deleted", func() bool { return len(podDeletes(client)) == 1 })
	waitFor(t, "the finalizer released", func() bool {
		for _, a := range client.Actions() {
			if p, ok := a.(k8stesting.PatchActionImpl); ok && strings.Contains(string(p.GetPatch()), serverid.FinalizerStopReport) {
				return true
			}
		}
		return false
	})
	if d := podDeletes(client); len(d) != 1 {
		t.Errorf("pod deletes = %d, want 1", len(d))
	}
	never(t, "a second notification", func() bool { return len(n.snapshot()) > 1 })
}

// TestRequestedStopIsNotReported: a pod marked stop-requested (the hub
// asked) is deleted without telling the hub.
func TestRequestedStopIsNotReported(t *testing.T) {
	pod := newPod("jupyter-alice").user("alice", "").running(true).phase(corev1.PodSucceeded).obj()
	pod.Annotations[serverid.AnnotationStopRequested] = serverid.StopByHub
	client := fake.NewClientset(pod)
	n := &fakeNotifier{}
	w := startWatcher(t, client, Options{DeleteStoppedPods: true, Notifier: n})
	waitFor(t, "pod deleted", func() bool { return len(podDeletes(client)) == 1 })
	waitFor(t, "pod gone from cache", func() bool { return w.Status(testNS, pod.Name).Pod == nil })
	never(t, "the hub was told about a stop it asked for", func() bool { return len(n.snapshot()) > 0 })
}

// TestUnownedPodIsIgnored: a pod Owns refuses is neither deleted nor
// reported.
func TestUnownedPodIsIgnored(t *testing.T) {
	pod := newPod("jupyter-alice").user("alice", "").running(true).phase(corev1.PodFailed).obj()
	client := fake.NewClientset(pod)
	n := &fakeNotifier{}
	startWatcher(t, client, Options{DeleteStoppedPods: true, Notifier: n,
		Owns: func(*corev1.Pod) (bool, string) { return false, "forged" }})
	never(t, "an unowned pod was acted on", func() bool { return len(n.snapshot()) > 0 || len(podDeletes(client)) > 0 })
}
