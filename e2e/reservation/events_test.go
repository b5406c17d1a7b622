package reservation_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsmlp/spawner/admission"
	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/reservation"
)

const (
	normal  = corev1.EventTypeNormal
	warning = corev1.EventTypeWarning
)

// WaitingForReservation, then the window opens: RuntimeGuaranteed, the
// annotations, the class node selection and /etc/podinfo.
func TestWaitingForReservationThenAdmitted(t *testing.T) {
	n := env.Namespace(t)
	now := clk.Now()
	b := book(t, n, wsCourse, "wait", 2, now.Add(20*time.Minute), now.Add(2*time.Hour))
	create(t, n, gpuPod("early", "wait", 2))
	wantEvent(t, n, "early", reservation.WaitingForReservation, normal, fmt.Sprintf("#%d", b.ID), "to open", "2 x wait")
	wantHeld(t, n, "early")

	step(21 * time.Minute)
	ev := wantEvent(t, n, "early", reservation.RuntimeGuaranteed, normal, "GPU access guaranteed for", "until")
	p := waitAdmitted(t, n, "early", "wait")
	want := map[string]string{
		"booking-reference": ref(b.ID), "reservation-kind": "booking", "guarantee-status": "guaranteed",
		"reservation-start": b.Start.Format("2006-01-02T15:04:05Z"), "reservation-end": b.End.Format("2006-01-02T15:04:05Z"),
		"guaranteed-until": b.End.Format("2006-01-02T15:04:05Z"), "reservation-gpu-count": "2",
	}
	for k, v := range want {
		if got := p.Annotations[prefix+k]; got != v {
			t.Errorf("annotation %s = %q, want %q", k, got, v)
		}
	}
	if p.Annotations[prefix+"admitted-at"] == "" {
		t.Error("admitted-at missing")
	}
	if !strings.Contains(ev.Message, "PST") && !strings.Contains(ev.Message, "PDT") {
		t.Errorf("times in messages are Pacific: %s", ev.Message)
	}
	if p.Spec.NodeSelector[devcluster.LabelGPUClass] != "wait" {
		t.Errorf("webhook did not add the class node selection: %v", p.Spec.NodeSelector)
	}
	wantPodinfo(t, p)
}

func wantPodinfo(t *testing.T, p *corev1.Pod) {
	t.Helper()
	var vol *corev1.Volume
	for i := range p.Spec.Volumes {
		if p.Spec.Volumes[i].Name == admission.VolumeName {
			vol = &p.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.DownwardAPI == nil || vol.DownwardAPI.Items[0].FieldRef.FieldPath != "metadata.annotations" || vol.DownwardAPI.Items[0].Path != "annotations" {
		t.Fatalf("no downward-API podinfo volume with the annotations: %+v", p.Spec.Volumes)
	}
	for _, c := range p.Spec.Containers {
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || (m.Name == admission.VolumeName && m.MountPath == "/etc/podinfo")
		}
		if !mounted {
			t.Errorf("container %s does not mount /etc/podinfo: %+v", c.Name, c.VolumeMounts)
		}
	}
}

func TestReservationFull(t *testing.T) {
	n := env.Namespace(t)
	now := clk.Now()
	b := book(t, n, wsNoOD, "full", 1, now.Add(-time.Minute), now.Add(time.Hour))
	create(t, n, gpuPod("first", "full", 1, workspace(wsNoOD)))
	waitAdmitted(t, n, "first", "full")
	create(t, n, gpuPod("second", "full", 1, workspace(wsNoOD)))
	wantEvent(t, n, "second", reservation.ReservationFull, warning, fmt.Sprintf("#%d", b.ID), "first", "kubectl delete pod")
	wantHeld(t, n, "second")
}

func TestReservationTooSmall(t *testing.T) {
	n := env.Namespace(t)
	now := clk.Now()
	b := book(t, n, wsNoOD, "small", 1, now, now.Add(time.Hour))
	create(t, n, gpuPod("big", "small", 2, workspace(wsNoOD)))
	wantEvent(t, n, "big", reservation.ReservationTooSmall, warning, "requests 2 GPUs", fmt.Sprintf("#%d", b.ID), "holds only 1")
	wantHeld(t, n, "big")
}

func TestOnDemandLeaseDenied(t *testing.T) {
	n := env.Namespace(t)
	create(t, n, gpuPod("greedy", "deny", 2, workspace(wsCapped)))
	ev := wantEvent(t, n, "greedy", reservation.OnDemandLeaseDenied, warning, "2 x deny", "limit of 1 GPU(s)", "waiting will not change this")
	if reservation.HoldOf(ev.Reason, ev.Message) != reservation.HoldNeedsFix {
		t.Error("a structural denial must read as needing a fix")
	}
	// A contended denial: the workspace's one GPU is in use.
	create(t, n, gpuPod("one", "deny", 1, workspace(wsCapped)))
	waitAdmitted(t, n, "one", "deny")
	create(t, n, gpuPod("two", "deny", 1, workspace(wsCapped)))
	ev = wantEvent(t, n, "two", reservation.OnDemandLeaseDenied, warning, "Only 0 GPU(s)", "will keep retrying")
	if reservation.HoldOf(ev.Reason, ev.Message) != reservation.HoldClears {
		t.Error("a contended denial must read as clearing")
	}
	wantHeld(t, n, "two")
	if len(leasesOf(string(getPod(t, n, "two").UID))) != 0 {
		t.Error("a denied pod got a lease")
	}
}

func TestOnDemandLeaseRejected(t *testing.T) {
	n := env.Namespace(t)
	create(t, n, gpuPod("lost", "misc", 1, workspace("NOSUCH99")))
	wantEvent(t, n, "lost", reservation.OnDemandLeaseRejected, warning, "NOSUCH99", "user "+n, "Waiting will not fix this")
	wantHeld(t, n, "lost")
}

func TestOnDemandAdmissionPaused(t *testing.T) {
	n := env.Namespace(t)
	create(t, n, gpuPod("nowhere", "empty", 1))
	wantEvent(t, n, "nowhere", reservation.OnDemandAdmissionPaused, warning, "gpu-class empty is paused", "no node of this class is schedulable")
	wantHeld(t, n, "nowhere")

	// An administrator's pause, and its lifting.
	ctx := context.Background()
	if err := ctl.SetPaused(ctx, "misc", true, "driver upgrade"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.SetPaused(ctx, "misc", false, "") })
	create(t, n, gpuPod("later", "misc", 1))
	wantEvent(t, n, "later", reservation.OnDemandAdmissionPaused, warning, "an administrator paused it (driver upgrade)")
	wantHeld(t, n, "later")
	if err := ctl.SetPaused(ctx, "misc", false, ""); err != nil {
		t.Fatal(err)
	}
	waitAdmitted(t, n, "later", "misc")
}

func TestUnknownGpuClass(t *testing.T) {
	n := env.Namespace(t)
	create(t, n, gpuPod("typo", "a100x", 1))
	wantEvent(t, n, "typo", reservation.UnknownGpuClass, warning, "gpu-class label is a100x", "Known classes:", "misc")
	wantHeld(t, n, "typo")
}

func TestNoReservation(t *testing.T) {
	n := env.Namespace(t)
	create(t, n, gpuPod("nobook", "misc", 1, workspace(wsNoOD)))
	wantEvent(t, n, "nobook", reservation.NoReservation, warning, "user "+n, "gpu-class misc", "workspace "+wsNoOD, "does not allow on-demand use")
	wantHeld(t, n, "nobook")
}

func TestNoGpuRequest(t *testing.T) {
	n := env.Namespace(t)
	create(t, n, gpuPod("nogpu", "misc", 0))
	wantEvent(t, n, "nogpu", reservation.NoGpuRequest, warning, "gpu-class label misc", "requests no nvidia.com/gpu")
	wantHeld(t, n, "nogpu")
}

func TestAnnotationIgnored(t *testing.T) {
	n := env.Namespace(t)
	p := create(t, n, gpuPod("odd", "misc", 1, annotate(prefix+"minimum-runtime-seconds", "soon")))
	wantEvent(t, n, "odd", reservation.AnnotationIgnored, warning, "minimum-runtime-seconds=soon")
	// Ignoring it changes only the lease length: the default runtime (1 h) plus the 10 min buffer.
	wantEvent(t, n, "odd", reservation.RuntimeGuaranteed, normal, "guaranteed for 1h10m")
	got := waitAdmitted(t, n, "odd", "misc")
	if got.Annotations[prefix+"reservation-kind"] != "on_demand" {
		t.Errorf("reservation-kind %q, want on_demand", got.Annotations[prefix+"reservation-kind"])
	}
	if l := leasesOf(string(p.UID)); len(l) != 1 || l[0].Kind != reservation.KindOnDemand || l[0].End.Sub(l[0].Start) != 70*time.Minute {
		t.Errorf("leases for the pod: %+v, want one of 1h10m", l)
	}
}

func TestNoMatchingNode(t *testing.T) {
	n := env.Namespace(t)
	create(t, n, gpuPod("pinned", "misc", 1, onNode("g-full-0")))
	wantEvent(t, n, "pinned", reservation.NoMatchingNode, warning, "g-full-0", "none of the 2 schedulable node(s) of GPU class misc", "It does match nodes of GPU class full")
	wantHeld(t, n, "pinned")
}

func TestWaitingForNode(t *testing.T) {
	n := env.Namespace(t)
	create(t, n, gpuPod("hog", "node", 2, onNode("g-node-0")))
	waitAdmitted(t, n, "hog", "node")
	create(t, n, gpuPod("blocked", "node", 1, onNode("g-node-0")))
	wantEvent(t, n, "blocked", reservation.WaitingForNode, normal, "GPU class node", "g-node-0", "1 GPU(s) free")
	wantHeld(t, n, "blocked")
	if len(leasesOf(string(getPod(t, n, "blocked").UID))) != 0 {
		t.Error("no lease may be charged while the pod waits for a node")
	}
}

// ReservationRelinked (a): a pod on a lease moves into its owner's booking
// when the booking opens; the lease is released.
func TestReservationRelinked(t *testing.T) {
	n := env.Namespace(t)
	p := create(t, n, gpuPod("leased", "relink", 1))
	waitAdmitted(t, n, "leased", "relink")
	lease := leasesOf(string(p.UID))
	if len(lease) != 1 {
		t.Fatalf("want one lease, got %+v", lease)
	}
	now := clk.Now()
	b := book(t, n, wsCourse, "relink", 1, now.Add(2*time.Minute), now.Add(3*time.Hour))
	step(3 * time.Minute)
	wantEvent(t, n, "leased", reservation.ReservationRelinked, normal, fmt.Sprintf("#%d", b.ID), fmt.Sprintf("lease #%d", lease[0].ID), "merged")
	env.WaitForPod(t, n, "leased", "re-stamped", func(p *corev1.Pod) bool { return p.Annotations[prefix+"booking-reference"] == ref(b.ID) })
	l := waitReservation(t, lease[0].ID, func(r reservation.Reservation) bool { return r.Status == reservation.StatusCancelled })
	if l.CancelReason != reservation.CancelSuperseded {
		t.Errorf("lease cancel reason %s, want superseded", l.CancelReason)
	}
}

// OverstayRelinked: a pod past its guarantee is rescued by an open booking.
func TestOverstayRelinked(t *testing.T) {
	n := env.Namespace(t)
	create(t, n, gpuPod("short", "over", 1, annotate(prefix+"minimum-runtime-seconds", "60")))
	waitAdmitted(t, n, "short", "over")
	step(12 * time.Minute) // 60 s runtime + 10 min buffer are over
	env.WaitForPod(t, n, "short", "overstay", func(p *corev1.Pod) bool { return p.Annotations[prefix+"guarantee-status"] == "overstay" })
	// Opened before the lease ended, so it does not simply continue it.
	now := clk.Now()
	b := book(t, n, wsCourse, "over", 1, now.Add(-3*time.Minute), now.Add(2*time.Hour))
	wantEvent(t, n, "short", reservation.OverstayRelinked, normal, fmt.Sprintf("#%d", b.ID), "no longer overstay")
	env.WaitForPod(t, n, "short", "guaranteed again", func(p *corev1.Pod) bool {
		return p.Annotations[prefix+"guarantee-status"] == "guaranteed" && p.Annotations[prefix+"booking-reference"] == ref(b.ID)
	})
}

func TestBestEffortAdmitted(t *testing.T) {
	n := env.Namespace(t)
	p := create(t, n, gpuPod("free", "best", 1, annotate(prefix+"runtime-guarantee", "none")))
	wantEvent(t, n, "free", reservation.BestEffortAdmitted, normal, "no runtime guarantee and no charge", "GPU class best")
	got := waitAdmitted(t, n, "free", "best")
	if got.Annotations[prefix+"reservation-kind"] != "best_effort" || got.Annotations[prefix+"guarantee-status"] != "overstay" {
		t.Errorf("annotations %v", got.Annotations)
	}
	if l := leasesOf(string(p.UID)); len(l) != 1 || l[0].Kind != reservation.KindBestEffort || !l[0].End.Equal(l[0].Start) {
		t.Errorf("records for the pod: %+v, want one zero-length best-effort record", l)
	}
}

// Preempted: a pod past its guarantee goes when a booking within the kill
// lead needs its GPUs; the event is written before the delete.
func TestPreempted(t *testing.T) {
	n, other := env.Namespace(t), env.Namespace(t)
	create(t, n, gpuPod("victim", "pre", 2, annotate(prefix+"minimum-runtime-seconds", "60")))
	waitAdmitted(t, n, "victim", "pre")
	now := clk.Now()
	book(t, other, wsCourse, "pre", 2, now.Add(20*time.Minute), now.Add(2*time.Hour))
	step(12 * time.Minute)
	wantEvent(t, n, "victim", reservation.Preempted, normal, "free capacity for reservation(s) starting", "overstayed its runtime guarantee by")
	waitGone(t, n, "victim")
}

func TestReservationCancelled(t *testing.T) {
	n := env.Namespace(t)
	now := clk.Now()
	b := book(t, n, wsCourse, "cancel", 1, now.Add(-time.Minute), now.Add(time.Hour))
	create(t, n, gpuPod("doomed", "cancel", 1))
	waitAdmitted(t, n, "doomed", "cancel")
	if err := ctl.CancelBooking(context.Background(), b.ID, reservation.CancelUser); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, n, "doomed", reservation.ReservationCancelled, normal, "Pod evicted: GPU reservation cancelled by user.")
	waitGone(t, n, "doomed")
}

func TestReservationReassigned(t *testing.T) {
	n, heir := env.Namespace(t), env.Namespace(t)
	now := clk.Now()
	b := book(t, n, wsCourse, "reassign", 1, now.Add(-time.Minute), now.Add(time.Hour))
	create(t, n, gpuPod("old", "reassign", 1))
	waitAdmitted(t, n, "old", "reassign")
	if err := ctl.Reassign(context.Background(), b.ID, heir); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, n, "old", reservation.ReservationReassigned, normal, "reassigned to "+heir)
	waitGone(t, n, "old")
	// The new owner's pod claims it.
	create(t, heir, gpuPod("new", "reassign", 1))
	p := waitAdmitted(t, heir, "new", "reassign")
	if p.Annotations[prefix+"booking-reference"] != ref(b.ID) {
		t.Errorf("new owner's pod under %s, want %s", p.Annotations[prefix+"booking-reference"], ref(b.ID))
	}
}

// The policy refuses a reservation toleration set by anyone but the engine.
func TestUserTolerationRefused(t *testing.T) {
	n := env.Namespace(t)
	p := gpuPod("sneaky", "misc", 1)
	p.Spec.Tolerations = []corev1.Toleration{{Key: devcluster.ReservationTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	student := impersonate(t, "student1")
	_, err := student.CoreV1().Pods(n).Create(context.Background(), p, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Fatalf("creating a pod with the reservation toleration as a user: err %v, want refused", err)
	}
	if !strings.Contains(err.Error(), "only by the GPU reservation engine") {
		t.Errorf("refusal does not say why: %v", err)
	}
	// The same pod without the toleration is accepted and routed.
	p.Spec.Tolerations = nil
	if _, err := student.CoreV1().Pods(n).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("plain pod refused: %v", err)
	}
	waitAdmitted(t, n, "sneaky", "misc")
}
