package reservationstore

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/dsmlp/spawner/reservation"
)

func TestRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC)
	r := reservation.Reservation{ID: 42, Kind: reservation.KindOnDemand, Owner: "alice", Workspace: "DSC10", Class: "a30", GPUs: 2,
		Start: t0, End: t0.Add(70 * time.Minute), Status: reservation.StatusActive, PodUID: "uid-1"}
	u, err := toUnstructured(toObject(r, "jupyter-alice"))
	if err != nil {
		t.Fatal(err)
	}
	if u.GetName() != "res-42" || u.GetLabels()[LabelPodUID] != "uid-1" {
		t.Errorf("meta %s %v", u.GetName(), u.GetLabels())
	}
	if s, _, _ := unstructured.NestedString(u.Object, "spec", "start"); s != "2026-12-01T18:00:00Z" {
		t.Errorf("start %q, want UTC RFC 3339", s)
	}
	o, err := fromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.Reservation(); got != r {
		t.Errorf("round trip\n got %+v\nwant %+v", got, r)
	}
}

func TestGPUHours(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC)
	lease := reservation.Reservation{Kind: reservation.KindOnDemand, GPUs: 2, Start: t0, End: t0.Add(90 * time.Minute)}
	if h := GPUHours(lease, t0.Add(time.Minute)); h != 3 {
		t.Errorf("a lease is charged whole when granted: %v", h)
	}
	lease.Status, lease.CancelledAt = reservation.StatusCancelled, t0.Add(30*time.Minute)
	if h := GPUHours(lease, t0.Add(2*time.Hour)); h != 1 {
		t.Errorf("a lease ended early is charged to its end: %v", h)
	}
	booking := reservation.Reservation{Kind: reservation.KindBooking, GPUs: 4, Start: t0, End: t0.Add(2 * time.Hour)}
	if h := GPUHours(booking, t0.Add(30*time.Minute)); h != 2 {
		t.Errorf("a booking is charged as its window passes: %v", h)
	}
	if h := GPUHours(booking, t0.Add(-time.Hour)); h != 0 {
		t.Errorf("a future booking costs nothing yet: %v", h)
	}
	if h := GPUHours(reservation.Reservation{Kind: reservation.KindBestEffort, GPUs: 8, Start: t0, End: t0}, t0.Add(time.Hour)); h != 0 {
		t.Errorf("best effort is free: %v", h)
	}
}
