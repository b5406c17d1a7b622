package gpucontroller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/reservationstore"
)

// CreateBooking books a window for an owner. Inputs are checked by the
// caller; the store allocates the ID.
func (c *Controller) CreateBooking(ctx context.Context, r reservation.Reservation) (reservation.Reservation, error) {
	b, err := c.store.CreateBooking(ctx, r)
	if err != nil {
		return b, err
	}
	c.log.Info("booking created", zap.Int64("reservation", b.ID), zap.String("namespace", b.Owner), zap.String("workspace", b.Workspace),
		zap.String("class", b.Class), zap.Int("gpus", b.GPUs), zap.Time("start", b.Start), zap.Time("end", b.End))
	c.poke()
	return b, nil
}

// CancelBooking cancels a reservation for a person (the owner, or someone
// else); the engine relinks or evicts the pods under it.
func (c *Controller) CancelBooking(ctx context.Context, id int64, reason reservation.CancelReason) error {
	// An admin write that lost a race (409) is retried: the store writes
	// from its informer cache with the cached resourceVersion, so each retry
	// waits for the watch to bring the newer version (DefaultBackoff: 10 ms,
	// then 50, 250 and 1250 ms; the cache is usually current within ms).
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		_, err := c.store.Cancel(ctx, id, reason, 0, c.clock.Now())
		return err
	})
	if err != nil {
		return err
	}
	c.log.Info("reservation cancelled by request", zap.Int64("reservation", id), zap.String("reason", string(reason)))
	c.poke()
	return nil
}

// Reassign gives a booking to another owner.
func (c *Controller) Reassign(ctx context.Context, id int64, owner string) error {
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error { return c.store.Reassign(ctx, id, owner, c.clock.Now()) })
	if err != nil {
		return err
	}
	c.log.Info("booking reassigned", zap.Int64("reservation", id), zap.String("owner", owner))
	c.poke()
	return nil
}

// SetPaused pauses (reason kept) or resumes on-demand admission for a
// class. The state is a ConfigMap, so it outlives this process.
func (c *Controller) SetPaused(ctx context.Context, class string, paused bool, reason string) error {
	cms := c.client.CoreV1().ConfigMaps(c.opts.Namespace)
	var value any
	if paused {
		value = reason
	}
	body, err := json.Marshal(map[string]any{"data": map[string]any{class: value}})
	if err != nil {
		return err
	}
	_, err = cms.Patch(ctx, c.pauseName(), types.MergePatchType, body, metav1.PatchOptions{FieldManager: fieldManager})
	if apierrors.IsNotFound(err) && paused {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: c.pauseName(), Namespace: c.opts.Namespace}, Data: map[string]string{class: reason}}
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: fieldManager})
		if apierrors.IsAlreadyExists(err) {
			_, err = cms.Patch(ctx, c.pauseName(), types.MergePatchType, body, metav1.PatchOptions{FieldManager: fieldManager})
		}
	} else if apierrors.IsNotFound(err) {
		err = nil // nothing paused
	}
	if err != nil {
		return fmt.Errorf("recording on-demand pause of class %s: %w", class, err)
	}
	c.log.Info("on-demand admission", zap.String("class", class), zap.Bool("paused", paused), zap.String("why", reason))
	c.poke()
	return nil
}

// Charge is one workspace's GPU-hours over a period, by kind.
type Charge struct {
	Workspace string  `json:"workspace"`
	Booking   float64 `json:"booking_gpu_hours"`
	OnDemand  float64 `json:"on_demand_gpu_hours"`
	Total     float64 `json:"total_gpu_hours"`
}

// Charges sums GPU-hours per workspace for reservations starting in
// [since, until): bookings for the part of their window that has passed
// and was not cancelled, leases for their window up to when they ended.
func (c *Controller) Charges(since, until time.Time) []Charge {
	now := c.clock.Now()
	by := map[string]*Charge{}
	for _, r := range c.store.List() {
		if r.Start.Before(since) || !r.Start.Before(until) {
			continue
		}
		h := reservationstore.GPUHours(r, now)
		ch := by[r.Workspace]
		if ch == nil {
			ch = &Charge{Workspace: r.Workspace}
			by[r.Workspace] = ch
		}
		switch r.Kind {
		case reservation.KindBooking:
			ch.Booking += h
		case reservation.KindOnDemand:
			ch.OnDemand += h
		}
		ch.Total += h
	}
	out := make([]Charge, 0, len(by))
	for _, ch := range by {
		out = append(out, *ch)
	}
	slices.SortFunc(out, func(a, b Charge) int {
		switch {
		case a.Workspace < b.Workspace:
			return -1
		case a.Workspace > b.Workspace:
			return 1
		}
		return 0
	})
	return out
}
