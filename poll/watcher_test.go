package poll

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

// podDeletes returns the pod delete actions the client saw.
func podDeletes(client *fake.Clientset) []k8stesting.DeleteActionImpl {
	var out []k8stesting.DeleteActionImpl
	for _, a := range client.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok && d.GetResource().Resource == "pods" {
			out = append(out, d)
		}
	}
	return out
}

func (w *Watcher) hasRecord(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.records[uid]
	return ok
}

func TestReactionEvictedPodIsDeletedAndReportedOnce(t *testing.T) {
	pod := newPod("jupyter-alice").user("alice", "").running(true).obj()
	client := fake.NewClientset(pod)
	n := &fakeNotifier{}
	core, logs := observer.New(zapcore.InfoLevel)
	w := startWatcher(t, client, Options{DeleteStoppedPods: true, Notifier: n, Logger: zap.New(core)})
	waitFor(t, "pod running", func() bool { return w.Status(testNS, pod.Name).State == StateRunning })

	evicted := newPod("jupyter-alice").user("alice", "").running(true).phase(corev1.PodFailed).reason("Evicted", evictedMessage).obj()
	updatePod(t, client, evicted)

	waitFor(t, "notifier called", func() bool { return len(n.snapshot()) > 0 })
	// The deletion arrives through the informer; the gone path must not
	// report the stop a second time.
	waitFor(t, "pod gone from cache", func() bool { return w.Status(testNS, pod.Name).State == StateAbsent })
	waitFor(t, "stop record finished", func() bool { return !w.hasRecord(pod.UID) })
	never(t, "a second notification", func() bool { return len(n.snapshot()) > 1 })

	deletes := podDeletes(client)
	if len(deletes) != 1 {
		t.Fatalf("pod deletes = %d, want 1", len(deletes))
	}
	opts := deletes[0].GetDeleteOptions()
	if opts.Preconditions == nil || opts.Preconditions.UID == nil || *opts.Preconditions.UID != pod.UID {
		t.Errorf("delete preconditions = %+v, want UID %q", opts.Preconditions, pod.UID)
	}
	if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 0 {
		t.Errorf("delete grace period = %v, want 0", opts.GracePeriodSeconds)
	}

	call := n.snapshot()[0]
	wantRef := ServerRef{User: "alice", Server: "", Namespace: testNS, Pod: pod.Name}
	if call.ref != wantRef {
		t.Errorf("notified ref = %+v, want %+v", call.ref, wantRef)
	}
	if call.info.Reason != "Evicted" || call.info.Phase != "Failed" || call.info.ExitCode != 1 || call.info.Message != evictedMessage {
		t.Errorf("notified info = %+v", call.info)
	}

	last, ok := w.LastStop(testNS, pod.Name)
	if !ok || last.Reason != "Evicted" || !last.PodDeleted {
		t.Errorf("LastStop = %+v, %v; want the eviction, PodDeleted", last, ok)
	}
	st := w.Status(testNS, pod.Name)
	if st.ExitCode != 1 || st.Stop == nil || st.Stop.Reason != "Evicted" {
		t.Errorf("Status after deletion = %+v, want absent with the eviction as reason", st)
	}

	stopLogs := logs.FilterMessage("server stopped").All()
	if len(stopLogs) != 1 {
		t.Fatalf("%d \"server stopped\" log lines, want 1", len(stopLogs))
	}
	fields := stopLogs[0].ContextMap()
	for k, want := range map[string]any{
		"user": "alice", "server": "", "pod": pod.Name, "namespace": testNS, "phase": "Failed",
		"reason": "Evicted", "message": evictedMessage, "container_reason": "", "exit_code": int64(1),
	} {
		if fields[k] != want {
			t.Errorf("log field %s = %#v, want %#v", k, fields[k], want)
		}
	}
}

// The stop benchmark splits the informer's lag with two debug lines: the
// reflector queueing a failed pod (the transform) and the handler seeing it.
func TestFailedPodStampedWhenQueuedAndWhenHandled(t *testing.T) {
	pod := newPod("jupyter-carol").user("carol", "").running(true).obj()
	client := fake.NewClientset(pod)
	core, logs := observer.New(zapcore.DebugLevel)
	w := startWatcher(t, client, Options{DeleteStoppedPods: true, Notifier: &fakeNotifier{}, Logger: zap.New(core)})
	waitFor(t, "pod running", func() bool { return w.Status(testNS, pod.Name).State == StateRunning })
	if n := logs.FilterMessage("pod failed: queued by the reflector").Len(); n != 0 {
		t.Fatalf("%d queued lines for a running pod, want 0", n)
	}

	updatePod(t, client, newPod("jupyter-carol").user("carol", "").running(true).phase(corev1.PodFailed).reason("Evicted", evictedMessage).obj())
	waitFor(t, "the handler's line", func() bool { return logs.FilterMessage("pod failed: seen by the informer").Len() == 1 })
	queued := logs.FilterMessage("pod failed: queued by the reflector").All()
	if len(queued) == 0 {
		t.Fatal("no line for the reflector queueing the failed pod")
	}
	handled := logs.FilterMessage("pod failed: seen by the informer").All()[0]
	if queued[0].Time.After(handled.Time) {
		t.Errorf("queued at %v, after the handler saw it at %v", queued[0].Time, handled.Time)
	}
	fields := queued[0].ContextMap()
	for k, want := range map[string]any{"user": "carol", "server": "", "pod": pod.Name, "namespace": testNS} {
		if fields[k] != want {
			t.Errorf("queued line field %s = %#v, want %#v", k, fields[k], want)
		}
	}
}

// With a WatchClient, the pods are listed and watched through it and the
// stop reaction's delete goes through the watcher's own client.
func TestWatchClientWatchesAndClientWrites(t *testing.T) {
	pod := newPod("jupyter-dave").user("dave", "").running(true).obj()
	watchClient := fake.NewClientset(pod)
	client := fake.NewClientset(pod)
	w := startWatcher(t, client, Options{DeleteStoppedPods: true, Notifier: &fakeNotifier{}, WatchClient: watchClient})
	waitFor(t, "pod running", func() bool { return w.Status(testNS, pod.Name).State == StateRunning })

	updatePod(t, watchClient, newPod("jupyter-dave").user("dave", "").running(true).phase(corev1.PodFailed).reason("Evicted", evictedMessage).obj())
	waitFor(t, "pod deleted through the client", func() bool { return len(podDeletes(client)) == 1 })
	if n := len(podDeletes(watchClient)); n != 0 {
		t.Errorf("%d deletes through the watch client, want 0", n)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" {
			t.Errorf("the client was asked to %s %s; only the watch client should be", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

func TestReactionOOMKilledNamedServer(t *testing.T) {
	pod := newPod("jupyter-bob--gpu").user("bob", "gpu").running(true).obj()
	client := fake.NewClientset(pod)
	n := &fakeNotifier{}
	w := startWatcher(t, client, Options{DeleteStoppedPods: true, Notifier: n})
	waitFor(t, "pod cached", func() bool { return w.Status(testNS, pod.Name).Pod != nil })

	updatePod(t, client, newPod("jupyter-bob--gpu").user("bob", "gpu").running(false).terminated(137, "OOMKilled", time.Now()).obj())
	waitFor(t, "notifier called", func() bool { return len(n.snapshot()) == 1 })
	call := n.snapshot()[0]
	if call.ref.User != "bob" || call.ref.Server != "gpu" || call.info.ExitCode != 137 || call.info.ContainerReason != "OOMKilled" {
		t.Errorf("notified %+v %+v", call.ref, call.info)
	}
	waitFor(t, "pod deleted", func() bool { return len(podDeletes(client)) == 1 })
}

func TestReactionExpectStopSuppressesNotifier(t *testing.T) {
	pod := newPod("jupyter-carol").user("carol", "").running(true).obj()
	client := fake.NewClientset(pod)
	n := &fakeNotifier{}
	w := startWatcher(t, client, Options{DeleteStoppedPods: true, Notifier: n})
	waitFor(t, "pod cached", func() bool { return w.Status(testNS, pod.Name).Pod != nil })

	w.ExpectStop(testNS, pod.Name)
	if err := client.CoreV1().Pods(testNS).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "stop recorded", func() bool { _, ok := w.LastStop(testNS, pod.Name); return ok })
	waitFor(t, "stop record finished", func() bool { return !w.hasRecord(pod.UID) })
	never(t, "notifier called after ExpectStop", func() bool { return len(n.snapshot()) > 0 })

	// A new spawn clears the expectation: its pod's stop is reported.
	w.ForgetStop(testNS, pod.Name)
	if _, ok := w.LastStop(testNS, pod.Name); ok {
		t.Error("LastStop kept after ForgetStop")
	}
	next := newPod("jupyter-carol").uid("uid-2").user("carol", "").phase(corev1.PodSucceeded).terminated(0, "Completed", time.Now()).obj()
	createPod(t, client, next)
	waitFor(t, "new pod reported", func() bool { return len(n.snapshot()) == 1 })
	if got := n.snapshot()[0].info.ExitCode; got != 0 {
		t.Errorf("exit code = %d, want 0", got)
	}
}

func TestReactionOutOfBandDelete(t *testing.T) {
	pod := newPod("jupyter-dan").user("dan", "").running(true).obj()
	client := fake.NewClientset(pod)
	n := &fakeNotifier{}
	w := startWatcher(t, client, Options{DeleteStoppedPods: true, Notifier: n})
	waitFor(t, "pod running", func() bool { return w.Status(testNS, pod.Name).State == StateRunning })

	if err := client.CoreV1().Pods(testNS).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "notifier called", func() bool { return len(n.snapshot()) == 1 })
	got := n.snapshot()[0].info
	if got.Reason != ReasonDeleted || !got.PodDeleted || got.ExitCode != 1 || got.Phase != "Running" || got.At.IsZero() {
		t.Errorf("notified %+v, want Deleted/PodDeleted/exit 1", got)
	}
	if len(podDeletes(client)) != 1 { // only the test's own delete
		t.Errorf("watcher issued a delete for a pod that was already gone")
	}
}

// TestReactionDeletedFinalStateUnknown drives the handler and sync directly,
// as when a relist finds the pod gone without a watch DELETE.
func TestReactionDeletedFinalStateUnknown(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	n := &fakeNotifier{}
	w, err := New(fake.NewClientset(), Options{Namespace: testNS, Notifier: n, Clock: clk, DeleteStoppedPods: true})
	if err != nil {
		t.Fatal(err)
	}
	pod := newPod("jupyter-erin").user("erin", "").running(true).obj()
	key := cache.MetaObjectToName(pod)
	w.podDeleted(cache.DeletedFinalStateUnknown{Key: key.String(), Obj: cached(t, pod)})
	if err := w.sync(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if err := w.sync(context.Background(), key); err != nil { // repeated: converged, no second report
		t.Fatal(err)
	}
	calls := n.snapshot()
	if len(calls) != 1 {
		t.Fatalf("notifier calls = %d, want 1", len(calls))
	}
	want := StopInfo{Phase: "Running", Reason: ReasonDeleted, ExitCode: 1, At: clk.Now(), PodDeleted: true}
	if calls[0].info != want {
		t.Errorf("info = %+v, want %+v", calls[0].info, want)
	}
}

func TestReactionRetriesNotifier(t *testing.T) {
	pod := newPod("jupyter-frank").user("frank", "").phase(corev1.PodFailed).reason("Evicted", evictedMessage).obj()
	client := fake.NewClientset(pod)
	n := &fakeNotifier{failures: 2}
	startWatcher(t, client, Options{Notifier: n})
	waitFor(t, "notifier succeeded", func() bool { return len(n.succeeded()) == 1 })
	never(t, "more calls after success", func() bool { return len(n.snapshot()) > 3 })
	if got := len(n.snapshot()); got != 3 {
		t.Errorf("calls = %d, want 2 failures + 1 success", got)
	}
}

func TestReactionKeepsPodWhenNotDeleting(t *testing.T) {
	pod := newPod("jupyter-gina").user("gina", "").phase(corev1.PodSucceeded).terminated(0, "Completed", time.Now()).obj()
	client := fake.NewClientset(pod)
	n := &fakeNotifier{}
	w := startWatcher(t, client, Options{DeleteStoppedPods: false, Notifier: n})
	waitFor(t, "notifier called", func() bool { return len(n.snapshot()) == 1 })
	// Later updates of the same stopped pod are not new stops.
	updatePod(t, client, newPod("jupyter-gina").user("gina", "").phase(corev1.PodSucceeded).terminated(0, "Completed", time.Now()).reason("", "still here").obj())
	never(t, "second notification for the same UID", func() bool { return len(n.snapshot()) > 1 })
	if len(podDeletes(client)) != 0 {
		t.Error("pod deleted although DeleteStoppedPods is false")
	}
	if st := w.Status(testNS, pod.Name); st.State != StateStopped || st.ExitCode != 0 {
		t.Errorf("Status = %+v, want stopped with exit 0", st)
	}
}

func TestReactionDeleteConflictMeansGone(t *testing.T) {
	pod := newPod("jupyter-hank").user("hank", "").phase(corev1.PodFailed).reason("Evicted", evictedMessage).obj()
	client := fake.NewClientset(pod)
	// The API server answers a failed UID precondition with 409.
	client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, pod.Name,
			errString("Precondition failed: UID in precondition: uid-hank, UID in object meta: uid-new"))
	})
	n := &fakeNotifier{}
	startWatcher(t, client, Options{DeleteStoppedPods: true, Notifier: n})
	waitFor(t, "notifier called", func() bool { return len(n.snapshot()) == 1 })
	never(t, "delete retried", func() bool { return len(podDeletes(client)) > 1 })
}

func TestReactionDeleteFailureStillTellsHubAndRetries(t *testing.T) {
	pod := newPod("jupyter-lee").user("lee", "").phase(corev1.PodFailed).reason("Evicted", evictedMessage).obj()
	client := fake.NewClientset(pod)
	var attempts atomic.Int32
	client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if attempts.Add(1) == 1 {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, pod.Name, errString("no RBAC yet"))
		}
		return false, nil, nil // the tracker deletes it
	})
	n := &fakeNotifier{}
	w := startWatcher(t, client, Options{DeleteStoppedPods: true, Notifier: n})
	waitFor(t, "pod deleted on retry", func() bool { return w.Status(testNS, pod.Name).State == StateAbsent })
	if got := attempts.Load(); got != 2 {
		t.Errorf("delete attempts = %d, want 2", got)
	}
	never(t, "more than one report", func() bool { return len(n.snapshot()) != 1 })
}

func TestReactionSkipsReportWhenPodRespawned(t *testing.T) {
	n := &fakeNotifier{}
	old := newPod("jupyter-ivy").user("ivy", "").running(true).obj()
	fresh := newPod("jupyter-ivy").uid("uid-fresh").user("ivy", "").obj()
	client := fake.NewClientset(fresh)
	w := startWatcher(t, client, Options{Notifier: n})
	// The old pod's deletion is seen while the new pod is already cached.
	key := cache.MetaObjectToName(old)
	w.podDeleted(cached(t, old))
	waitFor(t, "old stop processed", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.gone[key]) == 0 && len(w.last) == 1
	})
	never(t, "old stop reported although the server was spawned again", func() bool { return len(n.snapshot()) > 0 })
}

type errString string

func (e errString) Error() string { return string(e) }

func TestSubscribe(t *testing.T) {
	pod := newPod("jupyter-jo").obj()
	client := fake.NewClientset(pod)
	w := startWatcher(t, client, Options{})
	ch, cancel := w.Subscribe(testNS, pod.Name)
	other, cancelOther := w.Subscribe(testNS, "jupyter-someone-else")
	defer cancelOther()

	drain := func() {
		for {
			select {
			case <-ch:
			default:
				return
			}
		}
	}
	waitSignal := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(testTimeout):
			t.Fatalf("no signal after %s", what)
		}
	}

	drain()
	updatePod(t, client, newPod("jupyter-jo").running(false).obj())
	waitSignal("pod update")
	waitFor(t, "cache shows update", func() bool { return w.Status(testNS, pod.Name).Pod.Status.Phase == corev1.PodRunning })

	drain()
	if _, err := client.CoreV1().Events(testNS).Create(context.Background(), podEvent("ev1", pod.Name, "Pulling", time.Now()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSignal("event")
	waitFor(t, "event cached", func() bool { return len(w.Events(testNS, pod.Name)) == 1 })

	select {
	case <-other:
		t.Error("subscriber of another pod was signalled")
	default:
	}

	cancel()
	cancel() // idempotent
	drain()
	updatePod(t, client, newPod("jupyter-jo").running(true).obj())
	waitFor(t, "cache shows update", func() bool { return w.Status(testNS, pod.Name).State == StateRunning })
	select {
	case <-ch:
		t.Error("signalled after cancel")
	default:
	}
}

func TestSweepExpiresStops(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	w, err := New(fake.NewClientset(), Options{Namespace: testNS, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	pod := newPod("jupyter-kim").running(true).obj()
	key := cache.MetaObjectToName(pod)
	w.spaces[testNS].events.Replace(nil, "1")
	w.podDeleted(cached(t, pod))
	if err := w.sync(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if err := w.spaces[testNS].events.Add(podEvent("late", pod.Name, "Killing", clk.Now())); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.LastStop(testNS, pod.Name); !ok {
		t.Fatal("no LastStop after deletion")
	}
	if len(w.Events(testNS, pod.Name)) != 1 {
		t.Fatal("event of a just-deleted pod was dropped")
	}

	clk.SetTime(clk.Now().Add(2 * time.Hour))
	w.sweep()
	if len(w.Events(testNS, pod.Name)) != 0 {
		t.Error("events of a pod gone for 2h kept")
	}
	if _, ok := w.LastStop(testNS, pod.Name); !ok {
		t.Error("LastStop dropped before 24h")
	}

	clk.SetTime(clk.Now().Add(23 * time.Hour))
	w.sweep()
	if _, ok := w.LastStop(testNS, pod.Name); ok {
		t.Error("LastStop kept after 24h")
	}
}

func TestNewValidatesOptions(t *testing.T) {
	if _, err := New(fake.NewClientset(), Options{LabelSelector: "a in (b"}); err == nil {
		t.Error("bad label selector accepted")
	}
	if _, err := New(fake.NewClientset(), Options{Workers: -1}); err == nil {
		t.Error("negative workers accepted")
	}
	w, err := New(fake.NewClientset(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w.opts.LabelSelector != DefaultLabelSelector || w.opts.Workers != DefaultWorkers {
		t.Errorf("defaults = %q, %d", w.opts.LabelSelector, w.opts.Workers)
	}
}

func TestRunTwice(t *testing.T) {
	w := startWatcher(t, fake.NewClientset(), Options{})
	if err := w.Run(context.Background()); err == nil {
		t.Error("second Run succeeded")
	}
}
