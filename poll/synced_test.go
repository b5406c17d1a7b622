package poll

import (
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The pod cache answers as soon as it holds its LIST, while the event LIST
// (40,000 events at 10,000 servers) is still under way: /readyz reports
// PodsSynced, and HasSynced waits for both.
func TestPodsSyncedBeforeTheEventList(t *testing.T) {
	client := fake.NewClientset(newPod("jupyter-alice").user("alice", "").running(true).obj())
	listing := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	client.PrependReactor("list", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(listing) })
		<-release // the fake's default reactor then answers the LIST
		return false, nil, nil
	})
	w := runWatcher(t, client, Options{})
	// Cleanups run last first: the LIST is released before Run is stopped.
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free)

	waitFor(t, "the pod cache", w.PodsSynced)
	<-listing
	if w.HasSynced() {
		t.Error("HasSynced() = true while the event LIST has not been answered")
	}
	if got := w.Status(testNS, "jupyter-alice"); got.State != StateRunning {
		t.Errorf("Status while the events are listed = %q, want %q", got.State, StateRunning)
	}
	free()
	waitFor(t, "both caches", w.HasSynced)
}
