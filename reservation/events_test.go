package reservation

import (
	"hash/maphash"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func mediumNodes() []*corev1.Node {
	return []*corev1.Node{newNode("gpu-m1", "medium", 2), newNode("gpu-m2", "medium", 2), newNode("gpu-s1", "small", 4)}
}

// Each case provokes one event for pod "p" and checks its reason, type and
// the facts its message must state.
func TestEventsEachReason(t *testing.T) {
	tests := map[string]struct {
		reason string
		typ    string
		setup  func(t *testing.T) Plan
		facts  []string
	}{
		"booking opens in 20 minutes": {
			reason: WaitingForReservation, typ: corev1.EventTypeNormal,
			setup: func(t *testing.T) Plan {
				w := newWorld(t, t0.Add(-20*time.Minute), mediumNodes()...)
				w.addRes(booking(41, "alice", course, "medium", 1, t0, t0.Add(8*time.Hour)))
				w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
				return w.decide(newEngine(t))
			},
			facts: []string{"#41", "1 x medium, 2026-09-23 09:00:00 PDT to 2026-09-23 17:00:00 PDT", "to open"},
		},
		"booking held by another pod of the owner": {
			reason: ReservationFull, typ: corev1.EventTypeWarning,
			setup: func(t *testing.T) Plan {
				e := newEngine(t)
				w := newWorld(t, t0.Add(5*time.Minute), mediumNodes()...)
				w.addRes(booking(41, "alice", course, "medium", 1, t0, t0.Add(8*time.Hour)))
				w.addPod(newPod("alice", "train-1").class("medium").gpus(1).course(course).obj())
				w.decide(e)
				w.step(time.Minute)
				w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
				return w.decide(e)
			},
			// Fallback: created 09:06 + 10 min.
			facts: []string{"#41", "train-1", "kubectl delete pod", "1 GPU(s) are free", "at 2026-09-23 09:16:00 PDT", "on-demand lease"},
		},
		"booking smaller than the request": {
			reason: ReservationTooSmall, typ: corev1.EventTypeWarning,
			setup: func(t *testing.T) Plan {
				w := newWorld(t, t0.Add(time.Minute), mediumNodes()...)
				w.addRes(booking(42, "alice", noOD, "medium", 1, t0, t0.Add(8*time.Hour)))
				w.addPod(newPod("alice", "p").class("medium").gpus(2).course(noOD).obj())
				return w.decide(newEngine(t))
			},
			facts: []string{"requests 2 GPUs", "#42", "holds only 1", "workspace NOOD does not allow on-demand use"},
		},
		"lease denied for capacity": {
			reason: OnDemandLeaseDenied, typ: corev1.EventTypeWarning,
			setup: func(t *testing.T) Plan {
				w := newWorld(t, t0.Add(time.Minute), newNode("gpu-m1", "medium", 2))
				// Bob's open booking holds both GPUs though he has no pod yet.
				w.addRes(booking(43, "bob", course, "medium", 2, t0, t0.Add(8*time.Hour)))
				w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
				return w.decide(newEngine(t))
			},
			facts: []string{"lease for 1 x medium was denied", "Only 0 GPU(s) of class medium are free", "the controller will keep retrying."},
		},
		"lease denied over the workspace ceiling": {
			reason: OnDemandLeaseDenied, typ: corev1.EventTypeWarning,
			setup: func(t *testing.T) Plan {
				w := newWorld(t, t0, newNode("gpu-m1", "medium", 8))
				w.addPod(newPod("alice", "p").class("medium").gpus(5).course(course).obj())
				return w.decide(newEngine(t))
			},
			facts: []string{"limit of 4 GPU(s) of class medium", "waiting will not change this", "datahub@ucsd.edu"},
		},
		"lease denied before the workspace opens": {
			reason: OnDemandLeaseDenied, typ: corev1.EventTypeWarning,
			setup: func(t *testing.T) Plan {
				e := newEngine(t, func(c *Config) {
					c.Workspaces[0].ActiveFrom = &metav1.Time{Time: t0.Add(48 * time.Hour)}
				})
				w := newWorld(t, t0, mediumNodes()...)
				w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
				return w.decide(e)
			},
			facts: []string{"is not active yet", "expects this to clear by 2026-09-25 09:00:00 PDT"},
		},
		"unknown workspace": {
			reason: OnDemandLeaseRejected, typ: corev1.EventTypeWarning,
			setup: func(t *testing.T) Plan {
				w := newWorld(t, t0, mediumNodes()...)
				w.addRes(booking(44, "alice", course, "medium", 1, t0.Add(24*time.Hour), t0.Add(26*time.Hour)))
				w.addPod(newPod("alice", "p").class("medium").gpus(1).course("UNKNOWN101").obj())
				return w.decide(newEngine(t))
			},
			facts: []string{"'UNKNOWN101' is not known", "user alice", "from its dsmlp/course label", "#44", "under workspace " + course, "Waiting will not fix this"},
		},
		"class has no schedulable node": {
			reason: OnDemandAdmissionPaused, typ: corev1.EventTypeWarning,
			setup: func(t *testing.T) Plan {
				small := newNode("gpu-s1", "small", 4)
				small.Spec.Unschedulable = true
				w := newWorld(t, t0, small, newNode("gpu-m1", "medium", 2))
				w.addPod(newPod("alice", "p").class("small").gpus(1).course(course).obj())
				return w.decide(newEngine(t))
			},
			facts: []string{"gpu-class small is paused", "no node of this class is schedulable", "contact support: datahub@ucsd.edu"},
		},
		"misspelled class": {
			reason: UnknownGpuClass, typ: corev1.EventTypeWarning,
			setup: func(t *testing.T) Plan {
				w := newWorld(t, t0, mediumNodes()...)
				w.addPod(newPod("alice", "p").class("Medium").gpus(1).course(course).obj())
				return w.decide(newEngine(t))
			},
			facts: []string{"label is Medium", "Known classes: medium, small", "recreate the pod"},
		},
		"nothing matches and on demand is off": {
			reason: NoReservation, typ: corev1.EventTypeWarning,
			setup: func(t *testing.T) Plan {
				e := newEngine(t, func(c *Config) { c.OnDemand = ptr(false) })
				w := newWorld(t, t0, mediumNodes()...)
				w.addRes(booking(45, "alice", course, "small", 1, t0.Add(24*time.Hour), t0.Add(26*time.Hour)))
				w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
				return w.decide(e)
			},
			facts: []string{"user alice, gpu-class medium, workspace " + course, "on-demand GPU admission is turned off", "#45", "gpu-class label to small"},
		},
		"class label without a GPU request": {
			reason: NoGpuRequest, typ: corev1.EventTypeWarning,
			setup: func(t *testing.T) Plan {
				w := newWorld(t, t0, mediumNodes()...)
				w.addPod(newPod("alice", "p").class("medium").course(course).obj())
				return w.decide(newEngine(t))
			},
			facts: []string{"gpu-class label medium", "requests no nvidia.com/gpu", "launch.sh -g 1"},
		},
		"best-effort asked for but disabled": {
			reason: AnnotationIgnored, typ: corev1.EventTypeWarning,
			setup: func(t *testing.T) Plan {
				w := newWorld(t, t0, mediumNodes()...)
				w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).ann(AnnRuntimeGuarantee, "none").obj())
				return w.decide(newEngine(t))
			},
			facts: []string{"galends/runtime-guarantee=none", "best-effort admission is not enabled", "ordinary on-demand lease and charged"},
		},
		"node selector names a node of another class": {
			reason: NoMatchingNode, typ: corev1.EventTypeWarning,
			setup: func(t *testing.T) Plan {
				w := newWorld(t, t0, mediumNodes()...)
				w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).selector("kubernetes.io/hostname", "gpu-s1").obj())
				return w.decide(newEngine(t))
			},
			facts: []string{`"kubernetes.io/hostname=gpu-s1"`, "none of the 2 schedulable node(s) of GPU class medium", "does match nodes of GPU class small"},
		},
		"the one allowed node is full": {
			reason: WaitingForNode, typ: corev1.EventTypeNormal,
			setup: func(t *testing.T) Plan {
				e := newEngine(t)
				w := newWorld(t, t0, mediumNodes()...)
				w.addPod(newPod("bob", "big").class("medium").gpus(2).course(course).obj())
				w.decide(e)
				w.step(time.Minute) // bound to gpu-m1
				w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).selector("kubernetes.io/hostname", "gpu-m1").obj())
				return w.decide(e)
			},
			facts: []string{`"kubernetes.io/hostname=gpu-m1"`, "has 1 GPU(s) free", "no on-demand lease is being requested yet"},
		},
		"lease granted": {
			reason: RuntimeGuaranteed, typ: corev1.EventTypeNormal,
			setup: func(t *testing.T) Plan {
				w := newWorld(t, t0, mediumNodes()...)
				w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
				return w.decide(newEngine(t))
			},
			facts: []string{"guaranteed for 1h10m00s", "until 2026-09-23 10:10:00 PDT", "can be preempted"},
		},
		"lease merged into the owner's booking": {
			reason: ReservationRelinked, typ: corev1.EventTypeNormal,
			setup: func(t *testing.T) Plan {
				e := newEngine(t)
				w := newWorld(t, t0.Add(-10*time.Minute), mediumNodes()...)
				w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
				w.decide(e) // lease #1
				w.addRes(booking(46, "alice", course, "medium", 1, t0, t0.Add(8*time.Hour)))
				w.step(10 * time.Minute)
				return w.decide(e)
			},
			facts: []string{"re-linked to GPU reservation #46", "on-demand lease #1", "merged", "until 2026-09-23 17:00:00 PDT"},
		},
		"overstaying pod rescued by a new booking": {
			reason: OverstayRelinked, typ: corev1.EventTypeNormal,
			setup: func(t *testing.T) Plan {
				e := newEngine(t)
				w := newWorld(t, t0.Add(-2*time.Hour), mediumNodes()...)
				w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
				w.decide(e) // lease until 07:10 PDT
				w.step(90 * time.Minute)
				w.decide(e) // overstay
				w.addRes(booking(48, "alice", course, "medium", 1, t0, t0.Add(time.Hour)))
				w.step(30 * time.Minute)
				return w.decide(e)
			},
			facts: []string{"#48", "no longer overstay", "until 2026-09-23 10:00:00 PDT"},
		},
		"best-effort admission": {
			reason: BestEffortAdmitted, typ: corev1.EventTypeNormal,
			setup: func(t *testing.T) Plan {
				w := newWorld(t, t0, mediumNodes()...)
				w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).ann(AnnRuntimeGuarantee, "none").obj())
				return w.decide(newEngine(t, func(c *Config) { c.BestEffort = true }))
			},
			facts: []string{"no runtime guarantee and no charge", "GPU class medium"},
		},
		"overstaying pod in the way of a booking": {
			reason: Preempted, typ: corev1.EventTypeNormal,
			setup: func(t *testing.T) Plan {
				e := newEngine(t)
				w := newWorld(t, t0.Add(-2*time.Hour), newNode("gpu-m1", "medium", 2))
				w.addPod(newPod("alice", "p").class("medium").gpus(2).course(course).obj())
				w.decide(e) // lease until 07:10 PDT
				w.step(time.Minute)
				w.addRes(booking(49, "bob", course, "medium", 2, t0, t0.Add(time.Hour)))
				w.step(109 * time.Minute) // 08:50: the boundary is within the kill lead
				return w.decide(e)
			},
			facts: []string{"free capacity for reservation(s) starting 2026-09-23 09:00:00 PDT", "overstayed its runtime guarantee by 40m00s"},
		},
		"booking cancelled by its owner": {
			reason: ReservationCancelled, typ: corev1.EventTypeNormal,
			setup: cancelled(CancelUser),
			facts: []string{"Pod evicted: GPU reservation cancelled by user."},
		},
		"booking cancelled by a manager": {
			reason: ReservationCancelled, typ: corev1.EventTypeNormal,
			setup: cancelled(CancelOther),
			facts: []string{"cancelled by another user."},
		},
		"booking superseded without a move target": {
			reason: ReservationCancelled, typ: corev1.EventTypeNormal,
			setup: cancelled(CancelSuperseded),
			facts: []string{"cancelled by user (reason: superseded)."},
		},
		"booking adopted by a teammate": {
			reason: ReservationReassigned, typ: corev1.EventTypeNormal,
			setup: func(t *testing.T) Plan {
				e := newEngine(t)
				w := newWorld(t, t0, mediumNodes()...)
				w.addRes(booking(51, "alice", course, "medium", 1, t0, t0.Add(8*time.Hour)))
				w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
				w.decide(e)
				w.step(5 * time.Minute)
				w.reservation(51).Owner = "bob"
				return w.decide(e)
			},
			facts: []string{"Pod evicted: GPU reservation reassigned to bob."},
		},
	}
	seen := map[string]bool{}
	for name, tc := range tests {
		seen[tc.reason] = true
		t.Run(name, func(t *testing.T) {
			plan := tc.setup(t)
			var got *Event
			for _, ev := range eventsFor(allEvents(plan), "p") {
				if ev.Reason == tc.reason {
					got = &ev
					break
				}
			}
			if got == nil {
				t.Fatalf("no %s event for pod p; got %q", tc.reason, reasons(allEvents(plan)))
			}
			t.Log(got.Message)
			if got.Type != tc.typ {
				t.Errorf("type = %s, want %s", got.Type, tc.typ)
			}
			for _, f := range tc.facts {
				if !strings.Contains(got.Message, f) {
					t.Errorf("message lacks %q:\n%s", f, got.Message)
				}
			}
			if spec := eventTable[tc.reason]; got.Action != spec.action {
				t.Errorf("action = %s, want %s", got.Action, spec.action)
			}
		})
	}
	if len(seen) != 19 || len(eventTable) != 19 {
		t.Errorf("cases cover %d reasons and the table holds %d; both must be the 19 events", len(seen), len(eventTable))
	}
}

func cancelled(reason CancelReason) func(t *testing.T) Plan {
	return func(t *testing.T) Plan {
		e := newEngine(t)
		w := newWorld(t, t0, mediumNodes()...)
		w.addRes(booking(50, "alice", course, "medium", 1, t0, t0.Add(8*time.Hour)))
		w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
		w.decide(e)
		w.step(5 * time.Minute)
		r := w.reservation(50)
		r.Status, r.CancelReason, r.CancelledAt = StatusCancelled, reason, w.now
		return w.decide(e)
	}
}

// The waiting events' messages must not change while the cause is
// unchanged: the throttle keys on them.
func TestEventsWaitingMessagesStable(t *testing.T) {
	e := newEngine(t)
	w := newWorld(t, t0.Add(-25*time.Minute), mediumNodes()...)
	w.addRes(booking(41, "alice", course, "medium", 1, t0, t0.Add(8*time.Hour)))
	w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
	first := e.msg.render(PodRef{}, WaitingForReservation, &eventData{Res: viewOf(&w.res[0]), Class: "medium"})
	w.step(10 * time.Minute)
	second := e.msg.render(PodRef{}, WaitingForReservation, &eventData{Res: viewOf(&w.res[0]), Class: "medium"})
	if first.Message != second.Message {
		t.Errorf("message changed with the clock:\n%s\n%s", first.Message, second.Message)
	}
}

func TestThrottle(t *testing.T) {
	e := newEngine(t)
	w := newWorld(t, t0.Add(-29*time.Minute), mediumNodes()...)
	w.addRes(booking(41, "alice", course, "medium", 1, t0.Add(24*time.Hour), t0.Add(25*time.Hour)))
	w.addPod(newPod("alice", "p").class("medium").gpus(1).course(noOD).obj())
	count := func() int { return len(eventsFor(w.decide(e).Events, "p")) }

	if n := count(); n != 1 {
		t.Fatalf("first cycle wrote %d events, want 1", n)
	}
	for _, d := range []time.Duration{5 * time.Minute, 10 * time.Minute, 14 * time.Minute} {
		w.step(d)
		if n := count(); n != 0 {
			t.Fatalf("unchanged cause re-emitted %d events before 30 minutes", n)
		}
	}
	w.step(time.Minute) // 30 minutes after the first write
	if n := count(); n != 1 {
		t.Fatalf("after 30 minutes wrote %d events, want the repeat", n)
	}
	// The cause changes: the pod now names a workspace that allows leases.
	p := w.pod("alice", "p").DeepCopy()
	p.Labels[WorkspaceLabel] = "UNKNOWN101"
	w.replace(p)
	w.step(time.Minute)
	plan := e.Decide(w.snapshot())
	if got := reasons(eventsFor(plan.Events, "p")); got != OnDemandLeaseRejected {
		t.Fatalf("after the cause changed got %q, want %s at once", got, OnDemandLeaseRejected)
	}
}

func TestEventMessageCapped(t *testing.T) {
	long := strings.Repeat("x", 2000)
	if got := capMessage(long); len([]rune(got)) != maxMessageLen || !strings.HasSuffix(got, "…") {
		t.Errorf("capped message has %d runes, suffix %q", len([]rune(got)), got[len(got)-3:])
	}
	if got := clean("a\nb\x00c"); got != "abc" {
		t.Errorf("clean = %q", got)
	}
}

func TestEventName(t *testing.T) {
	ev := Event{Pod: PodRef{Name: "p"}, Reason: WaitingForReservation, Message: "m"}
	a := ev.Name(t0, 30*time.Minute)
	if b := ev.Name(t0.Add(10*time.Minute), 30*time.Minute); a != b {
		t.Errorf("same bucket, names differ: %s %s", a, b)
	}
	if b := ev.Name(t0.Add(31*time.Minute), 30*time.Minute); a == b {
		t.Errorf("next bucket, same name %s", a)
	}
	ev.Message = "n"
	if b := ev.Name(t0, 30*time.Minute); a == b {
		t.Errorf("different message, same name %s", a)
	}
	if !strings.HasPrefix(a, "p.waitingforreservation.") {
		t.Errorf("name %s", a)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		70*time.Minute - time.Second:   "1h09m59s",
		45*time.Minute + 3*time.Second: "45m03s",
		0:                              "0m00s",
		26 * time.Hour:                 "26h00m00s",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %s, want %s", d, got, want)
		}
	}
}

// The throttle compares fingerprints instead of messages, so every field a
// template may read must change the fingerprint.
func TestEventFingerprintCoversEveryField(t *testing.T) {
	seed := maphash.MakeSeed()
	zero := (&eventData{}).fingerprint(seed, WaitingForReservation)
	if other := (&eventData{}).fingerprint(seed, ReservationFull); other == zero {
		t.Error("reason does not change the fingerprint")
	}
	typ := reflect.TypeFor[eventData]()
	for i := range typ.NumField() {
		var d eventData
		f := reflect.ValueOf(&d).Elem().Field(i)
		switch v := f.Addr().Interface().(type) {
		case *string:
			*v = "x"
		case *int:
			*v = 1
		case *bool:
			*v = true
		case *time.Time:
			*v = t0
		case *time.Duration:
			*v = time.Second
		case *[]string:
			*v = []string{"x"}
		case **resView:
			*v = &resView{}
		default:
			t.Fatalf("field %s has type %s the test does not know", typ.Field(i).Name, f.Type())
		}
		if d.fingerprint(seed, WaitingForReservation) == zero {
			t.Errorf("field %s does not change the fingerprint", typ.Field(i).Name)
		}
	}
}
