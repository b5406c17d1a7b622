package apiclienttest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dsmlp/spawner/gpucontroller"
	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/reservationstore"
)

// Reservations is a fake of the GPU reservation engine's admin side
// (hubapi.Reservations).
type Reservations struct {
	mu     sync.Mutex
	now    time.Time
	list   []reservation.Reservation
	paused map[string]string
}

func newReservations(now time.Time) *Reservations {
	hour := now.Truncate(time.Hour)
	return &Reservations{now: now, paused: map[string]string{}, list: []reservation.Reservation{
		{ID: 5, Kind: reservation.KindOnDemand, Owner: "bob", Workspace: "DSC10", Class: "a5000", GPUs: 1,
			Start: hour.Add(-2 * time.Hour), End: hour.Add(-time.Hour), Status: reservation.StatusCancelled,
			CancelReason: reservation.CancelSuperseded, CancelledAt: hour.Add(-90 * time.Minute), SupersededBy: 7,
			PodUID: "0b9d4e21-77aa-4f0e-8c3b-5e6f7a8b9c02"},
		{ID: 7, Kind: reservation.KindBooking, Owner: "bob", Workspace: "DSC10", Class: "a5000", GPUs: 2,
			Start: hour.Add(-time.Hour), End: hour.Add(2 * time.Hour), Status: reservation.StatusActive},
	}}
}

// List returns every reservation.
func (r *Reservations) List() []reservation.Reservation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.list)
}

// Paused returns why each paused class is paused.
func (r *Reservations) Paused() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	for k, v := range r.paused {
		out[k] = v
	}
	return out
}

// Reservations implements hubapi.Reservations.
func (r *Reservations) Reservations() []reservation.Reservation { return r.List() }

// CreateBooking implements hubapi.Reservations.
func (r *Reservations) CreateBooking(_ context.Context, b reservation.Reservation) (reservation.Reservation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last int64
	for _, x := range r.list {
		last = max(last, x.ID)
	}
	b.ID, b.Kind, b.Status = last+1, reservation.KindBooking, reservation.StatusActive
	r.list = append(r.list, b)
	return b, nil
}

func (r *Reservations) index(id int64) (int, error) {
	for i, x := range r.list {
		if x.ID == id {
			return i, nil
		}
	}
	return 0, fmt.Errorf("reservation %d: %w", id, reservationstore.ErrNotFound)
}

// CancelBooking implements hubapi.Reservations.
func (r *Reservations) CancelBooking(_ context.Context, id int64, reason reservation.CancelReason) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, err := r.index(id)
	if err != nil {
		return err
	}
	if r.list[i].Status == reservation.StatusCancelled {
		return fmt.Errorf("reservation %d is cancelled: %w", id, reservationstore.ErrInvalid)
	}
	r.list[i].Status, r.list[i].CancelReason, r.list[i].CancelledAt = reservation.StatusCancelled, reason, r.now
	return nil
}

// Reassign implements hubapi.Reservations.
func (r *Reservations) Reassign(_ context.Context, id int64, owner string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, err := r.index(id)
	if err != nil {
		return err
	}
	switch {
	case r.list[i].Kind != reservation.KindBooking:
		return fmt.Errorf("reservation %d is a %s, only bookings can be reassigned: %w", id, r.list[i].Kind, reservationstore.ErrInvalid)
	case r.list[i].Status == reservation.StatusCancelled:
		return fmt.Errorf("reservation %d is cancelled: %w", id, reservationstore.ErrInvalid)
	}
	r.list[i].Owner = owner
	return nil
}

// SetPaused implements hubapi.Reservations.
func (r *Reservations) SetPaused(_ context.Context, class string, paused bool, reason string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !paused {
		delete(r.paused, class)
		return nil
	}
	if reason == "" {
		reason = "paused by an administrator"
	}
	r.paused[class] = reason
	return nil
}

// Classes implements hubapi.Reservations: the booking of bob's class ends
// within the horizon.
func (r *Reservations) Classes(horizon time.Duration) ([]reservation.ClassStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a5000 := reservation.ClassStatus{Class: "a5000", DisplayName: "NVIDIA RTX A5000", Nodes: 2, Capacity: 8, Used: 5, Free: 3,
		Booked: 2, Unclaimed: 1, AdmittedPods: 4, AdmittedGPUs: 5, WaitingPods: 1, WaitingGPUs: 1, Paused: r.paused["a5000"],
		Risk: []reservation.RiskPoint{}}
	if boundary := r.now.Truncate(time.Hour).Add(2 * time.Hour); boundary.Sub(r.now) <= horizon {
		a5000.Risk = append(a5000.Risk, reservation.RiskPoint{Boundary: boundary, Demand: 4, Shortfall: 1, AtRiskPods: 2, AtRiskGPUs: 2, Unmet: 0})
	}
	a100 := reservation.ClassStatus{Class: "a100", DisplayName: "NVIDIA A100 80GB", Nodes: 1, Capacity: 4, Free: 4,
		Paused: r.paused["a100"], Risk: []reservation.RiskPoint{}}
	return []reservation.ClassStatus{a5000, a100}, nil
}

// Charges implements hubapi.Reservations.
func (r *Reservations) Charges(time.Time, time.Time) []gpucontroller.Charge {
	return []gpucontroller.Charge{
		{Workspace: "DSC10", Booking: 6, OnDemand: 1.5, Total: 7.5},
		{Workspace: "ORG_ON_DEMAND", OnDemand: 0.25, Total: 0.25},
	}
}

// KnownClass implements hubapi.Reservations.
func (r *Reservations) KnownClass(class string) bool { return class == "a5000" || class == "a100" }

// Now implements hubapi.Reservations.
func (r *Reservations) Now() time.Time { return r.now }
