package gpucontroller

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

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
	c.apply(context.Background(), &reservation.Plan{Now: time.Now(), Evictions: []reservation.Eviction{{Pod: ref, Event: ev}}})
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
	c2.apply(context.Background(), &reservation.Plan{Now: time.Now(), Evictions: []reservation.Eviction{{Pod: ref, Event: ev}}})
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
		Admissions: []reservation.PodPatch{{Pod: ref, Reservation: 9, Tolerations: []corev1.Toleration{{Key: "gpu-class-reservation", Value: "a30"}}}}})
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
	c.apply(context.Background(), &reservation.Plan{Now: time.Now(), Events: []reservation.Event{{Pod: ref, Reason: reservation.NoReservation, Message: "No GPU reservation matches this pod."}}})
	if len(client.Actions()) != 0 || c.EventBacklog() != 1 {
		t.Fatalf("actions %v backlog %d: the event should wait in the queue", actionsOf(client), c.EventBacklog())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.eventWriter(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for c.EventBacklog() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := actionsOf(client); len(got) != 1 || got[0] != "create events" {
		t.Errorf("actions %v", got)
	}
}
