package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/spawner"
)

const answersConfig = `
kubespawner:
  namespace: ns1
  start_timeout: 30
  cpu_guarantee: 0.5
  mem_guarantee: 1G
`

// servedPod is the pod spawnerd builds for user, as the kubelet reports it
// running and ready.
func servedPod(tb testing.TB, cfg *spawner.Config, user string, i int) *corev1.Pod {
	tb.Helper()
	objs, _, err := spawner.Build(cfg, spawner.Request{User: user, Env: map[string]string{"JUPYTERHUB_USER": user}})
	if err != nil {
		tb.Fatal(err)
	}
	pod := objs.Pod
	pod.UID = types.UID(fmt.Sprintf("5b0e6c1e-0000-4000-8000-%012d", i))
	pod.ResourceVersion = fmt.Sprint(1000 + i)
	pod.CreationTimestamp = metav1.NewTime(testNow.Add(-time.Duration(i) * time.Second))
	pod.Spec.NodeName = fmt.Sprintf("cpu-%d", i%12)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1),
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: poll.NotebookContainer, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: pod.CreationTimestamp}}}}}
	return pod
}

// answersManager is a manager on a real pod informer (over a fake API
// server) holding pods, with a fake clock at testNow.
func answersManager(tb testing.TB, cfg *spawner.Config, pods ...*corev1.Pod) (*Manager, *fake.Clientset, *poll.Watcher, *testingclock.FakeClock) {
	tb.Helper()
	objs := make([]runtime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	return managerOf(tb, cfg, objs)
}

// managerOf is answersManager over any objects (pods and events).
func managerOf(tb testing.TB, cfg *spawner.Config, objs []runtime.Object) (*Manager, *fake.Clientset, *poll.Watcher, *testingclock.FakeClock) {
	tb.Helper()
	client := fake.NewClientset(objs...)
	w, err := poll.New(client, poll.Options{Namespace: "ns1", LabelSelector: "component=singleuser-server"})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return w.HasSynced(), nil
	}); err != nil {
		tb.Fatal("the pod cache never synced")
	}
	clk := testingclock.NewFakeClock(testNow)
	m, err := New(client, cfg, w, Options{Clock: clk})
	if err != nil {
		tb.Fatal(err)
	}
	return m, client, w, clk
}

// awaitCached waits until w's cache holds the pod of ns1 named name at
// resourceVersion rv, or no such pod when rv is "".
func awaitCached(t *testing.T, w *poll.Watcher, name, rv string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		st := w.Status("ns1", name)
		if rv == "" {
			return st.Pod == nil, nil
		}
		return st.Pod != nil && st.Pod.ResourceVersion == rv, nil
	})
	if err != nil {
		t.Fatalf("pod %s never reached resourceVersion %q in the cache", name, rv)
	}
}

// unready makes the notebook container of ns1's pod name not ready, at
// resourceVersion rv, and waits until w's cache holds it.
func unready(t *testing.T, client *fake.Clientset, w *poll.Watcher, name, rv string) {
	t.Helper()
	ctx := context.Background()
	pods := client.CoreV1().Pods("ns1")
	cur, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.ContainerStatuses[0].Ready, cur.ResourceVersion = false, rv
	if _, err := pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitCached(t, w, name, rv)
}

// TestAnswersMatchServer checks that every answer the cache gives, kept or
// made afresh, is byte for byte Server's encoded, as the pod, the spawn and
// the clock change.
func TestAnswersMatchServer(t *testing.T) {
	cfg, err := spawner.Parse([]byte(answersConfig))
	if err != nil {
		t.Fatal(err)
	}
	alice, bob := servedPod(t, cfg, "alice", 1), servedPod(t, cfg, "bob", 2)
	m, client, w, clk := answersManager(t, cfg, alice, bob)
	a := m.NewAnswers()
	pods := client.CoreV1().Pods("ns1")
	ctx := context.Background()
	check := func(what string, key Key, hint Hint, wantKept bool) {
		t.Helper()
		for i := range 2 { // made, then kept
			got, err := a.AppendJSON([]byte("prefix"), key, hint)
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(m.Server(key, hint))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("%s, poll %d:\n got %s\nwant prefix%s", what, i+1, got, want)
			}
		}
		a.mu.RLock()
		_, kept := a.kept[key]
		a.mu.RUnlock()
		if kept != wantKept {
			t.Errorf("%s: kept = %v, want %v", what, kept, wantKept)
		}
	}
	aliceKey, bobKey := Key{User: "alice"}, Key{User: "bob"}
	hint := Hint{Pod: alice.Name, Namespace: "ns1", UID: alice.UID}

	check("running", aliceKey, Hint{}, true)
	check("running, with the hub's hint", aliceKey, hint, true)
	for _, step := range []time.Duration{400 * time.Millisecond, time.Second, 58 * time.Second, time.Hour, 25 * time.Hour} {
		clk.Step(step)
		check(fmt.Sprintf("running, %s later", step), aliceKey, hint, true)
	}

	// The pod changes: not ready any more.
	unready(t, client, w, alice.Name, "5000")
	check("pending after the update", aliceKey, hint, true)

	// A spawn of this process: starting, then ready with its own URL.
	sp := &spawn{key: bobKey, ref: podRef{"ns1", bob.Name}, uid: bob.UID, events: newEventLog(), pvc: "claim-bob"}
	m.mu.Lock()
	m.spawns[bobKey] = sp
	m.mu.Unlock()
	check("spawn starting", bobKey, Hint{}, true)
	m.finish(sp, "http://10.0.0.9:8888/user/bob/", "")
	check("spawn ready", bobKey, Hint{}, true)
	m.mu.Lock()
	delete(m.spawns, bobKey)
	m.mu.Unlock()
	check("spawn forgotten", bobKey, Hint{}, true)

	// A second pod with bob's key: the answer depends on the hint.
	twin := servedPod(t, cfg, "bob", 3)
	twin.Name, twin.ResourceVersion = "jupyter-bob-2", "6000"
	if _, err := pods.Create(ctx, twin, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitCached(t, w, twin.Name, "6000")
	check("two pods", bobKey, Hint{}, false)
	check("two pods, hint to the older", bobKey, Hint{Pod: bob.Name, Namespace: "ns1", UID: bob.UID}, false)

	// Stopped, then gone.
	cur, err := pods.Get(ctx, twin.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.Phase, cur.Status.Reason, cur.ResourceVersion = corev1.PodFailed, "Evicted", "7000"
	if _, err := pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitCached(t, w, twin.Name, "7000")
	for _, name := range []string{bob.Name} {
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		awaitCached(t, w, name, "")
	}
	check("stopped", bobKey, Hint{}, false)
	if err := pods.Delete(ctx, twin.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitCached(t, w, twin.Name, "")
	check("gone", bobKey, Hint{}, false)
	check("never had a pod", Key{User: "nobody"}, Hint{}, false)
}

func TestAppendAgeIsDurationString(t *testing.T) {
	for _, d := range []time.Duration{0, 499 * time.Millisecond, 500 * time.Millisecond, time.Second, 59*time.Second + 600*time.Millisecond,
		time.Minute, 61 * time.Second, time.Hour - time.Second, time.Hour, 25*time.Hour + 61*time.Second, 90 * 24 * time.Hour,
		-time.Second, -1500 * time.Millisecond, -time.Hour - time.Minute, 1<<63 - 1, -1 << 63} {
		if got, want := string(appendAge(nil, d)), d.Round(time.Second).String(); got != want {
			t.Errorf("appendAge(%d) = %q, want %q", d, got, want)
		}
	}
}

// BenchmarkServer answers polls over 10,000 running servers in a real
// informer cache: as Server and encoding/json do, and from Answers.
func BenchmarkServer(b *testing.B) {
	const n = 10_000
	cfg, err := spawner.Parse([]byte(answersConfig))
	if err != nil {
		b.Fatal(err)
	}
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = servedPod(b, cfg, fmt.Sprintf("user%05d", i), i)
	}
	m, _, _, _ := answersManager(b, cfg, pods...)
	hints := make([]Hint, n)
	keys := make([]Key, n)
	for i, p := range pods {
		keys[i], hints[i] = Key{User: fmt.Sprintf("user%05d", i)}, Hint{Pod: p.Name, Namespace: p.Namespace, UID: p.UID}
	}
	b.Run("Server+encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := json.Marshal(m.Server(keys[i], hints[i])); err != nil {
				b.Fatal(err)
			}
			i = (i + 1) % n
		}
	})
	b.Run("Answers", func(b *testing.B) {
		a := m.NewAnswers()
		buf := make([]byte, 0, 4096)
		for i := range n { // every answer made once
			if buf, err = a.AppendJSON(buf[:0], keys[i], hints[i]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			buf, _ = a.AppendJSON(buf[:0], keys[i], hints[i])
			i = (i + 1) % n
		}
	})
}
