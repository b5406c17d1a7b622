package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/spawner"
)

// boundRunningPod is the pod as kwok leaves it: bound, its container running.
func boundRunningPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.PodSpec{NodeName: "cpu-0", Containers: []corev1.Container{{Name: "notebook", Ports: []corev1.ContainerPort{{Name: "notebook-port", ContainerPort: 8888}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7",
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "notebook", Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
}

// startFollowed starts alice's spawn on a manager whose pod already runs
// and collects its progress.
func startFollowed(t *testing.T, clk *testingclock.FakeClock) (*fakeWatcher, <-chan []Event) {
	t.Helper()
	cfg, err := spawner.Parse([]byte("kubespawner:\n  namespace: ns1\n  start_timeout: 30\n"))
	if err != nil {
		t.Fatal(err)
	}
	w := newFakeWatcher()
	m, err := New(fake.NewClientset(), cfg, w, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	w.set("ns1", "jupyter-alice", poll.Status{State: poll.StateRunning, Pod: boundRunningPod("ns1", "jupyter-alice")})
	if _, err := m.Start(context.Background(), spawner.Request{User: "alice"}, history.Actor{Kind: history.ActorUser, Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan []Event, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var got []Event
		_ = m.Progress(ctx, Key{User: "alice"}, func(e Event) error { got = append(got, e); return nil })
		done <- got
	}()
	return w, done
}

func messages(evs []Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Message
	}
	return out
}

// kwok and the scheduler write their events after the pod runs; ready
// waits for them, so progress tells them first.
func TestFollowWaitsForEventsBeforeReady(t *testing.T) {
	clk := testingclock.NewFakeClock(testNow)
	w, done := startFollowed(t, clk)
	select {
	case evs := <-done:
		t.Fatalf("ready before any event: %q", messages(evs))
	case <-time.After(200 * time.Millisecond):
	}
	ev := func(uid types.UID, reason, msg string, at time.Time) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{UID: uid}, Reason: reason, Type: "Normal", Message: msg,
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ns1", Name: "jupyter-alice"}, LastTimestamp: metav1.NewTime(at)}
	}
	w.add("ns1", "jupyter-alice", ev("e1", "Scheduled", "Successfully assigned ns1/jupyter-alice to cpu-0", testNow))
	w.add("ns1", "jupyter-alice", ev("e2", "Started", "Started container", testNow.Add(time.Second)))
	var evs []Event
	select {
	case evs = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("no ready after the events")
	}
	want := []string{"Found a node for the server (cpu-0); starting it.", "The server's container started.", "Server ready at http://10.0.0.7:8888"}
	if got := messages(evs); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("progress %q, want %q", got, want)
	}
	if p := evs[0].Progress; p == nil || *p != 30 {
		t.Errorf("first event at %v%%, want KubeSpawner's 30", evs[0].Progress)
	}
	if evs[1].RawEvent["message"] != "Started container" || evs[1].RawEvent["lastTimestamp"] != "2026-12-03T16:40:01Z" {
		t.Errorf("raw event %v, want the kubelet's own text and time", evs[1].RawEvent)
	}
}

// Events that never come hold ready back only for eventSettle, and the
// progress says they are missing.
func TestFollowSaysWhenEventsAreMissing(t *testing.T) {
	clk := testingclock.NewFakeClock(testNow)
	_, done := startFollowed(t, clk)
	const step = 50 * time.Millisecond
	for stepped := time.Duration(0); ; stepped += step {
		select {
		case evs := <-done:
			if stepped < eventSettle {
				t.Fatalf("ready after %s of fake time, want the %s wait: %q", stepped, eventSettle, messages(evs))
			}
			want := []string{"The server is running; Kubernetes has not reported its Scheduled and Started events yet (waited 250ms).", "Server ready at http://10.0.0.7:8888"}
			if got := messages(evs); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("progress %q, want %q", got, want)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		if stepped > 20*time.Second {
			t.Fatal("no ready while the events were missing")
		}
		clk.Step(step)
	}
}
