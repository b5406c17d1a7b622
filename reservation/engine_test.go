package reservation

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func admittedRef(plan Plan, pod string) int64 {
	for _, pp := range plan.Admissions {
		if pp.Pod.Name == pod {
			return pp.Reservation
		}
	}
	return 0
}

func TestRoutingClaimOrder(t *testing.T) {
	tests := map[string]struct {
		bookings []Reservation
		want     int64
	}{
		"soonest start": {
			bookings: []Reservation{
				booking(10, "alice", course, "medium", 1, t0, t0.Add(2*time.Hour)),
				booking(11, "alice", course, "medium", 2, t0.Add(-time.Hour), t0.Add(2*time.Hour)),
			},
			want: 11,
		},
		"then most room": {
			bookings: []Reservation{
				booking(10, "alice", course, "medium", 1, t0, t0.Add(2*time.Hour)),
				booking(11, "alice", course, "medium", 2, t0, t0.Add(2*time.Hour)),
			},
			want: 11,
		},
		"then lowest ID": {
			bookings: []Reservation{
				booking(12, "alice", course, "medium", 2, t0, t0.Add(2*time.Hour)),
				booking(11, "alice", course, "medium", 2, t0, t0.Add(2*time.Hour)),
			},
			want: 11,
		},
		"only bookings with room": {
			bookings: []Reservation{
				booking(10, "alice", course, "medium", 1, t0.Add(-time.Hour), t0.Add(2*time.Hour)),
				booking(11, "alice", course, "medium", 2, t0, t0.Add(2*time.Hour)),
			},
			want: 11, // the pod asks for 2
		},
		"not another workspace's": {
			bookings: []Reservation{
				booking(10, "alice", noOD, "medium", 2, t0, t0.Add(2*time.Hour)),
				booking(11, "alice", course, "medium", 2, t0, t0.Add(2*time.Hour)),
			},
			want: 11,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, t0.Add(time.Minute), mediumNodes()...)
			w.addRes(tc.bookings...)
			w.addPod(newPod("alice", "p").class("medium").gpus(2).course(course).obj())
			if got := admittedRef(w.decide(newEngine(t)), "p"); got != tc.want {
				t.Errorf("admitted under #%d, want #%d", got, tc.want)
			}
		})
	}
}

// A pod without a dsmlp/course label is charged to ORG_ON_DEMAND and never
// claims a course booking.
func TestRoutingOrgOnDemand(t *testing.T) {
	w := newWorld(t, t0.Add(time.Minute), mediumNodes()...)
	w.addRes(booking(10, "alice", course, "medium", 1, t0, t0.Add(2*time.Hour)))
	w.addPod(newPod("alice", "p").class("medium").gpus(1).obj())
	plan := w.decide(newEngine(t))
	if len(plan.Mints) != 1 || plan.Mints[0].Reservation.Workspace != OrgOnDemand || admittedRef(plan, "p") == 10 {
		t.Fatalf("mints %+v, admitted under #%d", plan.Mints, admittedRef(plan, "p"))
	}
	if got := plan.ChargesByWorkspace()[OrgOnDemand]; math.Abs(got-70.0/60) > 1e-9 {
		t.Errorf("charged %v GPU-h to %s, want 1h10m", got, OrgOnDemand)
	}
}

// On-demand candidates are served in creation order; reserved-path pods
// go first.
func TestRoutingOrder(t *testing.T) {
	w := newWorld(t, t0, newNode("gpu-m1", "medium", 2))
	w.addPod(newPod("alice", "newer").class("medium").gpus(1).course(course).created(t0.Add(-time.Minute)).obj())
	w.addPod(newPod("bob", "older").class("medium").gpus(1).course(course).created(t0.Add(-time.Hour)).obj())
	w.addRes(booking(10, "carol", course, "medium", 1, t0, t0.Add(time.Hour)))
	w.addPod(newPod("carol", "booked").class("medium").gpus(1).course(course).created(t0).obj())
	plan := w.decide(newEngine(t))
	if admittedRef(plan, "booked") != 10 || admittedRef(plan, "older") == 0 || admittedRef(plan, "newer") != 0 {
		t.Errorf("admitted booked=#%d older=#%d newer=#%d; want the booking and the older pod",
			admittedRef(plan, "booked"), admittedRef(plan, "older"), admittedRef(plan, "newer"))
	}
}

// A lease is granted only if its GPUs stay free through bookings starting
// during it: a lease never preempts, so it must not take a booking's GPUs.
func TestRoutingLeaseRespectsLaterBookings(t *testing.T) {
	w := newWorld(t, t0, newNode("gpu-m1", "medium", 2))
	w.addRes(booking(10, "bob", course, "medium", 2, t0.Add(40*time.Minute), t0.Add(2*time.Hour)))
	w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
	plan := w.decide(newEngine(t))
	evs := eventsFor(plan.Events, "p")
	if len(plan.Mints) != 0 || len(evs) != 1 || !strings.Contains(evs[0].Message, "reservations starting 2026-09-23 09:40:00 PDT hold the rest") {
		t.Fatalf("mints %d, events %v", len(plan.Mints), evs)
	}
	// A shorter lease fits before the booking.
	w2 := newWorld(t, t0, newNode("gpu-m1", "medium", 2))
	w2.addRes(booking(10, "bob", course, "medium", 2, t0.Add(40*time.Minute), t0.Add(2*time.Hour)))
	w2.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).ann(AnnMinimumRuntime, "1200").obj())
	if plan := w2.decide(newEngine(t)); len(plan.Mints) != 1 {
		t.Errorf("a 30-minute lease before the booking was not granted: %v", plan.Events)
	}
}

func TestRoutingFullFallsBackToLease(t *testing.T) {
	e := newEngine(t)
	w := newWorld(t, t0, mediumNodes()...)
	w.addRes(booking(41, "alice", course, "medium", 1, t0, t0.Add(8*time.Hour)))
	w.addPod(newPod("alice", "first").class("medium").gpus(1).course(course).obj())
	w.decide(e)
	w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
	for range 9 {
		w.step(time.Minute)
		if plan := w.decide(e); admittedRef(plan, "p") != 0 {
			t.Fatalf("fell back at %v, before 10 minutes", w.now)
		}
	}
	w.step(time.Minute)
	plan := w.decide(e)
	if ref := admittedRef(plan, "p"); ref == 0 || ref == 41 || len(plan.Mints) != 1 {
		t.Errorf("at 10 minutes admitted under #%d with %d mints, want a new lease", ref, len(plan.Mints))
	}
}

func TestRoutingWaitsForScheduler(t *testing.T) {
	for name, cond := range map[string][]corev1.PodCondition{
		"no verdict yet": nil,
		"memory shortage": {{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/3 nodes are available: 1 Insufficient memory, 2 node(s) had untolerated taint(s)."}},
	} {
		t.Run(name, func(t *testing.T) {
			p := newPod("alice", "p").class("medium").gpus(1).course(course).obj()
			p.Status.Conditions = cond
			w := newWorld(t, t0, mediumNodes()...)
			w.addPod(p)
			if plan := w.decide(newEngine(t)); !plan.Empty() {
				t.Errorf("plan %+v, want nothing: no lease, no event", plan)
			}
		})
	}
}

// A pod held by the engine's scheduling gate gets no scheduler verdict, so
// the lease path does not wait for one.
func TestRoutingGatedPodNeedsNoVerdict(t *testing.T) {
	gate := "dsmlp.ucsd.edu/gpu-reservation"
	p := newPod("alice", "p").class("medium").gpus(1).course(course).obj()
	p.Status.Conditions = nil
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: gate}}
	w := newWorld(t, t0, mediumNodes()...)
	w.addPod(p)
	plan := w.decide(newEngine(t, func(c *Config) { c.SchedulingGate = gate }))
	if len(plan.Mints) != 1 || len(plan.Admissions) != 1 || plan.Admissions[0].SchedulingGates == nil {
		t.Fatalf("mints %d, admissions %+v", len(plan.Mints), plan.Admissions)
	}
	if len(w.pod("alice", "p").Spec.SchedulingGates) != 0 {
		t.Errorf("gate still on the pod: %v", w.pod("alice", "p").Spec.SchedulingGates)
	}
}

func TestRoutingPauses(t *testing.T) {
	t.Run("overbooked", func(t *testing.T) {
		w := newWorld(t, t0, newNode("gpu-m1", "medium", 2))
		w.addRes(booking(10, "bob", course, "medium", 2, t0, t0.Add(time.Hour)),
			booking(11, "carol", course, "medium", 1, t0, t0.Add(time.Hour)))
		w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
		plan := w.decide(newEngine(t))
		if evs := eventsFor(plan.Events, "p"); len(evs) != 1 || evs[0].Reason != OnDemandAdmissionPaused ||
			!strings.Contains(evs[0].Message, "booked for now than are online") {
			t.Errorf("events %v", evs)
		}
	})
	t.Run("reserved pod stuck", func(t *testing.T) {
		e := newEngine(t)
		// The class's nodes were cordoned after bob's pod was admitted, so it
		// was never placed.
		w := newWorld(t, t0, mediumNodes()...)
		w.addRes(booking(10, "bob", course, "medium", 2, t0, t0.Add(4*time.Hour)))
		w.addPod(newPod("bob", "q").class("medium").gpus(2).course(course).obj())
		w.decide(e)
		w.nodes[0].Spec.Unschedulable, w.nodes[1].Spec.Unschedulable = true, true
		w.step(6 * time.Minute)
		w.nodes[0].Spec.Unschedulable, w.nodes[1].Spec.Unschedulable = false, false
		w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
		plan := w.decide(e)
		if evs := eventsFor(plan.Events, "p"); len(evs) != 1 || evs[0].Reason != OnDemandAdmissionPaused ||
			!strings.Contains(evs[0].Message, "still waiting to be placed") {
			t.Errorf("events %v", evs)
		}
	})
}

// The scheduler's toleration bypass: a pod that already tolerates the taint
// without a booking-reference is not routed or charged.
func TestRoutingIgnoresBypass(t *testing.T) {
	p := newPod("alice", "p").class("medium").gpus(1).course(course).obj()
	p.Spec.Tolerations = []corev1.Toleration{{Key: "gpu-class-reservation", Operator: corev1.TolerationOpExists}}
	w := newWorld(t, t0, mediumNodes()...)
	w.addPod(p)
	if plan := w.decide(newEngine(t)); !plan.Empty() {
		t.Errorf("plan %+v for a bypassing pod", plan)
	}
}

func TestLeaseEndsWithPod(t *testing.T) {
	e := newEngine(t)
	w := newWorld(t, t0, mediumNodes()...)
	w.addPod(newPod("alice", "p").class("medium").gpus(2).course(course).obj())
	w.decide(e)
	w.step(20 * time.Minute)
	p := w.pod("alice", "p").DeepCopy()
	p.DeletionTimestamp = ptr(metav1.NewTime(w.now))
	w.replace(p)
	plan := w.decide(e)
	if len(plan.Cancels) != 1 || plan.Cancels[0].Reason != CancelPodTerminated {
		t.Fatalf("cancels %+v", plan.Cancels)
	}
	// Charged 2 GPUs × 20 minutes in all: the unused part is refunded.
	if got := w.charges[course]; math.Abs(got-2*20.0/60) > 1e-9 {
		t.Errorf("charged %v GPU-h, want %v", got, 2*20.0/60)
	}
}

// A lease is idempotent by pod UID: a plan that was never applied, or an
// admission that failed, is retried under the same lease, also across an
// engine restart.
func TestLeaseIdempotent(t *testing.T) {
	e := newEngine(t)
	w := newWorld(t, t0, mediumNodes()...)
	w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
	first := e.Decide(w.snapshot()) // not applied
	second := e.Decide(w.snapshot())
	if len(first.Mints) != 1 || len(second.Mints) != 1 || first.Mints[0].Reservation != second.Mints[0].Reservation {
		t.Fatalf("mints %+v then %+v, want the same lease twice", first.Mints, second.Mints)
	}
	// The lease was created; the admission PATCH was lost.
	w.apply(Plan{Mints: second.Mints})
	for name, eng := range map[string]*Engine{"same engine": e, "restarted": newEngine(t)} {
		plan := eng.Decide(w.snapshot())
		if len(plan.Mints) != 0 || admittedRef(plan, "p") != second.Mints[0].Reservation.ID {
			t.Errorf("%s: mints %+v, admitted under #%d; want the existing lease #%d", name, plan.Mints,
				admittedRef(plan, "p"), second.Mints[0].Reservation.ID)
		}
	}
}

func TestNoShow(t *testing.T) {
	open := func(t *testing.T) (*Engine, *world) {
		e := newEngine(t)
		w := newWorld(t, t0.Add(-5*time.Minute), mediumNodes()...)
		w.addRes(booking(10, "alice", course, "medium", 1, t0, t0.Add(4*time.Hour)))
		w.decide(e) // the engine runs before the booking opens
		return e, w
	}
	noShowAt := func(t *testing.T, e *Engine, w *world, until time.Duration) time.Time {
		for w.now.Before(t0.Add(until)) {
			w.step(time.Minute)
			for _, cn := range w.decide(e).Cancels {
				if cn.ReservationID == 10 && cn.Reason == CancelNoShow {
					return w.now
				}
			}
		}
		return time.Time{}
	}
	t.Run("unclaimed for 15 minutes", func(t *testing.T) {
		e, w := open(t)
		if at := noShowAt(t, e, w, time.Hour); !at.Equal(t0.Add(15 * time.Minute)) {
			t.Errorf("cancelled at %v, want 15 minutes after the start", at)
		}
	})
	t.Run("a waiting pod holds it", func(t *testing.T) {
		e, w := open(t)
		w.addPod(newPod("alice", "p").class("medium").gpus(2).course(course).obj()) // too big: waits, never admitted
		// Too big pods do not hold a booking; a fitting one does.
		if at := noShowAt(t, e, w, 20*time.Minute); at.IsZero() {
			t.Errorf("a pod too big for the booking kept it from no-show")
		}
		e, w = open(t)
		p := newPod("alice", "q").class("medium").gpus(1).course(course).obj()
		p.Status.Conditions = nil
		w.nodes = []*corev1.Node{newNode("gpu-m1", "medium", 0)} // the class is full: the pod waits
		w.addPod(p)
		if at := noShowAt(t, e, w, time.Hour); !at.IsZero() {
			t.Errorf("cancelled at %v though a pod waits for it", at)
		}
	})
	t.Run("grace after the last pod", func(t *testing.T) {
		e, w := open(t)
		w.step(6 * time.Minute) // 09:01 PDT
		w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
		if ref := admittedRef(w.decide(e), "p"); ref != 10 {
			t.Fatalf("admitted under #%d", ref)
		}
		w.step(10 * time.Minute)
		w.decide(e) // the pod still runs at 09:11 PDT
		p := w.pod("alice", "p").DeepCopy()
		p.Status.Phase = corev1.PodSucceeded
		w.replace(p)
		if at := noShowAt(t, e, w, 2*time.Hour); !at.Equal(t0.Add(11*time.Minute + 30*time.Minute)) {
			t.Errorf("cancelled at %v, want 30 minutes after the last cycle the pod ran", at)
		}
	})
	t.Run("grace after a restart", func(t *testing.T) {
		_, w := open(t)
		w.step(20 * time.Minute)
		e := newEngine(t) // restarted: it may have missed pods
		if at := noShowAt(t, e, w, 2*time.Hour); !at.Equal(t0.Add(15*time.Minute + 31*time.Minute)) {
			t.Errorf("cancelled at %v, want 30 minutes after the restart", at)
		}
	})
}

// Cancelling a booking moves its pods to another open booking of the owner
// when one has room; reassigning it lets the new owner claim it.
func TestCancelAndReassign(t *testing.T) {
	t.Run("relinked to another booking", func(t *testing.T) {
		e := newEngine(t)
		w := newWorld(t, t0, mediumNodes()...)
		w.addRes(booking(10, "alice", course, "medium", 1, t0, t0.Add(8*time.Hour)),
			booking(11, "alice", course, "medium", 1, t0, t0.Add(2*time.Hour)))
		w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
		if ref := admittedRef(w.decide(e), "p"); ref != 10 {
			t.Fatalf("admitted under #%d", ref)
		}
		r := w.reservation(10)
		r.Status, r.CancelReason = StatusCancelled, CancelUser
		w.step(time.Minute)
		plan := w.decide(e)
		if len(plan.Evictions) != 0 {
			t.Fatalf("evicted %v", evicted(plan))
		}
		if got := reasons(eventsFor(allEvents(plan), "p")); got != RuntimeGuaranteed+","+ReservationRelinked {
			t.Errorf("events %s", got)
		}
		if ref := w.pod("alice", "p").Annotations[prefix+AnnBookingReference]; ref != "res-11" {
			t.Errorf("booking-reference %s", ref)
		}
	})
	t.Run("new owner claims it", func(t *testing.T) {
		e := newEngine(t)
		w := newWorld(t, t0, mediumNodes()...)
		w.addRes(booking(10, "alice", course, "medium", 1, t0, t0.Add(8*time.Hour)))
		w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
		w.decide(e)
		w.reservation(10).Owner = "bob"
		w.step(time.Minute)
		w.addPod(newPod("bob", "q").class("medium").gpus(1).course(course).obj())
		plan := w.decide(e)
		if evicted(plan)[0] != "p" || admittedRef(plan, "q") != 10 {
			t.Errorf("evicted %v, bob admitted under #%d", evicted(plan), admittedRef(plan, "q"))
		}
	})
}

// A pod whose booking ends moves into the abutting booking of its owner
// that continues its guarantee, so the next booking is not double-booked.
func TestChainMovesPod(t *testing.T) {
	e := newEngine(t)
	w := newWorld(t, t0, mediumNodes()...)
	w.addRes(booking(10, "alice", course, "medium", 1, t0, t0.Add(time.Hour)),
		booking(11, "alice", course, "medium", 1, t0.Add(time.Hour), t0.Add(3*time.Hour)))
	w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
	w.decide(e)
	w.step(time.Hour)
	w.addPod(newPod("alice", "q").class("medium").gpus(1).course(course).obj())
	plan := w.decide(e)
	if got := reasons(eventsFor(allEvents(plan), "p")); got != RuntimeGuaranteed+","+ReservationRelinked {
		t.Errorf("p: %s", got)
	}
	if admittedRef(plan, "q") == 11 {
		t.Error("q was admitted into the booking p's guarantee continues into")
	}
	if st := w.pod("alice", "p").Annotations[prefix+AnnGuaranteeStatus]; st != StatusGuaranteed {
		t.Errorf("p is %s", st)
	}
}

// Two engines given the same snapshot plan the same writes: a restarted
// engine repeats, rather than contradicts, what its predecessor planned.
func TestDecideDeterministic(t *testing.T) {
	snap := routingSnapshot(300)
	a := newEngine(t, func(c *Config) { *c = benchConfig() }).Decide(snap)
	b := newEngine(t, func(c *Config) { *c = benchConfig() }).Decide(snap)
	if !reflect.DeepEqual(a, b) {
		t.Error("two engines planned differently for one snapshot")
	}
	if len(a.Admissions) == 0 || len(a.Events) == 0 || len(a.Mints) == 0 {
		t.Errorf("plan too thin to show anything: %d admissions, %d events, %d mints", len(a.Admissions), len(a.Events), len(a.Mints))
	}
}
