package gpucontroller

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/dsmlp/spawner/reservation"
)

// apply writes a plan in the order reservation.Plan documents. Each step's
// writes run in parallel (bounded); a failed write is logged and planned
// again by a later cycle.
//
// basis are the pods the plan was decided from (the snapshot's), so that
// a PATCH refused only because the pod's status moved on can be made
// again at once; nil turns that off.
func (c *Controller) apply(ctx context.Context, plan *reservation.Plan, basis []*corev1.Pod) {
	now := plan.Now
	planned := newBasisIndex(basis)
	each(c.opts.Workers, plan.Evictions, func(ev reservation.Eviction) { c.evict(ctx, ev, now) })
	each(c.opts.Workers, plan.Cancels, func(cn reservation.Cancel) {
		start := time.Now()
		changed, err := c.store.Cancel(ctx, cn.ReservationID, cn.Reason, cn.SupersededBy, now)
		c.m.write("cancel", start, err)
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
		start := time.Now()
		created, err := c.store.Mint(ctx, r, podNames[r.PodUID])
		c.m.write("mint", start, err)
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
		if err := c.patchPod(ctx, a, true, planned); err != nil {
			if minted[a.Reservation] {
				if _, cerr := c.store.Cancel(context.WithoutCancel(ctx), a.Reservation, reservation.CancelRevoked, 0, now); cerr != nil {
					c.log.Warn("revoking the lease of a failed admission failed", zap.Int64("reservation", a.Reservation), zap.Error(cerr))
				}
			}
			return
		}
		c.mu.Lock()
		if t, ok := c.seen[a.Pod.UID]; ok {
			c.m.admission.Observe(time.Since(t).Seconds())
			delete(c.seen, a.Pod.UID)
		}
		c.mu.Unlock()
		c.tell(ctx, a.Events, now)
	})
	each(c.opts.Workers, plan.Updates, func(u reservation.PodPatch) {
		if err := c.patchPod(ctx, u, false, planned); err == nil {
			c.tell(ctx, u.Events, now)
		}
	})
	for _, ev := range plan.Events {
		select {
		case c.events <- queuedEvent{evs: []reservation.Event{ev}, at: now}:
			c.backlog.Add(1)
		default:
			// The engine re-emits on the next change or repeat.
			c.m.write("event-dropped", time.Time{}, nil)
		}
	}
}

// eventQueue bounds the waiting events not yet written.
const eventQueue = 1 << 16

// queuedEvent is one pod's events, written in order.
type queuedEvent struct {
	evs []reservation.Event
	at  time.Time
}

// tell queues the events of a PATCH that succeeded. They are written by
// the event writers ahead of any waiting event, so the next plan's writes
// need not wait for them (at seconds of API latency, writing them inline
// halved the admission rate). Unlike waiting events they are never
// dropped: nothing would emit them again. A full queue makes the plan
// writer wait.
func (c *Controller) tell(ctx context.Context, evs []reservation.Event, at time.Time) {
	if len(evs) == 0 {
		return
	}
	c.backlog.Add(1)
	select {
	case c.told <- queuedEvent{evs: evs, at: at}:
	case <-ctx.Done():
		c.backlog.Add(-1)
	}
}

// eventWriter writes queued events with the events client: a PATCH's
// events first, then waiting events.
func (c *Controller) eventWriter(ctx context.Context) {
	for {
		var q queuedEvent
		select {
		case q = <-c.told:
		default:
			select {
			case <-ctx.Done():
				return
			case q = <-c.told:
			case q = <-c.events:
			}
		}
		for _, ev := range q.evs {
			if c.createEvent(ctx, c.opts.EventsClient, ev, q.at) != nil {
				break // the rest of a pod's events must not overtake it
			}
		}
		c.backlog.Add(-1)
	}
}

// EventBacklog is the number of queued event writes (a PATCH's events, or
// one waiting event) not yet done.
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

// conflictRetries bounds how often one PATCH is made again after a
// conflict that changed nothing the decision read.
const conflictRetries = 3

// patchPod writes one admission or annotation PATCH and keeps the result
// as the pod's overlay until the cache shows it.
//
// A PATCH that replaces lists is guarded by the resourceVersion it was
// planned from, and an unschedulable pod's status is written by the
// scheduler while it waits, so at a burst a third of the admissions came
// back Conflict and waited for the next cycle. On a conflict the pod is
// read again: if its labels, annotations, spec and phase are what the
// decision read, only its status moved on, and the same PATCH is made
// against the new version. Otherwise the next cycle decides again.
func (c *Controller) patchPod(ctx context.Context, p reservation.PodPatch, admission bool, planned *basisIndex) error {
	kind := "update"
	if admission {
		kind = "admit"
	}
	var pod *corev1.Pod
	var err error
	for try := 0; ; try++ {
		var body []byte
		if body, err = p.MergePatch(); err != nil {
			return err
		}
		start := time.Now()
		pod, err = c.client.CoreV1().Pods(p.Pod.Namespace).Patch(ctx, p.Pod.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: fieldManager})
		c.m.write(kind, start, err)
		if err == nil || !apierrors.IsConflict(err) || try == conflictRetries || p.Pod.ResourceVersion == "" {
			break
		}
		rv, ok := c.statusOnlyChange(ctx, p.Pod, planned.get(p.Pod.UID))
		if !ok {
			break
		}
		p.Pod.ResourceVersion = rv
		c.m.write(kind+"-conflict-retried", time.Time{}, nil)
	}
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

// statusOnlyChange reads the pod again and reports its resourceVersion
// when everything a decision reads (labels, annotations, spec, phase) is
// as it was in was, the pod the plan was made from.
func (c *Controller) statusOnlyChange(ctx context.Context, ref reservation.PodRef, was *corev1.Pod) (string, bool) {
	if was == nil {
		return "", false
	}
	cur, err := c.client.CoreV1().Pods(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil || cur.UID != ref.UID || cur.DeletionTimestamp != nil || cur.Status.Phase != was.Status.Phase ||
		!maps.Equal(cur.Labels, was.Labels) || !maps.Equal(cur.Annotations, was.Annotations) ||
		!apiequality.Semantic.DeepEqual(cur.Spec, was.Spec) {
		return "", false
	}
	return cur.ResourceVersion, true
}

// basisIndex finds a plan's basis pods by UID; the index is built on the
// first lookup, as only a conflict needs it.
type basisIndex struct {
	pods  []*corev1.Pod
	once  sync.Once
	byUID map[types.UID]*corev1.Pod
}

func newBasisIndex(pods []*corev1.Pod) *basisIndex { return &basisIndex{pods: pods} }

func (b *basisIndex) get(uid types.UID) *corev1.Pod {
	b.once.Do(func() {
		b.byUID = make(map[types.UID]*corev1.Pod, len(b.pods))
		for _, p := range b.pods {
			b.byUID[p.UID] = p
		}
	})
	return b.byUID[uid]
}

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
	start := time.Now()
	err := c.client.CoreV1().Pods(ev.Pod.Namespace).Delete(ctx, ev.Pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		err = nil // gone already, or a different pod of that name now
	}
	c.m.write("evict", start, err)
	if err != nil {
		c.log.Warn("evicting pod failed", append(podFields(ev.Pod), zap.String("reason", ev.Event.Reason), zap.Error(err))...)
		return
	}
	c.log.Info("pod evicted", append(podFields(ev.Pod), zap.String("reason", ev.Event.Reason))...)
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
	start := time.Now()
	_, err := client.CoreV1().Events(ev.Pod.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = nil
	}
	c.m.write("event", start, err)
	c.m.events.WithLabelValues(ev.Reason).Inc()
	if err != nil {
		c.log.Warn("writing reservation event failed", append(podFields(ev.Pod), zap.String("reason", ev.Reason), zap.Error(err))...)
		return fmt.Errorf("writing event %s: %w", ev.Reason, err)
	}
	c.log.Info("reservation event", append(podFields(ev.Pod), zap.String("reason", ev.Reason), zap.String("type", ev.Type))...)
	return nil
}
