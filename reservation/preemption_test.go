package reservation

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func noHeadroom(c *Config) { c.HeadroomPercent = ptr(0) }

func evicted(plan Plan) []string {
	var names []string
	for _, ev := range plan.Evictions {
		names = append(names, ev.Pod.Name)
	}
	slices.Sort(names)
	return names
}

// Victims go best-effort first, then on-demand, then booking.
func TestPreemptionVictimOrder(t *testing.T) {
	for need, want := range map[int][]string{
		1: {"be"},
		2: {"be", "od"},
		3: {"be", "bk", "od"},
	} {
		t.Run(fmt.Sprint(need), func(t *testing.T) {
			e := newEngine(t, noHeadroom, func(c *Config) { c.BestEffort = true })
			w := newWorld(t, t0.Add(-3*time.Hour), newNode("gpu-m1", "medium", 3))
			w.addRes(booking(70, "carol", course, "medium", 1, w.now, w.now.Add(time.Hour)))
			w.addPod(newPod("carol", "bk").class("medium").gpus(1).course(course).obj())
			w.addPod(newPod("alice", "od").class("medium").gpus(1).course(course).obj())
			w.addPod(newPod("alice", "be").class("medium").gpus(1).course(course).ann(AnnRuntimeGuarantee, "none").obj())
			if plan := w.decide(e); len(plan.Admissions) != 3 {
				t.Fatalf("admitted %d pods, want 3", len(plan.Admissions))
			}
			w.step(time.Minute)
			w.book("bob", course, "medium", need, t0, t0.Add(time.Hour))
			w.step(3*time.Hour - 11*time.Minute) // 08:50 PDT: every pod is past its guarantee
			plan := w.decide(e)
			if got := evicted(plan); !slices.Equal(got, want) {
				t.Errorf("victims = %v, want %v", got, want)
			}
			for _, ev := range plan.Evictions {
				if ev.Event.Reason != Preempted || !strings.Contains(ev.Event.Message, "starting 2026-09-23 09:00:00 PDT") {
					t.Errorf("stop event %s: %s", ev.Event.Reason, ev.Event.Message)
				}
			}
		})
	}
}

// A shortfall only guaranteed pods could cover is reported, never acted on.
func TestPreemptionNeverInsideGuarantee(t *testing.T) {
	e := newEngine(t, noHeadroom)
	w := newWorld(t, t0, newNode("gpu-m1", "medium", 2))
	w.addPod(newPod("alice", "p").class("medium").gpus(2).course(course).obj())
	w.decide(e) // guaranteed until 10:10 PDT
	w.step(time.Minute)
	w.book("bob", course, "medium", 2, t0.Add(10*time.Minute), t0.Add(2*time.Hour))
	w.step(4 * time.Minute)
	plan := w.decide(e)
	if len(plan.Evictions) != 0 {
		t.Fatalf("preempted %v inside its guarantee", evicted(plan))
	}
	if len(plan.Unmet) != 1 || plan.Unmet[0].GPUs != 2 || plan.Unmet[0].Class != "medium" {
		t.Errorf("unmet = %+v, want 2 GPUs of medium", plan.Unmet)
	}
	// Bob's pod, once his booking opens, waits for the class to free up.
	w.step(6 * time.Minute)
	w.addPod(newPod("bob", "q").class("medium").gpus(2).course(course).obj())
	plan = w.decide(e)
	if got := reasons(eventsFor(plan.Events, "q")); got != WaitingForReservation || !strings.Contains(plan.Events[0].Message, "not free yet") {
		t.Errorf("bob's pod: %q %v", got, plan.Events)
	}
	if len(plan.Evictions) != 0 || len(plan.Admissions) != 0 {
		t.Errorf("evicted %v, admitted %d", evicted(plan), len(plan.Admissions))
	}
}

// Victims within a kind are random but follow the seed.
func TestPreemptionSeeded(t *testing.T) {
	victims := func(seed uint64) string {
		e := newEngine(t, noHeadroom, func(c *Config) { c.Seed = seed })
		w := newWorld(t, t0.Add(-2*time.Hour), newNode("gpu-m1", "medium", 10))
		for i := range 10 {
			w.addPod(newPod(fmt.Sprintf("user%d", i), fmt.Sprintf("p%d", i)).class("medium").gpus(1).obj())
		}
		w.decide(e)
		w.step(time.Minute)
		w.book("bob", course, "medium", 3, t0, t0.Add(time.Hour))
		w.step(109 * time.Minute)
		return strings.Join(evicted(w.decide(e)), ",")
	}
	first := victims(7)
	if n := strings.Count(first, ",") + 1; n != 3 {
		t.Fatalf("victims %q, want 3", first)
	}
	if again := victims(7); again != first {
		t.Errorf("same seed chose %q then %q", first, again)
	}
	distinct := map[string]bool{}
	for seed := range uint64(20) {
		distinct[victims(seed)] = true
	}
	if len(distinct) < 3 {
		t.Errorf("20 seeds chose only %d victim sets", len(distinct))
	}
}

// Headroom victims are warned first and preempted only after the notice.
func TestPreemptionHeadroom(t *testing.T) {
	e := newEngine(t) // 15 % of 4 GPUs: 1 GPU kept free
	w := newWorld(t, t0, newNode("gpu-m1", "medium", 4))
	w.addPod(newPod("alice", "a").class("medium").gpus(2).course(course).obj())
	w.addPod(newPod("bob", "b").class("medium").gpus(2).course(course).obj())
	w.decide(e)
	w.step(time.Minute)
	if plan := w.decide(e); len(plan.Updates) != 0 {
		t.Fatalf("pods inside their guarantee were warned: %+v", plan.Updates)
	}

	w.step(70 * time.Minute) // both past 10:10 PDT
	plan := w.decide(e)
	if len(plan.Evictions) != 0 {
		t.Fatalf("preempted %v without notice", evicted(plan))
	}
	warnAt := w.pod("alice", "a").Annotations[prefix+AnnWarningAt]
	if warnAt != formatUTC(w.now.Add(15*time.Minute)) {
		t.Fatalf("warning at %q, want now + 15 min", warnAt)
	}
	if msg := w.pod("bob", "b").Annotations[prefix+AnnWarningMessage]; !strings.Contains(msg, "keep 15% of gpu-class medium free") {
		t.Errorf("warning message %q", msg)
	}

	w.step(10 * time.Minute)
	plan = w.decide(e)
	if len(plan.Evictions) != 0 || w.pod("alice", "a").Annotations[prefix+AnnWarningAt] != warnAt {
		t.Fatalf("within the notice: evicted %v, warning now %q", evicted(plan), w.pod("alice", "a").Annotations[prefix+AnnWarningAt])
	}

	w.step(5 * time.Minute)
	plan = w.decide(e)
	if len(plan.Evictions) != 1 {
		t.Fatalf("after the notice evicted %v, want one pod", evicted(plan))
	}
	if msg := plan.Evictions[0].Event.Message; !strings.Contains(msg, "maintain 15% free on-demand capacity headroom for gpu class medium") {
		t.Errorf("stop event: %s", msg)
	}
	survivor := "a"
	if plan.Evictions[0].Pod.Name == "a" {
		survivor = "b"
	}
	for _, k := range []string{AnnWarningAt, AnnWarningRisk, AnnWarningMessage} {
		if v, ok := w.podByName(survivor).Annotations[prefix+k]; ok {
			t.Errorf("risk cleared but %s=%q remains", k, v)
		}
	}
}

// A booking made at least 30 minutes ahead warns its victim at least 15
// minutes before preempting it.
func TestPreemptionWarningPrecedesKill(t *testing.T) {
	e := newEngine(t, noHeadroom)
	w := newWorld(t, t0.Add(-3*time.Hour), newNode("gpu-m1", "medium", 1))
	w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
	w.decide(e)
	w.step(2 * time.Hour) // 08:00 PDT, past the guarantee
	w.book("bob", course, "medium", 1, t0, t0.Add(time.Hour))
	var warned, killed time.Time
	for w.now.Before(t0) && killed.IsZero() {
		plan := w.decide(e)
		if p := w.pod("alice", "p"); warned.IsZero() && p != nil && p.Annotations[prefix+AnnWarningAt] != "" {
			warned = w.now
		}
		if len(plan.Evictions) > 0 {
			killed = w.now
		}
		w.step(time.Minute)
	}
	if warned.IsZero() || killed.IsZero() {
		t.Fatalf("warned %v, killed %v", warned, killed)
	}
	if gap := killed.Sub(warned); gap < 15*time.Minute {
		t.Errorf("warned only %v before the kill", gap)
	}
}

func (w *world) podByName(name string) *corev1.Pod {
	for _, p := range w.pods {
		if p.Name == name {
			return p
		}
	}
	return nil
}
