package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/kubeclient"
	"github.com/dsmlp/spawner/lifecycle"
)

// stubSpawner is the storm's second control: the least any spawner the hub
// talks to over HTTP must do for a spawn, with the same pods and client
// limits as spawnerd. It answers the hub's start POST by creating the user's
// pod, keeps a pod watch of its own (as spawnerd's informer), and streams a
// WebSocket progress per server until that watch shows the pod Running and
// ready. It leaves out all that spawnerd adds: the token check, building the
// pod, the session history, the event watch, logs and metrics. It runs in
// the benchmark's process, so its CPU counts as the clients'.
type stubSpawner struct {
	client kubernetes.Interface
	pods   map[string]*corev1.Pod // by user
	srv    *httptest.Server
	up     websocket.Upgrader

	mu    sync.Mutex
	ready map[string]chan struct{} // by pod name; closed once it is ready
}

// startStub serves the stub for ns's pods, built for users; it stops with
// ctx's end or close.
func startStub(ctx context.Context, ns string, users []string) (*stubSpawner, error) {
	pods, err := plainSpawnPods(ns, users, time.Now())
	if err != nil {
		return nil, err
	}
	client, err := stormClient("bench-stub-spawner")
	if err != nil {
		return nil, err
	}
	watcher, err := kubernetes.NewForConfig(kubeclient.Protobuf(kubeclient.OwnConnection(env.Config)))
	if err != nil {
		return nil, err
	}
	s := &stubSpawner{client: client, pods: make(map[string]*corev1.Pod, len(pods)), ready: make(map[string]chan struct{}, len(pods))}
	for i, u := range users {
		s.pods[u] = pods[i]
		s.ready[pods[i].Name] = make(chan struct{})
	}
	factory := informers.NewSharedInformerFactoryWithOptions(watcher, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	seen := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && harness.PodRunning(p) {
			s.markReady(p.Name)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) }}); err != nil {
		return nil, fmt.Errorf("the stub spawner's pod watch: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("the stub spawner's pod watch of %s never synced", ns)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/users/{user}/server", s.start)
	mux.HandleFunc("GET /api/v1/users/{user}/server/progress", s.progress)
	s.srv = httptest.NewServer(mux)
	return s, nil
}

func (s *stubSpawner) close() { s.srv.Close() }

func (s *stubSpawner) markReady(pod string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.ready[pod]; ok {
		close(ch)
		delete(s.ready, pod)
	}
}

// readyChan is closed once pod is ready (already closed if it was).
func (s *stubSpawner) readyChan(pod string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.ready[pod]; ok {
		return ch
	}
	done := make(chan struct{})
	close(done)
	return done
}

// start reads the hub's start request and creates the user's pod.
func (s *stubSpawner) start(w http.ResponseWriter, r *http.Request) {
	user := r.PathValue("user")
	var req hubapi.StartRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, fmt.Sprintf(`{"message":"body: %v"}`, err), http.StatusBadRequest)
		return
	}
	pod, ok := s.pods[user]
	if !ok {
		http.Error(w, `{"message":"no such user"}`, http.StatusNotFound)
		return
	}
	if _, err := s.client.CoreV1().Pods(pod.Namespace).Create(r.Context(), pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		http.Error(w, fmt.Sprintf(`{"message":%q}`, err.Error()), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(lifecycle.Server{Status: "pending"})
}

// progress streams one ready event once the user's pod is ready.
func (s *stubSpawner) progress(w http.ResponseWriter, r *http.Request) {
	pod, ok := s.pods[r.PathValue("user")]
	if !ok {
		http.Error(w, `{"message":"no such user"}`, http.StatusNotFound)
		return
	}
	ws, err := s.up.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has answered
	}
	defer ws.Close()
	select {
	case <-s.readyChan(pod.Name):
	case <-r.Context().Done():
		return
	}
	ev := lifecycle.Event{Progress: ptr.To(100), Message: "Server ready", Ready: true, URL: "http://" + pod.Name + ":8888/"}
	if err := ws.WriteJSON(ev); err != nil {
		return
	}
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
}
