package spawnerd_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/reservation"
)

// progressEvent is one progress message with the Kubernetes event behind
// it (raw_event).
type progressEvent struct {
	harness.ProgressEvent
}

func (e progressEvent) rawReason() string {
	s, _ := e.RawEvent["reason"].(string)
	return s
}

func (e progressEvent) rawMessage() string {
	s, _ := e.RawEvent["message"].(string)
	return s
}

// followProgress streams a server's progress as it comes, closing the
// channel when spawnerd closes the stream.
func followProgress(t *testing.T, api *harness.Spawnerd, user string) <-chan progressEvent {
	t.Helper()
	out := make(chan progressEvent, 100)
	ctx := t.Context()
	go func() {
		defer close(out)
		n := 0
		err := api.FollowProgress(ctx, user, "", func(e harness.ProgressEvent) error {
			n++
			select {
			case out <- progressEvent{e}:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		// A stream that never opened; one that breaks off just ends.
		if err != nil && n == 0 && ctx.Err() == nil {
			t.Errorf("progress websocket of %s: %v", user, err)
		}
	}()
	return out
}

func collect(ch <-chan progressEvent) []progressEvent {
	var out []progressEvent
	for ev := range ch {
		out = append(out, ev)
	}
	return out
}

// A CPU spawn on kwok is Running as soon as it is bound, before the
// scheduler's Scheduled and kwok's Started events reach spawnerd's cache;
// progress still tells them before ready, in plain words, in every run.
func TestProgressTellsPodEventsBeforeReady(t *testing.T) {
	f := setup(t, 30)
	const runs = 6
	for i := range runs {
		user := fmt.Sprintf("pia%d", i)
		f.begin(t, user, nil)
		evs := collect(followProgress(t, f.api, user))
		if len(evs) == 0 || !evs[len(evs)-1].Ready {
			t.Fatalf("run %d: progress %+v, want it to end ready", i, evs)
		}
		var told []string
		saidMissing := false
		for _, e := range evs[:len(evs)-1] {
			if strings.Contains(e.Message, "has not reported") {
				saidMissing = true
			}
			if e.RawEvent == nil {
				continue
			}
			if len(told) == 0 && (e.Progress == nil || *e.Progress != 30) {
				t.Errorf("run %d: first pod event %+v, want KubeSpawner's 30%%", i, e)
			}
			if e.Message == e.rawMessage() || strings.Contains(e.Message, "[Normal]") {
				t.Errorf("run %d: %s event shown raw: %q", i, e.rawReason(), e.Message)
			}
			told = append(told, e.rawReason())
		}
		t.Logf("run %d: pod events before ready: %v", i, told)
		if len(told) == 0 {
			t.Errorf("run %d: no Kubernetes event before ready: %+v", i, evs)
		}
		// The scheduler's and kwok's events race each other: either order.
		if (!slices.Contains(told, "Scheduled") || !slices.Contains(told, "Started")) && !saidMissing {
			t.Errorf("run %d: told %v without saying Scheduled or Started is missing", i, told)
		}
		if code := f.api.Do(http.MethodDelete, harness.ServerPath(user, ""), user, false, nil, nil); code != http.StatusNoContent && code != http.StatusAccepted {
			t.Fatalf("run %d: stop: %d", i, code)
		}
	}
}

// waitConfig lets DSC10 use GPUs on demand; DSC20 is the other course
// whose booking holds every a5000 GPU.
const waitConfig = `
kubespawner:
  namespace: %[1]s
  cmd: [jupyterhub-singleuser]
  start_timeout: 10
  reservation_wait_timeout: %[2]d
  course: DSC10
  delete_grace_period: 1
  profile_list:
  - display_name: GPU notebook
    slug: gpu
    default: true
    kubespawner_override:
      gpu_class: a5000
      cpu_guarantee: 2
      extra_resource_limits: {nvidia.com/gpu: "1"}
      node_selector: {gpu-class: a5000}
reservation:
  classes:
  - {label: a5000, node_selector: {gpu-class: a5000}}
  workspaces:
  - {name: DSC10}
  - {name: DSC20}
`

// While every a5000 GPU is booked by another course, a student's GPU
// spawn shows the engine's lease denial as its headline, with when a GPU
// could be free; the scheduler's taint verdict, even when it comes later,
// repeats that reason instead of replacing it, and the spawn's failure
// quotes it too.
func TestGPUWaitHeadlineIsTheEngineReason(t *testing.T) {
	const waitSeconds = 40
	ctx := context.Background()
	if err := env.InstallReservationCRD(ctx); err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	api := env.StartSpawnerd(t, bin, harness.SpawnerdOptions{
		Config: fmt.Sprintf(waitConfig, ns, waitSeconds),
		Args:   []string{"--namespace", ns, "--leader-elect=false", "--reservation-tick", "1s"},
	})
	// Earlier tests' bookings may still hold some GPUs: book the rest, as
	// more booked than online would pause on-demand use instead.
	cs := classStatus(t, api, "a5000")
	if cs.Capacity-cs.Booked < 1 {
		t.Fatalf("class a5000 %+v: nothing left to book", cs)
	}
	start := time.Now().UTC().Truncate(time.Second)
	admin := api.Client(apiclient.User{Name: "admin", Admin: true})
	b, err := admin.CreateBooking(ctx, hubapi.BookingRequest{
		Owner: "dsc20-instructor", Workspace: "DSC20", Class: "a5000", GPUs: cs.Capacity - cs.Booked,
		Start: start.Format(time.RFC3339), End: start.Add(2 * time.Hour).Format(time.RFC3339)})
	if err != nil {
		t.Fatalf("booking every a5000 GPU for DSC20: %v", err)
	}
	// Cleanups run last-first: the booking goes before spawnerd stops, so
	// later tests find the GPUs free.
	t.Cleanup(func() {
		if err := admin.CancelReservation(context.Background(), b.ID, ""); err != nil {
			t.Errorf("cancelling booking #%d: %v", b.ID, err)
		}
	})
	// With the class booked to the last GPU, the first booking to end frees one.
	list, err := admin.Reservations(ctx, apiclient.ReservationFilter{Class: "a5000", State: reservation.StatusActive})
	if err != nil {
		t.Fatalf("listing reservations: %v", err)
	}
	var firstEnd time.Time
	for _, r := range list.Reservations {
		if r.End.After(start) && (firstEnd.IsZero() || r.End.Before(firstEnd)) {
			firstEnd = r.End
		}
	}

	m := (&fixture{ns: ns, api: api}).begin(t, "kim", map[string]any{"profile": "gpu"})
	stream := followProgress(t, api, "kim")
	loc, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	wantFree := "could be free from " + firstEnd.In(loc).Format("2006-01-02 15:04:05 MST")
	const denial = "Only 0 GPU(s) of class a5000 are free for on-demand use."

	// 1. The engine's reason becomes the headline.
	var evs []progressEvent
	var held string
	for ev := range stream {
		evs = append(evs, ev)
		if ev.Ready || ev.Failed {
			t.Fatalf("spawn ended before the engine's denial: %+v", evs)
		}
		if ev.rawReason() == reservation.OnDemandLeaseDenied {
			held = ev.Message
			break
		}
	}
	if !strings.Contains(held, denial) || !strings.Contains(held, wantFree) || !strings.Contains(held, "The spawn waits until") {
		t.Fatalf("headline %q, want the engine's denial, %q and the deadline", held, wantFree)
	}
	engineText := held[:strings.Index(held, " The spawn waits until")]

	// 2. A later FailedScheduling: a new node the pod's selector matches
	// makes kube-scheduler try the pod again and write a new event (its
	// message counts one node more), which only says the engine has not
	// admitted the pod.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "progress-" + ns, Labels: map[string]string{"gpu-class": "a5000"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "e2e.dsmlp.io/progress", Value: "true", Effect: corev1.TaintEffectNoSchedule}}}}
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Client.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("removing node %s: %v", node.Name, err)
		}
	})
	var later *progressEvent
	for ev := range stream {
		evs = append(evs, ev)
		if ev.rawReason() == "FailedScheduling" && later == nil {
			later = &evs[len(evs)-1]
		}
		if ev.Ready || ev.Failed {
			break
		}
	}
	if later == nil {
		t.Fatalf("kube-scheduler wrote no FailedScheduling after the engine's event: %+v", evs)
	}
	if !strings.Contains(later.rawMessage(), "untolerated taint") {
		t.Errorf("later scheduler event %q, want the taint verdict", later.rawMessage())
	}
	if !strings.HasPrefix(later.Message, engineText) {
		t.Errorf("the scheduler's taint verdict replaced the headline:\n got %q\nwant %q", later.Message, engineText)
	}

	for _, e := range evs {
		t.Logf("progress %q (raw %s: %q)", e.Message, e.rawReason(), e.rawMessage())
	}
	// 3. Nothing after the engine's event headlines the scheduler, and the
	// spawn fails at reservation_wait_timeout with the engine's reason.
	seenEngine := false
	for _, e := range evs {
		seenEngine = seenEngine || e.rawReason() == reservation.OnDemandLeaseDenied
		if seenEngine && (strings.Contains(e.Message, "nodes are available") || strings.Contains(e.Message, "held for the GPU reservation system")) {
			t.Errorf("headline after the engine's reason: %q", e.Message)
		}
	}
	last := evs[len(evs)-1]
	if !last.Failed || !strings.Contains(last.Message, fmt.Sprintf("did not become ready within %d seconds", waitSeconds)) || !strings.Contains(last.Message, denial) {
		t.Errorf("spawn ended %+v, want a timeout quoting the engine's reason", last)
	}
	env.WaitForPodGone(t, ns, m.Pod)
}

// classStatus waits until the engine has seen the class's nodes and
// returns the class's status.
func classStatus(t *testing.T, api *harness.Spawnerd, class string) reservation.ClassStatus {
	t.Helper()
	var cs reservation.ClassStatus
	admin := api.Client(apiclient.User{Name: "admin", Admin: true})
	err := wait.PollUntilContextTimeout(context.Background(), harness.Interval, harness.Timeout, true, func(ctx context.Context) (bool, error) {
		list, err := admin.GPUClasses(ctx, 0)
		if err != nil {
			return false, nil
		}
		for _, c := range list.Classes {
			if c.Class == class {
				cs = c
			}
		}
		return cs.Capacity > 0, nil
	})
	if err != nil {
		t.Fatalf("class %s never showed capacity: %v", class, err)
	}
	return cs
}
