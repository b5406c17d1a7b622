package poll

import (
	"context"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"
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
	w, err := New(client, Options{Namespace: testNS, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(func() {
		free()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

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
