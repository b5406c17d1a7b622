package hubclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dsmlp/spawner/poll"
)

// TestWatcherTellsHubOfEviction wires a poll.Watcher to the Notifier: an
// eviction reaches the hub as DELETE of that user's named server.
func TestWatcherTellsHubOfEviction(t *testing.T) {
	f, hub := startFakeHub(t, "", 204)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "jupyter-al-ice--srv", Namespace: "jhub", UID: "uid-1", ResourceVersion: "1",
			Labels:      map[string]string{"component": "singleuser-server"},
			Annotations: map[string]string{poll.AnnotationUser: "al ice", poll.AnnotationServerName: "srv"},
		},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: poll.NotebookContainer}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7"},
	}
	client := fake.NewClientset(pod)
	w, err := poll.New(client, poll.Options{
		Namespace: "jhub", DeleteStoppedPods: true, Logger: zaptest.NewLogger(t),
		Notifier: &Notifier{Hub: hub, BaseURL: "/", Logger: zaptest.NewLogger(t)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, w.HasSynced)

	evicted := pod.DeepCopy()
	evicted.ResourceVersion = "2"
	evicted.Status.Phase = corev1.PodFailed
	evicted.Status.Reason = "Evicted"
	if _, err := client.CoreV1().Pods("jhub").UpdateStatus(ctx, evicted, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return len(f.seen()) == 1 })
	if got := f.seen()[0]; got.escapedPath != "/hub/api/users/al%20ice/servers/srv" {
		t.Errorf("hub got %s %s", got.method, got.escapedPath)
	}
	waitUntil(t, func() bool { return w.Status("jhub", pod.Name).State == poll.StateAbsent })
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatal(err)
	}
}

// Reports of one server made at the same time reach the hub as one call,
// and each gets its answer; another server's report is its own call.
func TestNotifierCoalescesReportsOfOneServer(t *testing.T) {
	release := make(chan struct{})
	var calls sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := calls.LoadOrStore(r.URL.EscapedPath(), new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		<-release
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	n := &Notifier{Hub: NewHub(srv.URL+"/hub/api/", testToken, srv.Client()), Logger: zaptest.NewLogger(t)}
	var wg, started sync.WaitGroup
	errs := make(chan error, 6)
	started.Add(6)
	for i := range 6 {
		user := "alice"
		if i == 5 {
			user = "bob"
		}
		wg.Go(func() {
			started.Done()
			errs <- n.ServerStopped(context.Background(), poll.ServerRef{User: user, Pod: "p"}, poll.StopInfo{})
		})
	}
	started.Wait()
	// Every report is in flight before the hub answers the first.
	waitUntil(t, func() bool {
		a, okA := calls.Load("/hub/api/users/alice/server")
		b, okB := calls.Load("/hub/api/users/bob/server")
		return okA && okB && a.(*atomic.Int32).Load() >= 1 && b.(*atomic.Int32).Load() == 1
	})
	time.Sleep(200 * time.Millisecond) // the other alice reports, started, join the call in flight
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	a, _ := calls.Load("/hub/api/users/alice/server")
	if got := a.(*atomic.Int32).Load(); got != 1 {
		t.Errorf("five reports of alice's server made %d hub calls, want 1", got)
	}
}
