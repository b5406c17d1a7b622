package poll

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
)

// Shared waits: poll for a condition, never sleep (style.md §6).
const (
	testTimeout  = 10 * time.Second
	testInterval = 5 * time.Millisecond
	// consistently is how long "nothing more happens" is watched.
	consistently = 300 * time.Millisecond
)

const testNS = "jhub"

var rvCounter atomic.Int64

// podBuilder builds notebook pods as KubeSpawner makes them, in the style of
// Kueue's MakeWorkload wrappers.
type podBuilder struct{ pod *corev1.Pod }

func newPod(name string) *podBuilder {
	return &podBuilder{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: testNS,
			UID:       types.UID("uid-" + name),
			Labels: map[string]string{
				"component":                  "singleuser-server",
				"hub.jupyter.org/username":   "alice",
				"hub.jupyter.org/servername": "",
			},
			Annotations: map[string]string{
				AnnotationUser:       "alice",
				AnnotationServerName: "",
			},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: NotebookContainer, Image: "quay.io/jupyterhub/singleuser:latest"}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodPending,
		},
	}}
}

func (b *podBuilder) uid(u string) *podBuilder { b.pod.UID = types.UID(u); return b }

func (b *podBuilder) user(user, server string) *podBuilder {
	b.pod.Annotations[AnnotationUser] = user
	b.pod.Annotations[AnnotationServerName] = server
	return b
}

func (b *podBuilder) phase(p corev1.PodPhase) *podBuilder { b.pod.Status.Phase = p; return b }

func (b *podBuilder) reason(reason, message string) *podBuilder {
	b.pod.Status.Reason, b.pod.Status.Message = reason, message
	return b
}

// running makes the pod Running with an IP and a notebook container in state
// running with the given readiness.
func (b *podBuilder) running(ready bool) *podBuilder {
	b.pod.Status.Phase = corev1.PodRunning
	b.pod.Status.PodIP = "10.0.0.7"
	return b.container(corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}, ready)
}

func (b *podBuilder) container(state corev1.ContainerState, ready bool) *podBuilder {
	b.pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: NotebookContainer, State: state, Ready: ready}}
	return b
}

func (b *podBuilder) terminated(code int32, reason string, at time.Time) *podBuilder {
	b.pod.Status.PodIP = "10.0.0.7"
	return b.container(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, FinishedAt: metav1.NewTime(at),
	}}, false)
}

func (b *podBuilder) deleting() *podBuilder {
	now := metav1.Now()
	b.pod.DeletionTimestamp = &now
	return b
}

func (b *podBuilder) obj() *corev1.Pod { return b.pod }

func podEvent(name, pod, reason string, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: testNS, ResourceVersion: "1"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: testNS, Name: pod},
		Reason:         reason,
		Message:        reason + " message",
		Type:           corev1.EventTypeNormal,
		LastTimestamp:  metav1.NewTime(at),
	}
}

// fakeNotifier records ServerStopped calls; failures makes the first calls fail.
type fakeNotifier struct {
	mu       sync.Mutex
	calls    []notifyCall
	failures int
}

type notifyCall struct {
	ref  ServerRef
	info StopInfo
	err  error
}

var errHubDown = errors.New("hub down")

func (n *fakeNotifier) ServerStopped(_ context.Context, s ServerRef, why StopInfo) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var err error
	if n.failures > 0 {
		n.failures--
		err = errHubDown
	}
	n.calls = append(n.calls, notifyCall{ref: s, info: why, err: err})
	return err
}

func (n *fakeNotifier) snapshot() []notifyCall {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]notifyCall(nil), n.calls...)
}

// succeeded returns the calls that returned nil.
func (n *fakeNotifier) succeeded() []notifyCall {
	var out []notifyCall
	for _, c := range n.snapshot() {
		if c.err == nil {
			out = append(out, c)
		}
	}
	return out
}

// startWatcher runs a Watcher on client until the test ends and waits for
// its caches to sync.
func startWatcher(t *testing.T, client *fake.Clientset, opts Options) *Watcher {
	t.Helper()
	w := runWatcher(t, client, opts)
	waitFor(t, "caches synced", w.HasSynced)
	return w
}

// runWatcher runs a Watcher on client until the test ends, without waiting
// for anything.
func runWatcher(t *testing.T, client *fake.Clientset, opts Options) *Watcher {
	t.Helper()
	if opts.Namespace == "" {
		opts.Namespace = testNS
	}
	if opts.Logger == nil {
		opts.Logger = zaptest.NewLogger(t)
	}
	w, err := New(client, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return w
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), testInterval, testTimeout, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// never fails if cond becomes true within the consistently window.
func never(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(consistently)
	for time.Now().Before(deadline) {
		if cond() {
			t.Fatalf("unexpected: %s", what)
		}
		time.Sleep(testInterval)
	}
}

func createPod(t *testing.T, client *fake.Clientset, pod *corev1.Pod) {
	t.Helper()
	if _, err := client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
}

func updatePod(t *testing.T, client *fake.Clientset, pod *corev1.Pod) {
	t.Helper()
	pod = pod.DeepCopy()
	// The fake tracker keeps resourceVersion as given; the API server
	// would bump it, and the watcher skips updates that keep it.
	pod.ResourceVersion = strconv.FormatInt(rvCounter.Add(1), 10)
	if _, err := client.CoreV1().Pods(pod.Namespace).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating pod %s: %v", pod.Name, err)
	}
}
