package reservation

import (
	"strings"
	"testing"
	"time"
)

// An administrator's pause holds on-demand pods with the reason, and the
// class view counts capacity, occupancy, the queue and risk ahead.
func TestAdminPauseAndClassStatus(t *testing.T) {
	e := newEngine(t)
	w := newWorld(t, t0, mediumNodes()...)
	w.addRes(booking(10, "bob", course, "medium", 2, t0, t0.Add(time.Hour)),
		booking(11, "carol", course, "medium", 3, t0.Add(2*time.Hour), t0.Add(3*time.Hour)))
	w.addPod(newPod("bob", "b").class("medium").gpus(2).course(course).obj())
	w.addPod(newPod("alice", "a").class("medium").gpus(1).course(course).obj())

	snap := w.snapshot()
	snap.Paused = map[string]string{"medium": "driver update"}
	plan := e.Decide(snap)
	if evs := eventsFor(plan.Events, "a"); len(evs) != 1 || evs[0].Reason != OnDemandAdmissionPaused ||
		!strings.Contains(evs[0].Message, "an administrator paused it (driver update)") {
		t.Errorf("paused class events %v", evs)
	}
	if admittedRef(plan, "b") != 10 {
		t.Error("a pause must not hold booking pods")
	}
	var st *ClassStatus
	for i := range plan.Classes {
		if plan.Classes[i].Class == "medium" {
			st = &plan.Classes[i]
		}
	}
	if st == nil {
		t.Fatal("no status for medium")
	}
	capacity := 0
	for _, n := range w.nodes {
		if n.Labels["gpu-type"] == "medium" {
			g := n.Status.Allocatable[GPUResource]
			capacity += int(g.Value())
		}
	}
	if st.Capacity != capacity || st.AdmittedPods != 1 || st.AdmittedGPUs != 2 || st.WaitingPods != 1 || st.WaitingGPUs != 1 ||
		st.Booked != 2 || st.Paused == "" || st.Used != 2 || st.Free != capacity-2 {
		t.Errorf("status %+v", st)
	}
	if len(st.Risk) != 1 || !st.Risk[0].Boundary.Equal(t0.Add(2*time.Hour)) || st.Risk[0].Demand != 3 {
		t.Errorf("risk %+v, want carol's boundary with demand 3", st.Risk)
	}
	// bob's pod is past its guarantee at carol's start: it is at risk.
	if st.Risk[0].AtRiskPods != 1 || st.Risk[0].AtRiskGPUs != 2 {
		t.Errorf("at risk %+v", st.Risk[0])
	}

	// Lifting the pause lets the lease path run.
	w.apply(plan)
	plan = w.decide(e)
	if admittedRef(plan, "a") == 0 {
		t.Errorf("after resume the pod should get a lease; events %v", eventsFor(plan.Events, "a"))
	}
}

func TestHoldOf(t *testing.T) {
	for reason, want := range map[string]Hold{
		WaitingForReservation: HoldClears, ReservationFull: HoldClears, WaitingForNode: HoldClears, OnDemandAdmissionPaused: HoldClears,
		UnknownGpuClass: HoldNeedsFix, NoGpuRequest: HoldNeedsFix, NoMatchingNode: HoldNeedsFix, OnDemandLeaseRejected: HoldNeedsFix,
		ReservationTooSmall: HoldNeedsFix, NoReservation: HoldNeedsFix,
		RuntimeGuaranteed: HoldNone, Preempted: HoldNone, AnnotationIgnored: HoldNone, "FailedScheduling": HoldNone,
	} {
		if got := HoldOf(reason, "x"); got != want {
			t.Errorf("HoldOf(%s) = %d, want %d", reason, got, want)
		}
	}
	if HoldOf(OnDemandLeaseDenied, "... The pod stays Pending; the controller will keep retrying.") != HoldClears {
		t.Error("a retried denial clears")
	}
	if HoldOf(OnDemandLeaseDenied, "... The pod stays Pending; waiting will not change this: ...") != HoldNeedsFix {
		t.Error("a structural denial needs a fix")
	}
}
