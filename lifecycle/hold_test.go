package lifecycle

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/spawner"
)

func resEvent(reason, msg string, at time.Time) *corev1.Event {
	return &corev1.Event{Reason: reason, Message: msg, Source: corev1.EventSource{Component: reservation.Component},
		LastTimestamp: metav1.NewTime(at)}
}

func TestReservationHoldStretchesThenRestoresDeadline(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	sp := &spawn{started: t0, settings: &spawner.Settings{StartTimeout: 60, ReservationWaitTimeout: 1800}}
	var h reservationHold
	if _, ok := h.deadline(t0.Add(5*time.Second), sp); ok {
		t.Fatal("no reservation event: the deadline must not move")
	}
	// Not the engine's: ignored.
	h.see(&corev1.Event{Reason: reservation.WaitingForReservation, Source: corev1.EventSource{Component: "someone-else"}})
	if _, ok := h.deadline(t0.Add(5*time.Second), sp); ok {
		t.Fatal("an event from another component moved the deadline")
	}
	h.see(resEvent(reservation.WaitingForReservation, "Waiting for your GPU reservation #3 ...", t0.Add(2*time.Second)))
	d, ok := h.deadline(t0.Add(10*time.Second), sp)
	if !ok || d != 1790*time.Second {
		t.Fatalf("waiting: deadline %v %v, want 1790s from now", d, ok)
	}
	if _, ok := h.deadline(t0.Add(11*time.Second), sp); ok {
		t.Error("the waiting deadline is set once")
	}
	h.see(resEvent(reservation.RuntimeGuaranteed, "GPU access guaranteed ...", t0.Add(20*time.Minute)))
	d, ok = h.deadline(t0.Add(20*time.Minute+10*time.Second), sp)
	if !ok || d != 51*time.Second {
		t.Fatalf("admitted: deadline %v %v, want start_timeout from admission", d, ok)
	}
	if h.fix != "" {
		t.Error("no fix needed")
	}
}

func TestReservationHoldNeedsFix(t *testing.T) {
	var h reservationHold
	h.see(resEvent(reservation.UnknownGpuClass, "This pod's gpu-class label is a100x ...", time.Now()))
	if h.fix != "This pod's gpu-class label is a100x ..." {
		t.Errorf("fix %q", h.fix)
	}
}
