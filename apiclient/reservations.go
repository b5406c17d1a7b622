package apiclient

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/reservation"
)

// ReservationFilter is GET /reservations' query: zero fields match
// everything.
type ReservationFilter struct {
	Kind      reservation.Kind
	State     reservation.Status
	Owner     string
	Class     string
	Workspace string
}

// Reservations lists bookings, on-demand leases and best-effort records
// (admin).
func (c *Client) Reservations(ctx context.Context, f ReservationFilter) (*hubapi.ReservationList, error) {
	q := url.Values{}
	for k, v := range map[string]string{"kind": string(f.Kind), "state": string(f.State), "owner": f.Owner, "class": f.Class, "workspace": f.Workspace} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var l hubapi.ReservationList
	if _, err := c.call(ctx, http.MethodGet, "/api/v1/reservations", q, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

func reservationPath(id int64) string { return "/api/v1/reservations/" + strconv.FormatInt(id, 10) }

// Reservation returns one reservation (admin).
func (c *Client) Reservation(ctx context.Context, id int64) (*reservation.Reservation, error) {
	var r reservation.Reservation
	if _, err := c.call(ctx, http.MethodGet, reservationPath(id), nil, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// CreateBooking books GPUs of a class for a window (admin).
func (c *Client) CreateBooking(ctx context.Context, req hubapi.BookingRequest) (*reservation.Reservation, error) {
	var r reservation.Reservation
	if _, err := c.call(ctx, http.MethodPost, "/api/v1/reservations", nil, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// CancelReservation cancels a reservation (admin); reason is
// reservation.CancelUser (by its owner) or CancelOther, "" meaning other.
func (c *Client) CancelReservation(ctx context.Context, id int64, reason reservation.CancelReason) error {
	var q url.Values
	if reason != "" {
		q = url.Values{"reason": {string(reason)}}
	}
	_, err := c.call(ctx, http.MethodDelete, reservationPath(id), q, nil, nil)
	return err
}

// Reassign gives a booking to another owner (a namespace) and returns it
// after the change (admin).
func (c *Client) Reassign(ctx context.Context, id int64, owner string) (*reservation.Reservation, error) {
	var r reservation.Reservation
	if _, err := c.call(ctx, http.MethodPost, reservationPath(id)+"/reassign", nil, hubapi.ReassignRequest{Owner: owner}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func hoursQuery(hours float64) url.Values {
	if hours <= 0 {
		return nil
	}
	return url.Values{"hours": {strconv.FormatFloat(hours, 'g', -1, 64)}}
}

// GPUClasses returns capacity, occupancy, queue and the preemption risk
// within hours (0: spawnerd's default, 6) per GPU class (admin).
func (c *Client) GPUClasses(ctx context.Context, hours float64) (*hubapi.ClassList, error) {
	var l hubapi.ClassList
	if _, err := c.call(ctx, http.MethodGet, "/api/v1/gpu-classes", hoursQuery(hours), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

func pausePath(class string) string { return "/api/v1/gpu-classes/" + url.PathEscape(class) + "/pause" }

// PauseClass pauses on-demand admission for a GPU class; reason is quoted
// in the events of the pods left waiting (admin).
func (c *Client) PauseClass(ctx context.Context, class, reason string) error {
	_, err := c.call(ctx, http.MethodPut, pausePath(class), nil, hubapi.PauseRequest{Reason: reason}, nil)
	return err
}

// ResumeClass resumes on-demand admission for a GPU class (admin).
func (c *Client) ResumeClass(ctx context.Context, class string) error {
	_, err := c.call(ctx, http.MethodDelete, pausePath(class), nil, nil, nil)
	return err
}

// Charges returns GPU-hours per workspace for reservations starting in
// [since, until); a zero time leaves spawnerd's default (30 days ago, 24
// hours ahead) (admin).
func (c *Client) Charges(ctx context.Context, since, until time.Time) (*hubapi.ChargeList, error) {
	q := url.Values{}
	if !since.IsZero() {
		q.Set("since", since.UTC().Format(time.RFC3339))
	}
	if !until.IsZero() {
		q.Set("until", until.UTC().Format(time.RFC3339))
	}
	var l hubapi.ChargeList
	if _, err := c.call(ctx, http.MethodGet, "/api/v1/charges", q, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// PreemptionRisk returns the booking boundaries within hours (0: 6) per
// class and what they would preempt (admin).
func (c *Client) PreemptionRisk(ctx context.Context, hours float64) (*hubapi.RiskList, error) {
	var l hubapi.RiskList
	if _, err := c.call(ctx, http.MethodGet, "/api/v1/preemption-risk", hoursQuery(hours), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}
