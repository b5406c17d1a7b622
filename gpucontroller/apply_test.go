package gpucontroller

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/reservationstore"
)

// Unit tests of the plan writer with fake clients; the behaviour against a
// real API server is in e2e/reservation.

func newTestController(t *testing.T, objs ...runtime.Object) (*Controller, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{reservationstore.Resource: "GPUReservationList"})
	c, err := New(client, reservationstore.New(dyn, time.Minute), Options{Namespace: "gpu",
		Config: reservation.Config{Classes: []reservation.GPUClass{{Label: "a30"}}}})
	if err != nil {
		t.Fatal(err)
	}
	return c, client
}

func testPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "alice", Name: "p", UID: "uid-p", ResourceVersion: "5"}}
}

func actionsOf(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
	}
	return out
}

// The stop event is written before the delete, and a failed event write
// stops the delete (the pod's owner must be able to read why it went).
func TestEvictionWritesEventFirst(t *testing.T) {
	c, client := newTestController(t, testPod())
	ref := reservation.PodRef{Namespace: "alice", Name: "p", UID: "uid-p"}
	ev := reservation.Event{Pod: ref, Reason: reservation.Preempted, Type: corev1.EventTypeNormal, Message: "Pod preempted."}
	c.apply(context.Background(), &reservation.Plan{Now: time.Now(), Evictions: []reservation.Eviction{{Pod: ref, Event: ev}}}, nil)
	if got := actionsOf(client); len(got) != 2 || got[0] != "create events" || got[1] != "delete pods" {
		t.Fatalf("actions %v, want the event then the delete", got)
	}
	evs, _ := client.CoreV1().Events("alice").List(context.Background(), metav1.ListOptions{})
	if len(evs.Items) != 1 || evs.Items[0].Source.Component != reservation.Component || evs.Items[0].InvolvedObject.UID != "uid-p" {
		t.Errorf("event %+v", evs.Items)
	}

	c2, client2 := newTestController(t, testPod())
	client2.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("apiserver unavailable")
	})
	c2.apply(context.Background(), &reservation.Plan{Now: time.Now(), Evictions: []reservation.Eviction{{Pod: ref, Event: ev}}}, nil)
	for _, a := range actionsOf(client2) {
		if a == "delete pods" {
			t.Error("deleted a pod whose stop event could not be written")
		}
	}
}

// An admission whose lease could not be minted is not written: a pod is
// never admitted without its reservation.
func TestAdmissionWaitsForItsLease(t *testing.T) {
	c, client := newTestController(t, testPod())
	ref := reservation.PodRef{Namespace: "alice", Name: "p", UID: "uid-p", ResourceVersion: "5"}
	// The server refuses the lease.
	failing := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{reservationstore.Resource: "GPUReservationList"})
	failing.PrependReactor("create", "gpureservations", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("admission webhook denied")
	})
	c.store = reservationstore.New(failing, time.Minute)
	lease := reservation.Reservation{ID: 9, Kind: reservation.KindOnDemand, Owner: "alice", Workspace: reservation.OrgOnDemand,
		Class: "a30", GPUs: 1, Start: time.Now(), End: time.Now().Add(time.Hour), PodUID: "uid-p"}
	c.apply(context.Background(), &reservation.Plan{Now: time.Now(), Mints: []reservation.Mint{{Reservation: lease}},
		Admissions: []reservation.PodPatch{{Pod: ref, Reservation: 9, Tolerations: []corev1.Toleration{{Key: "gpu-class-reservation", Value: "a30"}}}}}, nil)
	for _, a := range actionsOf(client) {
		if a == "patch pods" {
			t.Fatal("admitted a pod whose lease was not created")
		}
	}
}

// Waiting events go through the events queue, not the decision loop.
func TestWaitingEventsAreQueued(t *testing.T) {
	c, client := newTestController(t)
	ref := reservation.PodRef{Namespace: "alice", Name: "p", UID: "uid-p"}
	c.apply(context.Background(), &reservation.Plan{Now: time.Now(), Events: []reservation.Event{{Pod: ref, Reason: reservation.NoReservation, Message: "No GPU reservation matches this pod."}}}, nil)
	if len(client.Actions()) != 0 || c.EventBacklog() != 1 {
		t.Fatalf("actions %v backlog %d: the event should wait in the queue", actionsOf(client), c.EventBacklog())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	drain(ctx, c)
	if got := actionsOf(client); len(got) != 1 || got[0] != "create events" {
		t.Errorf("actions %v", got)
	}
}

// An admission's events are queued once its PATCH succeeds and written
// in order by the event writers, so the next plan need not wait for them;
// they come before waiting events, and a failed one holds back the rest of
// that pod's events.
func TestAdmissionEventsFollowThePatch(t *testing.T) {
	c, client := newTestController(t, testPod())
	ref := reservation.PodRef{Namespace: "alice", Name: "p", UID: "uid-p", ResourceVersion: "5"}
	waiting := reservation.Event{Pod: reservation.PodRef{Namespace: "alice", Name: "q", UID: "uid-q"}, Reason: reservation.NoReservation, Message: "waits"}
	told := []reservation.Event{
		{Pod: ref, Reason: reservation.RuntimeGuaranteed, Type: corev1.EventTypeNormal, Message: "first"},
		{Pod: ref, Reason: reservation.AnnotationIgnored, Type: corev1.EventTypeNormal, Message: "second"},
	}
	c.apply(context.Background(), &reservation.Plan{Now: time.Now(), Events: []reservation.Event{waiting},
		Admissions: []reservation.PodPatch{{Pod: ref, Reservation: 1, Annotations: map[string]*string{"a": ptr("b")}, Events: told}}}, nil)
	if got := actionsOf(client); len(got) != 1 || got[0] != "patch pods" {
		t.Fatalf("actions %v: only the PATCH belongs to the plan", got)
	}
	if c.EventBacklog() != 2 {
		t.Fatalf("backlog %d, want the admission's events and the waiting event", c.EventBacklog())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	drain(ctx, c)
	var order []string
	for _, a := range client.Actions() {
		if ca, ok := a.(k8stesting.CreateAction); ok {
			order = append(order, ca.GetObject().(*corev1.Event).Message)
		}
	}
	if want := []string{"first", "second", "waits"}; !slices.Equal(order, want) {
		t.Errorf("events written %v, want %v", order, want)
	}

	// The first event fails: the second must not be written before it.
	c2, client2 := newTestController(t, testPod())
	client2.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.CreateAction).GetObject().(*corev1.Event).Message == "first" {
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	c2.apply(context.Background(), &reservation.Plan{Now: time.Now(),
		Admissions: []reservation.PodPatch{{Pod: ref, Reservation: 1, Annotations: map[string]*string{"a": ptr("b")}, Events: told}}}, nil)
	drain(ctx, c2)
	if c2.EventBacklog() != 0 {
		t.Fatal("the failed events were never taken off the queue")
	}
	for _, a := range client2.Actions() {
		if ca, ok := a.(k8stesting.CreateAction); ok && ca.GetObject().(*corev1.Event).Message == "second" {
			t.Error("wrote the second event after the first failed")
		}
	}
}

func ptr(s string) *string { return &s }

// An admission PATCH refused with Conflict is made again against the new
// version when only the pod's status moved on (the scheduler marking it
// unschedulable), and left to the next cycle when anything the decision
// read changed.
func TestAdmissionConflictRetriedWhenOnlyStatusChanged(t *testing.T) {
	for _, tc := range []struct {
		name      string
		change    func(*corev1.Pod)
		wantPatch int
	}{
		{"status", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse}}
		}, 2},
		{"labels", func(p *corev1.Pod) { p.Labels = map[string]string{"workspace": "other"} }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			planned := testPod()
			now := planned.DeepCopy()
			now.ResourceVersion = "6"
			tc.change(now)
			c, client := newTestController(t, now)
			var rvs []string
			client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				var doc struct {
					Metadata struct {
						ResourceVersion string `json:"resourceVersion"`
					} `json:"metadata"`
				}
				_ = json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &doc)
				rvs = append(rvs, doc.Metadata.ResourceVersion)
				if doc.Metadata.ResourceVersion != now.ResourceVersion {
					return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", errors.New("the object has been modified"))
				}
				return false, nil, nil
			})
			ref := reservation.PodRef{Namespace: "alice", Name: "p", UID: "uid-p", ResourceVersion: "5"}
			c.apply(context.Background(), &reservation.Plan{Now: time.Now(), Admissions: []reservation.PodPatch{{Pod: ref, Reservation: 1,
				Tolerations: []corev1.Toleration{{Key: "gpu-class-reservation", Value: "a30"}}}}}, []*corev1.Pod{planned})
			if len(rvs) != tc.wantPatch {
				t.Fatalf("PATCHes made against versions %v, want %d", rvs, tc.wantPatch)
			}
			if tc.wantPatch == 2 && rvs[1] != "6" {
				t.Errorf("retry made against version %s, want 6", rvs[1])
			}
		})
	}
}

// drain runs an event writer for c until its queue is empty, or 5 s.
func drain(ctx context.Context, c *Controller) {
	go c.eventWriter(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for c.EventBacklog() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// With a WatchClient, every informer lists and watches through it and the
// client is left to the engine's writes.
func TestWatchClientFeedsTheInformers(t *testing.T) {
	client, watchClient := fake.NewClientset(), fake.NewClientset()
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{reservationstore.Resource: "GPUReservationList"})
	c, err := New(client, reservationstore.New(dyn, time.Minute), Options{Namespace: "gpu", WatchClient: watchClient,
		Config: reservation.Config{Classes: []reservation.GPUClass{{Label: "a30"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range c.startFactories {
		f.Start(t.Context().Done())
	}
	for _, synced := range []func() bool{c.pods.HasSynced, c.nodeInf.HasSynced, c.pauseInf.HasSynced, c.unmanaged.HasSynced} {
		if !cache.WaitForCacheSync(t.Context().Done(), synced) {
			t.Fatal("an informer never synced")
		}
	}
	listed := map[string]bool{}
	for _, a := range watchClient.Actions() {
		if a.GetVerb() == "list" {
			listed[a.GetResource().Resource] = true
		}
	}
	for _, r := range []string{"pods", "nodes", "configmaps"} {
		if !listed[r] {
			t.Errorf("the watch client never listed %s (actions %v)", r, actionsOf(watchClient))
		}
	}
	if got := actionsOf(client); len(got) != 0 {
		t.Errorf("the client was used for %v; only the watch client should be", got)
	}
}
