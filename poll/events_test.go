package poll

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
)

// size returns the number of kept events and orphans.
func (e *eventCache) size() (kept, orphans int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.kept), len(e.orphans)
}

func createEvent(t *testing.T, client *fake.Clientset, ev *corev1.Event) {
	t.Helper()
	if _, err := client.CoreV1().Events(ev.Namespace).Create(context.Background(), ev, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating event %s: %v", ev.Name, err)
	}
}

func eventNames(evs []*corev1.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Name
	}
	return out
}

func TestEventsKeptOnlyForNotebookPods(t *testing.T) {
	base := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	pod := newPod("jupyter-alice").obj()
	client := fake.NewClientset(pod,
		// In the initial LIST: one of ours, one of an unrelated pod.
		podEvent("listed", pod.Name, "Scheduled", base),
		podEvent("spark-exec", "spark-exec-1", "Pulled", base),
	)
	w := startWatcher(t, client, Options{})
	waitFor(t, "listed event", func() bool { return len(w.Events(testNS, pod.Name)) == 1 })

	// Watched events, out of time order.
	createEvent(t, client, podEvent("started", pod.Name, "Started", base.Add(3*time.Second)))
	createEvent(t, client, podEvent("pulled", pod.Name, "Pulled", base.Add(time.Second)))
	createEvent(t, client, podEvent("other", "spark-exec-2", "Pulled", base))
	// Not about a pod at all.
	nodeEv := podEvent("node", "n1", "NodeReady", base)
	nodeEv.InvolvedObject.Kind = "Node"
	createEvent(t, client, nodeEv)

	waitFor(t, "watched events", func() bool { return len(w.Events(testNS, pod.Name)) == 3 })
	got := eventNames(w.Events(testNS, pod.Name))
	want := []string{"listed", "pulled", "started"}
	if len(got) != len(want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events = %v, want %v (oldest first)", got, want)
		}
	}
	if ev := w.NewestEvent(testNS, pod.Name); ev == nil || ev.Name != "started" {
		t.Errorf("newest event = %v, want started (the last of Events)", ev)
	}
	if ev := w.NewestEvent(testNS, "spark-exec-1"); ev != nil {
		t.Errorf("newest event of an unrelated pod = %s, want none", ev.Name)
	}
	if evs := w.Events(testNS, "spark-exec-1"); len(evs) != 0 {
		t.Errorf("events of an unrelated pod kept: %v", eventNames(evs))
	}
	kept, _ := w.spaces[testNS].events.size()
	if kept != 3 {
		t.Errorf("kept events = %d, want 3", kept)
	}

	// Deleting an event removes it.
	if err := client.CoreV1().Events(testNS).Delete(context.Background(), "pulled", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "event deleted", func() bool { return len(w.Events(testNS, pod.Name)) == 2 })
	// Two events of the same time: the name decides, as in Events.
	createEvent(t, client, podEvent("started-again", pod.Name, "Started", base.Add(3*time.Second)))
	waitFor(t, "same-time event", func() bool { return len(w.Events(testNS, pod.Name)) == 3 })
	if ev, evs := w.NewestEvent(testNS, pod.Name), w.Events(testNS, pod.Name); ev == nil || ev.Name != evs[len(evs)-1].Name {
		t.Errorf("newest event = %v, want %s (the last of Events)", ev, evs[len(evs)-1].Name)
	}
}

func TestEventsOrphansAdoptedWhenPodAppears(t *testing.T) {
	client := fake.NewClientset()
	w := startWatcher(t, client, Options{})
	// The event watch can deliver a pod's first event before the pod watch
	// delivers the pod.
	createEvent(t, client, podEvent("early", "jupyter-bob", "Scheduled", time.Now()))
	waitFor(t, "orphan buffered", func() bool { _, o := w.spaces[testNS].events.size(); return o == 1 })
	if len(w.Events(testNS, "jupyter-bob")) != 0 {
		t.Fatal("event of an unknown pod served")
	}
	createPod(t, client, newPod("jupyter-bob").obj())
	waitFor(t, "orphan adopted", func() bool { return len(w.Events(testNS, "jupyter-bob")) == 1 })
	if kept, orphans := w.spaces[testNS].events.size(); kept != 1 || orphans != 0 {
		t.Errorf("kept, orphans = %d, %d; want 1, 0", kept, orphans)
	}
}

func TestEventsForgetStopKeepsEventsOfComingPod(t *testing.T) {
	client := fake.NewClientset()
	w := startWatcher(t, client, Options{})
	w.ForgetStop(testNS, "jupyter-carol") // a spawn begins
	createEvent(t, client, podEvent("e1", "jupyter-carol", "Scheduled", time.Now()))
	waitFor(t, "event kept", func() bool { return len(w.Events(testNS, "jupyter-carol")) == 1 })
}

func TestEventCacheOrphansBounded(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	e := newEventCache(func(cache.ObjectName) bool { return false }, func(cache.ObjectName) {}, clk)
	e.maxOrphans = 10
	for i := range 100 {
		ev := podEvent(fmt.Sprintf("e%d", i), "unrelated", "Pulled", clk.Now())
		if err := e.Add(ev); err != nil {
			t.Fatal(err)
		}
	}
	if kept, orphans := e.size(); kept != 0 || orphans != 10 {
		t.Fatalf("kept, orphans = %d, %d; want 0, 10", kept, orphans)
	}
	clk.SetTime(clk.Now().Add(e.orphanTTL))
	e.sweep()
	if _, orphans := e.size(); orphans != 0 {
		t.Errorf("orphans after TTL = %d, want 0", orphans)
	}
}

func TestEventCacheTrimsEvents(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	e := newEventCache(func(cache.ObjectName) bool { return true }, func(cache.ObjectName) {}, clk)
	ev := podEvent("e", "jupyter-alice", "Scheduled", clk.Now())
	ev.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-scheduler", Operation: metav1.ManagedFieldsOperationUpdate}}
	ev.Annotations = map[string]string{"big": "x"}
	if err := e.Add(ev); err != nil {
		t.Fatal(err)
	}
	got := e.eventsOf(cache.NewObjectName(testNS, "jupyter-alice"))
	if len(got) != 1 {
		t.Fatalf("events = %d", len(got))
	}
	if got[0].ManagedFields != nil || got[0].Annotations != nil {
		t.Errorf("event not trimmed: %+v", got[0].ObjectMeta)
	}
	if got[0].Reason != "Scheduled" || got[0].Message != ev.Message || !got[0].LastTimestamp.Equal(&ev.LastTimestamp) {
		t.Errorf("trimmed event lost fields: %+v", got[0])
	}
}

// TestNewestOfIsLastOfEventsOf checks that newestOf, which compares the
// kept times without making the events, picks what eventsOf puts last,
// whichever time an event carries (lastTimestamp, a series, eventTime
// alone, or only its creation) and on ties of time.
func TestNewestOfIsLastOfEventsOf(t *testing.T) {
	base := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	pod := cache.NewObjectName(testNS, "jupyter-alice")
	at := func(name string, d time.Duration) *corev1.Event {
		return podEvent(name, pod.Name, "Pulled", base.Add(d))
	}
	series := at("jupyter-alice.series", 0)
	series.LastTimestamp = metav1.Time{}
	series.EventTime = metav1.NewMicroTime(base.Add(time.Second))
	series.Series = &corev1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(base.Add(5 * time.Second))}
	micro := at("micro", 0)
	micro.LastTimestamp, micro.EventTime = metav1.Time{}, metav1.NewMicroTime(base.Add(4*time.Second))
	created := at("jupyter-alice.created", 0)
	created.LastTimestamp, created.CreationTimestamp = metav1.Time{}, metav1.NewTime(base.Add(6*time.Second))
	events := []*corev1.Event{
		at("jupyter-alice.a", time.Second), at("zz-long-name", 2*time.Second), micro, series,
		at("jupyter-alice.b", 5*time.Second), at("jupyter-alice.c", 5*time.Second), created, at("a-first-by-name", 6*time.Second),
	}
	clk := clocktesting.NewFakePassiveClock(base)
	e := newEventCache(func(cache.ObjectName) bool { return true }, func(cache.ObjectName) {}, clk)
	if e.newestOf(pod) != nil {
		t.Fatal("a newest event of a pod with none")
	}
	for _, ev := range events {
		if err := e.Add(ev); err != nil {
			t.Fatal(err)
		}
		all := e.eventsOf(pod)
		got, want := e.newestOf(pod), all[len(all)-1]
		if got == nil {
			t.Fatalf("after %s: no newest event, want %s", ev.Name, want.Name)
		}
		if got.Name != want.Name {
			t.Fatalf("after %s: newest %s, want %s (eventsOf: %v)", ev.Name, got.Name, want.Name, eventNames(all))
		}
	}
}
