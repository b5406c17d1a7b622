// Package reservationstore keeps GPU reservations (bookings, on-demand
// leases, best-effort records) as GPUReservation custom resources, so that
// kubectl can read them, they survive restarts and every replica shares
// them. It reads through an informer and writes idempotently: objects are
// named res-<id>, and a lease create for a pod that already has one is a
// no-op.
package reservationstore

import (
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsmlp/spawner/reservation"
)

// The custom resource (deploy/helm/spawnerd/crds/gpureservations.yaml).
var (
	Group    = "reservations.dsmlp.io"
	Version  = "v1alpha1"
	Resource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "gpureservations"}
)

// Labels on every object, for kubectl -l and server-side filters.
const (
	LabelKind   = "reservations.dsmlp.io/kind"
	LabelOwner  = "reservations.dsmlp.io/owner"
	LabelClass  = "reservations.dsmlp.io/class"
	LabelPodUID = "reservations.dsmlp.io/pod-uid"
)

// Object is the GPUReservation resource.
type Object struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitzero"`
}

// Spec is what was reserved.
type Spec struct {
	ID        int64       `json:"id"`
	Kind      string      `json:"kind"`
	Owner     string      `json:"owner"`
	Workspace string      `json:"workspace"`
	Class     string      `json:"class"`
	GPUs      int         `json:"gpus"`
	Start     metav1.Time `json:"start"`
	End       metav1.Time `json:"end"`
	PodUID    string      `json:"podUID,omitempty"`
	PodName   string      `json:"podName,omitempty"`
}

// Status is whether it still holds GPUs, and its history.
type Status struct {
	State          string         `json:"state,omitempty"`
	CancelReason   string         `json:"cancelReason,omitempty"`
	CancelledAt    *metav1.Time   `json:"cancelledAt,omitempty"`
	SupersededBy   int64          `json:"supersededBy,omitempty"`
	PreviousOwners []OwnerHistory `json:"previousOwners,omitempty"`
}

// OwnerHistory is an owner a booking had until a reassignment.
type OwnerHistory struct {
	Owner string      `json:"owner"`
	Until metav1.Time `json:"until"`
}

// Name is the object name of reservation id.
func Name(id int64) string { return "res-" + strconv.FormatInt(id, 10) }

// toObject renders a reservation as a resource.
func toObject(r reservation.Reservation, podName string) *Object {
	o := &Object{
		TypeMeta: metav1.TypeMeta{APIVersion: Group + "/" + Version, Kind: "GPUReservation"},
		ObjectMeta: metav1.ObjectMeta{Name: Name(r.ID), Labels: map[string]string{
			LabelKind: string(r.Kind), LabelOwner: r.Owner, LabelClass: r.Class,
		}},
		Spec: Spec{ID: r.ID, Kind: string(r.Kind), Owner: r.Owner, Workspace: r.Workspace, Class: r.Class, GPUs: r.GPUs,
			Start: metav1.NewTime(r.Start.UTC()), End: metav1.NewTime(r.End.UTC()), PodUID: string(r.PodUID), PodName: podName},
		Status: Status{State: string(reservation.StatusActive)},
	}
	if r.PodUID != "" {
		o.Labels[LabelPodUID] = string(r.PodUID)
	}
	return o
}

// Reservation is the engine's view of the object.
func (o *Object) Reservation() reservation.Reservation {
	r := reservation.Reservation{
		ID: o.Spec.ID, Kind: reservation.Kind(o.Spec.Kind), Owner: o.Spec.Owner, Workspace: o.Spec.Workspace,
		Class: o.Spec.Class, GPUs: o.Spec.GPUs, Start: o.Spec.Start.UTC(), End: o.Spec.End.UTC(),
		Status: reservation.StatusActive, PodUID: types.UID(o.Spec.PodUID),
	}
	if o.Status.State == string(reservation.StatusCancelled) {
		r.Status = reservation.StatusCancelled
		r.CancelReason = reservation.CancelReason(o.Status.CancelReason)
		r.SupersededBy = o.Status.SupersededBy
		if o.Status.CancelledAt != nil {
			r.CancelledAt = o.Status.CancelledAt.UTC()
		}
	}
	return r
}

func fromUnstructured(u *unstructured.Unstructured) (*Object, error) {
	var o Object
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &o); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", u.GetName(), err)
	}
	return &o, nil
}

func toUnstructured(o *Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", o.Name, err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// GPUHours is what a reservation has cost up to now: its GPUs times the part
// of its window that was not cancelled. Best-effort records cost nothing.
func GPUHours(r reservation.Reservation, now time.Time) float64 {
	if r.Kind == reservation.KindBestEffort {
		return 0
	}
	end := r.End
	if r.Status == reservation.StatusCancelled && r.CancelledAt.Before(end) {
		end = r.CancelledAt
	}
	// A lease is charged in full when granted (refunded only when it ends
	// early); a booking as its window passes.
	if r.Kind == reservation.KindBooking && now.Before(end) {
		end = now
	}
	if !end.After(r.Start) {
		return 0
	}
	return float64(r.GPUs) * end.Sub(r.Start).Hours()
}
