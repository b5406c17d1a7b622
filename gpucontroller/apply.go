package gpucontroller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/dsmlp/spawner/reservation"
)

// apply writes a plan in the order reservation.Plan documents. Each step's
// writes run in parallel (bounded); a failed write is logged and planned
// again by a later cycle.
func (c *Controller) apply(ctx context.Context, plan *reservation.Plan) {
	now := plan.Now
	each(c.opts.Workers, plan.Evictions, func(ev reservation.Eviction) { c.evict(ctx, ev, now) })
	each(c.opts.Workers, plan.Cancels, func(cn reservation.Cancel) {
		changed, err := c.store.Cancel(ctx, cn.ReservationID, cn.Reason, cn.SupersededBy, now)
		c.m.write("cancel", err)
		if err != nil {
			c.log.Warn("cancelling reservation failed", zap.Int64("reservation", cn.ReservationID), zap.Error(err))
			return
		}
		if changed {
			fields := []zap.Field{zap.Int64("reservation", cn.ReservationID), zap.String("reason", string(cn.Reason))}
			if cn.Charge != nil {
				fields = append(fields, zap.String("workspace", cn.Charge.Workspace), zap.Float64("gpu_hours", cn.Charge.GPUHours))
			}
			c.log.Info("reservation cancelled", fields...)
		}
	})
	podNames := map[types.UID]string{}
	for _, a := range plan.Admissions {
		podNames[a.Pod.UID] = a.Pod.Name
	}
	var mu sync.Mutex
	minted := map[int64]bool{} // created by this plan
	failed := map[int64]bool{} // not in the store: its admission must wait
	each(c.opts.Workers, plan.Mints, func(m reservation.Mint) {
		r := m.Reservation
		created, err := c.store.Mint(ctx, r, podNames[r.PodUID])
		c.m.write("mint", err)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed[r.ID] = true
			c.log.Warn("minting lease failed", zap.Int64("reservation", r.ID), zap.String("namespace", r.Owner),
				zap.String("pod", podNames[r.PodUID]), zap.Error(err))
			return
		}
		minted[r.ID] = created
		if created {
			c.log.Info("on-demand lease minted", zap.Int64("reservation", r.ID), zap.String("kind", string(r.Kind)),
				zap.String("namespace", r.Owner), zap.String("pod", podNames[r.PodUID]), zap.String("workspace", r.Workspace),
				zap.String("class", r.Class), zap.Int("gpus", r.GPUs), zap.Time("end", r.End), zap.Float64("gpu_hours", m.Charge.GPUHours))
		}
	})
	each(c.opts.Workers, plan.Admissions, func(a reservation.PodPatch) {
		if failed[a.Reservation] {
			return
		}
		if err := c.patchPod(ctx, a, true); err != nil {
			if minted[a.Reservation] {
				if _, cerr := c.store.Cancel(context.WithoutCancel(ctx), a.Reservation, reservation.CancelRevoked, 0, now); cerr != nil {
					c.log.Warn("revoking the lease of a failed admission failed", zap.Int64("reservation", a.Reservation), zap.Error(cerr))
				}
			}
			return
		}
		c.mu.Lock()
		if t, ok := c.seen[a.Pod.UID]; ok {
			c.m.admission.Observe(c.clock.Since(t).Seconds())
			delete(c.seen, a.Pod.UID)
		}
		c.mu.Unlock()
		c.writeEvents(ctx, a.Events, now)
	})
	each(c.opts.Workers, plan.Updates, func(u reservation.PodPatch) {
		if err := c.patchPod(ctx, u, false); err == nil {
			c.writeEvents(ctx, u.Events, now)
		}
	})
	for _, ev := range plan.Events {
		select {
		case c.events <- queuedEvent{ev: ev, at: now}:
			c.backlog.Add(1)
		default:
			// The engine re-emits on the next change or repeat.
			c.m.write("event-dropped", nil)
		}
	}
}

// eventQueue bounds the waiting events not yet written.
const eventQueue = 1 << 16

type queuedEvent struct {
	ev reservation.Event
	at time.Time
}

// eventWriter writes queued waiting events with the events client.
func (c *Controller) eventWriter(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case q := <-c.events:
			_ = c.createEvent(ctx, c.opts.EventsClient, q.ev, q.at)
			c.backlog.Add(-1)
		}
	}
}

// EventBacklog is the number of waiting events queued but not yet written.
func (c *Controller) EventBacklog() int { return int(c.backlog.Load()) }

// each runs fn over items with at most n at a time.
func each[T any](n int, items []T, fn func(T)) {
	if len(items) == 0 {
		return
	}
	if len(items) == 1 {
		fn(items[0])
		return
	}
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, it := range items {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(it)
		}()
	}
	wg.Wait()
}

func podFields(ref reservation.PodRef) []zap.Field {
	return []zap.Field{zap.String("namespace", ref.Namespace), zap.String("pod", ref.Name), zap.String("uid", string(ref.UID))}
}

// patchPod writes one admission or annotation PATCH and keeps the result
// as the pod's overlay until the cache shows it.
func (c *Controller) patchPod(ctx context.Context, p reservation.PodPatch, admission bool) error {
	kind := "update"
	if admission {
		kind = "admit"
	}
	body, err := p.MergePatch()
	if err != nil {
		return err
	}
	pod, err := c.client.CoreV1().Pods(p.Pod.Namespace).Patch(ctx, p.Pod.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: fieldManager})
	c.m.write(kind, err)
	if err != nil {
		lvl := c.log.Warn
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			lvl = c.log.Info // the pod changed or went; the next cycle sees it
		}
		lvl("pod patch failed", append(podFields(p.Pod), zap.String("write", kind), zap.Int64("reservation", p.Reservation), zap.Error(err))...)
		return err
	}
	pod.ManagedFields = nil
	c.mu.Lock()
	c.overlay[pod.UID] = overlayPod{pod: pod, base: p.Pod.ResourceVersion, at: c.clock.Now()}
	c.mu.Unlock()
	if admission {
		c.log.Info("pod admitted", append(podFields(p.Pod), zap.Int64("reservation", p.Reservation))...)
	}
	return nil
}

const fieldManager = reservation.Component

// evict writes the stop event, then deletes the pod gracefully; the event
// must be acknowledged first, so the pod's owner reads why it went.
func (c *Controller) evict(ctx context.Context, ev reservation.Eviction, now time.Time) {
	if err := c.writeEvent(ctx, ev.Event, now); err != nil {
		return
	}
	if c.opts.OnEvict != nil {
		if pod, err := c.podLister.Pods(ev.Pod.Namespace).Get(ev.Pod.Name); err == nil && pod.UID == ev.Pod.UID {
			c.opts.OnEvict(ctx, pod, ev.Event.Reason, ev.Event.Message)
		}
	}
	uid := ev.Pod.UID
	err := c.client.CoreV1().Pods(ev.Pod.Namespace).Delete(ctx, ev.Pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		err = nil // gone already, or a different pod of that name now
	}
	c.m.write("evict", err)
	if err != nil {
		c.log.Warn("evicting pod failed", append(podFields(ev.Pod), zap.String("reason", ev.Event.Reason), zap.Error(err))...)
		return
	}
	c.log.Info("pod evicted", append(podFields(ev.Pod), zap.String("reason", ev.Event.Reason))...)
}

func (c *Controller) writeEvents(ctx context.Context, evs []reservation.Event, now time.Time) {
	for _, ev := range evs {
		_ = c.writeEvent(ctx, ev, now)
	}
}

// writeEvent creates a core/v1 Event about the pod under a deterministic
// name: the engine throttles repeats itself, and AlreadyExists means the
// event was told already.
func (c *Controller) writeEvent(ctx context.Context, ev reservation.Event, now time.Time) error {
	return c.createEvent(ctx, c.client, ev, now)
}

func (c *Controller) createEvent(ctx context.Context, client kubernetes.Interface, ev reservation.Event, now time.Time) error {
	ts := metav1.NewTime(now)
	obj := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: ev.Name(now, c.opts.Config.EventRepeat.Duration), Namespace: ev.Pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ev.Pod.Namespace, Name: ev.Pod.Name,
			UID: ev.Pod.UID, ResourceVersion: ev.Pod.ResourceVersion},
		Reason: ev.Reason, Message: ev.Message, Type: ev.Type, Action: ev.Action,
		Source:         corev1.EventSource{Component: reservation.Component},
		FirstTimestamp: ts, LastTimestamp: ts, Count: 1,
		ReportingController: reservation.Component, ReportingInstance: c.opts.Identity,
	}
	_, err := client.CoreV1().Events(ev.Pod.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = nil
	}
	c.m.write("event", err)
	c.m.events.WithLabelValues(ev.Reason).Inc()
	if err != nil {
		c.log.Warn("writing reservation event failed", append(podFields(ev.Pod), zap.String("reason", ev.Reason), zap.Error(err))...)
		return fmt.Errorf("writing event %s: %w", ev.Reason, err)
	}
	c.log.Info("reservation event", append(podFields(ev.Pod), zap.String("reason", ev.Reason), zap.String("type", ev.Type))...)
	return nil
}
