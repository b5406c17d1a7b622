package recorder

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/serverid"
	"github.com/dsmlp/spawner/spawner"
)

var t0 = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

// memStore keeps records as the real store does: the first of a kind wins.
type memStore struct {
	mu    sync.Mutex
	recs  map[string]map[history.EventKind]history.Record
	calls int
	fail  error
	delay time.Duration // each transaction's time
}

func newMemStore() *memStore {
	return &memStore{recs: map[string]map[history.EventKind]history.Record{}}
}

func (s *memStore) Record(_ context.Context, recs ...history.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	time.Sleep(s.delay)
	s.calls++
	if s.fail != nil {
		return s.fail
	}
	for _, r := range recs {
		m := s.recs[r.UID]
		if m == nil {
			m = map[history.EventKind]history.Record{}
			s.recs[r.UID] = m
		}
		if _, ok := m[r.Kind]; !ok {
			m[r.Kind] = r
		}
	}
	return nil
}

func (s *memStore) Recorded(_ context.Context, uids []string) (map[string]map[history.EventKind]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[history.EventKind]bool{}
	for _, uid := range uids {
		for k := range s.recs[uid] {
			if out[uid] == nil {
				out[uid] = map[history.EventKind]bool{}
			}
			out[uid][k] = true
		}
	}
	return out, nil
}

func (s *memStore) get(uid string, kind history.EventKind) (history.Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[uid][kind]
	return r, ok
}

// notebook is a running notebook pod of alice's default server.
func notebook(mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "jupyter-alice", Namespace: "jhub", UID: types.UID("uid-1"),
			CreationTimestamp: metav1.NewTime(t0.Add(time.Second)),
			Labels:            map[string]string{serverid.LabelKey: serverid.Key("alice", ""), spawner.LabelCourse: "DSC10", spawner.LabelGPUClass: "a5000"},
			Annotations: map[string]string{
				serverid.AnnotationUser: "alice", serverid.AnnotationServer: "", serverid.AnnotationProfile: "gpu",
				serverid.AnnotationRequestedBy: serverid.RequestedBy("user", "alice", t0),
				"galends/booking-reference":    "res-7", "galends/reservation-kind": "booking",
			},
		},
		Spec: corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: poll.NotebookContainer, Image: "scipy:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(2 * time.Second))},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(9 * time.Second))},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: poll.NotebookContainer, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
		},
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

func terminated(code int32, reason string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: reason, FinishedAt: metav1.NewTime(t0.Add(time.Hour))}}
	}
}

func annotate(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations[k] = v }
}

func engineEvent(reason, msg string) *corev1.Event {
	return &corev1.Event{Reason: reason, Message: msg, Source: corev1.EventSource{Component: reservation.Component},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "jupyter-alice", Namespace: "jhub", UID: "uid-1"}}
}

func TestClassify(t *testing.T) {
	evicted := func(p *corev1.Pod) {
		p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
	}
	podGC := func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "DeletionByPodGC", Message: "PodGC: node no longer exists"})
	}
	for name, tc := range map[string]struct {
		pod     *corev1.Pod
		deleted bool
		events  []*corev1.Event
		want    history.Stopper
		reason  string
		code    *int
	}{
		"user stop":          {pod: notebook(annotate(serverid.AnnotationStopRequested, "user:alice")), deleted: true, want: history.StopperUser},
		"admin stop":         {pod: notebook(annotate(serverid.AnnotationStopRequested, "admin:bob")), deleted: true, want: history.StopperAdmin},
		"culler stop":        {pod: notebook(annotate(serverid.AnnotationStopRequested, "culler:idle-culler")), deleted: true, want: history.StopperCuller},
		"service stop":       {pod: notebook(annotate(serverid.AnnotationStopRequested, "service:grader")), deleted: true, want: history.StopperService},
		"legacy hub stop":    {pod: notebook(annotate(serverid.AnnotationStopRequested, "hub")), deleted: true, want: history.StopperHub},
		"start timeout":      {pod: notebook(annotate(serverid.AnnotationStopRequested, serverid.StopByTimeout)), deleted: true, want: history.StopperStartTimeout},
		"evicted":            {pod: notebook(evicted), want: history.StopperEvicted, reason: "Evicted"},
		"oom":                {pod: notebook(terminated(137, "OOMKilled")), want: history.StopperOOM, code: ptr(137)},
		"exit":               {pod: notebook(terminated(0, "Completed")), want: history.StopperContainerExit, code: ptr(0)},
		"node lost":          {pod: notebook(podGC), want: history.StopperNodeLost, reason: "DeletionByPodGC"},
		"deleted by someone": {pod: notebook(), deleted: true, want: history.StopperDeleted, reason: poll.ReasonDeleted},
		"preempted":          {pod: notebook(), deleted: true, events: []*corev1.Event{engineEvent(reservation.Preempted, "free capacity")}, want: history.StopperPreempted, reason: reservation.Preempted},
		"booking cancelled":  {pod: notebook(), deleted: true, events: []*corev1.Event{engineEvent(reservation.ReservationCancelled, "cancelled")}, want: history.StopperReservationCancelled, reason: reservation.ReservationCancelled},
		"booking reassigned": {pod: notebook(), deleted: true, events: []*corev1.Event{engineEvent(reservation.ReservationReassigned, "to bob")}, want: history.StopperReservationReassigned, reason: reservation.ReservationReassigned},
		"another pod's engine event": {pod: notebook(), deleted: true, events: []*corev1.Event{func() *corev1.Event {
			e := engineEvent(reservation.Preempted, "x")
			e.InvolvedObject.UID = "older-pod"
			return e
		}()}, want: history.StopperDeleted, reason: poll.ReasonDeleted},
	} {
		t.Run(name, func(t *testing.T) {
			info, stopped := poll.StopOf(tc.pod)
			if tc.deleted {
				info = poll.EndOf(tc.pod)
			} else if !stopped {
				t.Fatal("fixture is not stopped")
			}
			got, facts := Classify(tc.pod, info, tc.events)
			if got != tc.want {
				t.Errorf("stopper %q, want %q", got, tc.want)
			}
			if tc.reason != "" && facts.Reason != tc.reason {
				t.Errorf("reason %q, want %q", facts.Reason, tc.reason)
			}
			if (tc.code == nil) != (facts.ExitCode == nil) || tc.code != nil && *tc.code != *facts.ExitCode {
				t.Errorf("exit code %v, want %v", facts.ExitCode, tc.code)
			}
		})
	}
}

func ptr(i int) *int { return &i }

func newRecorder(t *testing.T, store Store, pods ...*corev1.Pod) *Recorder {
	t.Helper()
	r, err := New(Options{Store: store, AnnotationPrefix: "galends/", Clock: clocktesting.NewFakePassiveClock(t0.Add(2 * time.Hour)),
		Pods: func() []*corev1.Pod { return pods }, Elected: true, WriteTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// running is newRecorder with its writer running, for the writes a stop
// waits for.
func running(t *testing.T, store Store) *Recorder {
	t.Helper()
	r := newRecorder(t, store)
	runWriter(t, r)
	return r
}

// runWriter runs r's writer until the test ends.
func runWriter(t *testing.T, r *Recorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestObserveRecordsTheLife(t *testing.T) {
	store := newMemStore()
	r := newRecorder(t, store)
	h := r.Handler()
	h.OnAdd(notebook(), false) // not leading: nothing
	if r.pendingLen() != 0 {
		t.Fatalf("a follower queued %d records", r.pendingLen())
	}
	r.SetLeading(true)
	h.OnAdd(notebook(), false) // the rescan's to record
	if r.pendingLen() != 0 {
		t.Fatalf("before the rescan read the cache the observer queued %d records", r.pendingLen())
	}
	<-r.rescan
	r.rescanPods(context.Background()) // the cache is empty here
	h.OnAdd(notebook(), false)
	h.OnUpdate(nil, notebook()) // unchanged: nothing new
	if n := r.pendingLen(); n != 4 {
		t.Fatalf("queued %d records, want requested, created, scheduled, ready", n)
	}
	if err := r.flushOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.OnUpdate(nil, notebook())
	if n := r.pendingLen(); n != 0 {
		t.Fatalf("an unchanged pod queued %d records after they were written", n)
	}
	req, _ := store.get("uid-1", history.EventRequested)
	if req.By != (history.Actor{Kind: history.ActorUser, Name: "alice"}) || !req.At.Equal(t0) {
		t.Errorf("requested %+v", req)
	}
	sched, _ := store.get("uid-1", history.EventScheduled)
	if sched.Node != "gpu-1" || sched.Identity.Reservation != "res-7" || sched.Profile != "gpu" || sched.Image != "scipy:1" ||
		sched.Course != "DSC10" || sched.GPUClass != "a5000" || sched.ReservationKind != "booking" {
		t.Errorf("scheduled %+v", sched)
	}
	h.OnDelete(notebook(annotate(serverid.AnnotationStopRequested, "culler:idle-culler")))
	if err := r.flushOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	end, ok := store.get("uid-1", history.EventEnded)
	if !ok || end.Stopper != history.StopperCuller {
		t.Errorf("ended %+v", end)
	}
}

func TestStopRequestedFirstWins(t *testing.T) {
	store := newMemStore()
	r := running(t, store)
	// An eviction recorded by the stop reaction...
	evicted := notebook(func(p *corev1.Pod) { p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted" })
	info, _ := poll.StopOf(evicted)
	r.Stopped(context.Background(), evicted, info)
	// ...is not overwritten by a later stop through the hub.
	r.StopRequested(context.Background(), notebook(), history.Actor{Kind: history.ActorUser, Name: "alice"}, history.StopperUser)
	end, _ := store.get("uid-1", history.EventEnded)
	if end.Stopper != history.StopperEvicted {
		t.Errorf("stopper %q, want evicted", end.Stopper)
	}
	if sr, ok := store.get("uid-1", history.EventStopRequested); !ok || sr.By.Name != "alice" {
		t.Errorf("stop-requested %+v", sr)
	}
}

func TestEngineStoppedBeforeTheDelete(t *testing.T) {
	store := newMemStore()
	r := running(t, store)
	r.EngineStopped(context.Background(), notebook(), reservation.Preempted, "free capacity for reservation(s) starting 10:20")
	r.EngineStopped(context.Background(), notebook(), "RuntimeGuaranteed", "not a stop")
	// The stop reaction then sees the deletion: the engine's end stands.
	r.Stopped(context.Background(), notebook(), poll.EndOf(notebook()))
	end, _ := store.get("uid-1", history.EventEnded)
	if end.Stopper != history.StopperPreempted || end.End.Reason != reservation.Preempted || end.End.Message == "" {
		t.Errorf("ended %+v", end)
	}
}

func TestWriteFailureIsRetried(t *testing.T) {
	store := newMemStore()
	store.fail = errors.New("database is down")
	r, err := New(Options{Store: store, WriteTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runWriter(t, r)
	// The store is down: the stop waits WriteTimeout, no longer, and the
	// records stay queued.
	begin := time.Now()
	r.StopRequested(context.Background(), notebook(), history.Actor{Kind: history.ActorAdmin, Name: "bob"}, history.StopperAdmin)
	if waited := time.Since(begin); waited > 2*time.Second {
		t.Errorf("a stop waited %s for a store that is down", waited)
	}
	// Between retries the batch is back in the queue (during one, it is
	// out with the store).
	err = wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 2*time.Second, true, func(context.Context) (bool, error) {
		return r.pendingLen() > 0, nil
	})
	if err != nil {
		t.Fatal("a failed write was not kept")
	}
	store.mu.Lock()
	store.fail = nil
	store.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if end, ok := store.get("uid-1", history.EventEnded); ok {
			if end.Stopper != history.StopperAdmin {
				t.Errorf("stopper %q", end.Stopper)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queued records never reached the store")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gatedStore holds every write until open is closed.
type gatedStore struct {
	*memStore
	open chan struct{}
}

func (s *gatedStore) Record(ctx context.Context, recs ...history.Record) error {
	select {
	case <-s.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.memStore.Record(ctx, recs...)
}

// The observer queues an evicted pod's end as soon as the cache shows it,
// so the stop reaction's Stopped has nothing new to write; it must still
// return only once that end is stored, as the pod is released after it.
func TestStoppedWaitsForTheEndTheObserverQueued(t *testing.T) {
	store := &gatedStore{memStore: newMemStore(), open: make(chan struct{})}
	r := newRecorder(t, store)
	r.SetLeading(true)
	<-r.rescan
	r.rescanPods(context.Background()) // an empty cache: this test drives the handler
	evicted := notebook(func(p *corev1.Pod) { p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted" })
	r.Handler().OnUpdate(nil, evicted)
	runWriter(t, r)

	info, stopped := poll.StopOf(evicted)
	if !stopped {
		t.Fatal("an evicted pod does not read stopped")
	}
	returned := make(chan struct{})
	go func() { defer close(returned); r.Stopped(context.Background(), evicted, info) }()
	select {
	case <-returned:
		t.Fatal("Stopped returned before the store had the end the observer queued")
	case <-time.After(100 * time.Millisecond):
	}
	close(store.open)
	<-returned
	if end, ok := store.get("uid-1", history.EventEnded); !ok || end.Stopper != history.StopperEvicted {
		t.Errorf("ended %+v, %v; want stored, evicted", end, ok)
	}
}

// Stops at the same time share transactions: a hundred of them cost far
// fewer than a hundred writes.
func TestConcurrentWritesAreGroupCommitted(t *testing.T) {
	store := newMemStore()
	store.delay = 20 * time.Millisecond
	r := running(t, store)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			p := notebook(func(p *corev1.Pod) { p.UID = types.UID(fmt.Sprintf("uid-%d", i)) })
			r.StopRequested(context.Background(), p, history.Actor{Kind: history.ActorUser, Name: "alice"}, history.StopperUser)
		})
	}
	wg.Wait()
	for i := range 100 {
		if _, ok := store.get(fmt.Sprintf("uid-%d", i), history.EventEnded); !ok {
			t.Fatalf("stop %d returned before its record was stored", i)
		}
	}
	if store.calls > 20 {
		t.Errorf("100 concurrent stops took %d transactions", store.calls)
	}
	t.Logf("100 concurrent stops, %d transactions", store.calls)
}

func TestRescanSkipsWhatIsRecorded(t *testing.T) {
	store := newMemStore()
	pod := notebook()
	r1 := newRecorder(t, store, pod)
	r1.rescanPods(context.Background())
	if err := r1.flushOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	calls := store.calls
	// A replica taking over asks the store once and writes nothing new.
	r2 := newRecorder(t, store, pod)
	r2.rescanPods(context.Background())
	if n := r2.pendingLen(); n != 0 {
		t.Errorf("the second replica queued %d records of a recorded pod", n)
	}
	if store.calls != calls {
		t.Errorf("%d writes", store.calls-calls)
	}
}

func TestForeignPodsAreIgnored(t *testing.T) {
	store := newMemStore()
	r := running(t, store)
	forged := notebook(annotate(serverid.AnnotationUser, "mallory"))
	r.Stopped(context.Background(), forged, poll.EndOf(forged))
	if len(store.recs) != 0 {
		t.Errorf("a pod whose key label does not match its annotations was recorded: %+v", store.recs)
	}
}

func (r *Recorder) pendingLen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// A lead taken before the pod cache synced rescans once it has: the pods
// the first LIST brings are recorded by the rescan, each once, and only
// what the store lacks.
func TestRescanWaitsForTheCache(t *testing.T) {
	store := newMemStore()
	var synced atomic.Bool
	pod := notebook()
	r, err := New(Options{Store: store, AnnotationPrefix: "galends/", Clock: clocktesting.NewFakePassiveClock(t0.Add(2 * time.Hour)),
		Pods: func() []*corev1.Pod {
			if synced.Load() {
				return []*corev1.Pod{pod}
			}
			return nil
		},
		Synced: synced.Load, Elected: true, WriteTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runWriter(t, r)
	r.SetLeading(true)
	// The LIST arrives: the handler sees the add before the rescan ran.
	r.Handler().OnAdd(pod, true)
	time.Sleep(120 * time.Millisecond)
	if _, ok := store.get("uid-1", history.EventCreated); ok {
		t.Fatal("recorded before the cache synced")
	}
	synced.Store(true)
	err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		_, ok := store.get("uid-1", history.EventReady)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("the rescan never recorded the synced cache's pod: %v", err)
	}
	// Observed from now on.
	r.Handler().OnDelete(notebook(annotate(serverid.AnnotationStopRequested, "culler:idle-culler")))
	err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		_, ok := store.get("uid-1", history.EventEnded)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("the end after the rescan was not recorded: %v", err)
	}
}
