package spawnerd_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/reservation"
)

// gpuConfig runs the reservation engine inside spawnerd, over the dev
// cluster's tainted a5000 nodes. The course allows no on-demand use, so a
// GPU pod waits for its owner's booking.
const gpuConfig = `
kubespawner:
  namespace: %[1]s
  cmd: [jupyterhub-singleuser]
  start_timeout: %[2]d
  reservation_wait_timeout: 300
  course: DSC10
  delete_grace_period: 1
  profile_list:
  - display_name: GPU notebook
    slug: gpu
    default: true
    kubespawner_override:
      gpu_class: a5000
      extra_resource_limits: {nvidia.com/gpu: "1"}
      node_selector: {gpu-class: a5000}
  - display_name: GPU notebook with a typo
    slug: typo
    kubespawner_override:
      gpu_class: a5000x
      extra_resource_limits: {nvidia.com/gpu: "1"}
reservation:
  classes:
  - {label: a5000, node_selector: {gpu-class: a5000}}
  workspaces:
  - {name: DSC10, on_demand: false}
`

// gpuSetup starts spawnerd with the engine; extra is appended to the
// reservation section.
func gpuSetup(t *testing.T, startTimeout int, extra string) *fixture {
	t.Helper()
	if err := env.InstallReservationCRD(context.Background()); err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	api := env.StartSpawnerd(t, bin, harness.SpawnerdOptions{
		Config: fmt.Sprintf(gpuConfig, ns, startTimeout) + extra,
		Args:   []string{"--namespace", ns, "--leader-elect=false", "--reservation-tick", "1s"},
	})
	return &fixture{ns: ns, api: api}
}

// A hold that needs a fix fails the spawn at once, with the event's words,
// long before start_timeout.
func TestGPUHoldNeedingFixFailsFast(t *testing.T) {
	f := gpuSetup(t, 120, "")
	start := time.Now()
	evs := f.startProgress(t, "gina", map[string]any{"profile": "typo"})
	last := evs[len(evs)-1]
	if !last.Failed || !strings.Contains(last.Message, "GPU reservation: This pod's gpu-class label is a5000x") {
		t.Fatalf("last progress event %+v, want a failure quoting UnknownGpuClass", last)
	}
	took := time.Since(start)
	t.Logf("UnknownGpuClass failed the spawn in %s (start_timeout 120 s)", took.Round(time.Millisecond))
	if took > 60*time.Second {
		t.Errorf("the spawn took %s to fail", took)
	}
	sawEvent := false
	for _, e := range evs {
		sawEvent = sawEvent || strings.Contains(e.Message, "not a GPU class the reservation service knows")
	}
	if !sawEvent {
		t.Error("the reservation event was not relayed into progress")
	}
	env.WaitForPodGone(t, f.ns, "jupyter-gina")
}

// A wait that can clear keeps the spawn alive past start_timeout; when the
// booking opens the pod is admitted and the server becomes ready.
func TestGPUWaitOutlivesStartTimeout(t *testing.T) {
	f := gpuSetup(t, 15, "")
	b := f.book(t, 35*time.Second)
	start := time.Now()
	evs := f.startProgress(t, "hana", map[string]any{"profile": "gpu"})
	last := evs[len(evs)-1]
	if !last.Ready {
		t.Fatalf("spawn ended %+v, want ready after the booking opened", last)
	}
	took := time.Since(start)
	t.Logf("waited %s for booking #%d (start_timeout 15 s), then ready", took.Round(time.Millisecond), b.ID)
	if took < 15*time.Second {
		t.Errorf("ready after %s: the booking had not opened yet", took)
	}
	var waited, admitted bool
	for _, e := range evs {
		waited = waited || strings.Contains(e.Message, fmt.Sprintf("Waiting for your GPU reservation #%d", b.ID))
		admitted = admitted || strings.Contains(e.Message, "GPU access guaranteed")
	}
	if !waited || !admitted {
		t.Errorf("progress lacks the reservation events (waiting %v, admitted %v): %+v", waited, admitted, evs)
	}
}

// book books one a5000 GPU for the namespace's user, opening after d,
// through the admin API.
func (f *fixture) book(t *testing.T, d time.Duration) reservation.Reservation {
	t.Helper()
	opens := time.Now().Add(d).UTC().Truncate(time.Second)
	b, err := f.api.Client(apiclient.User{Name: "admin", Admin: true}).CreateBooking(t.Context(), hubapi.BookingRequest{
		Owner: f.ns, Workspace: "DSC10", Class: "a5000", GPUs: 1,
		Start: opens.Format(time.RFC3339), End: opens.Add(time.Hour).Format(time.RFC3339)})
	if err != nil {
		t.Fatalf("booking: %v", err)
	}
	return *b
}

// With the opt-in scheduling gate, spawnerd creates the GPU pod gated, so
// kube-scheduler leaves it alone while it waits; the engine's admission
// PATCH lifts the gate with the toleration and the server becomes ready.
func TestGPUSchedulingGateOptIn(t *testing.T) {
	const gateName = "dsmlp.ucsd.edu/gpu-reservation"
	f := gpuSetup(t, 60, "  scheduling_gate: "+gateName+"\n")
	b := f.book(t, 12*time.Second)
	m := f.begin(t, "ivy", map[string]any{"profile": "gpu"})
	gated := env.WaitForPod(t, f.ns, m.Pod, "gated and reported SchedulingGated", func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated {
				return true
			}
		}
		return false
	})
	if len(gated.Spec.SchedulingGates) != 1 || gated.Spec.SchedulingGates[0].Name != gateName {
		t.Fatalf("waiting pod's gates %+v, want only %s", gated.Spec.SchedulingGates, gateName)
	}
	evs := f.api.Progress("ivy", "")
	if last := evs[len(evs)-1]; !last.Ready {
		t.Fatalf("spawn ended %+v, want ready once booking #%d opened", last, b.ID)
	}
	p := env.WaitForPod(t, f.ns, m.Pod, "running", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	if len(p.Spec.SchedulingGates) != 0 {
		t.Errorf("admitted pod still gated: %+v", p.Spec.SchedulingGates)
	}
	if p.Annotations["galends/booking-reference"] != fmt.Sprintf("res-%d", b.ID) {
		t.Errorf("booking-reference %q, want res-%d", p.Annotations["galends/booking-reference"], b.ID)
	}
	for _, e := range evs {
		if strings.Contains(e.Message, "FailedScheduling") {
			t.Errorf("a gated pod was tried by the scheduler: %s", e.Message)
		}
	}
}
