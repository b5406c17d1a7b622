package reservation_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/reservation"
)

const (
	waitFor = 60 * time.Second
	poll    = 100 * time.Millisecond
	prefix  = "galends/"
)

type podOpt func(*corev1.Pod)

func workspace(ws string) podOpt {
	return func(p *corev1.Pod) { p.Labels[reservation.WorkspaceLabel] = ws }
}

func annotate(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func onNode(name string) podOpt {
	return func(p *corev1.Pod) {
		if p.Spec.NodeSelector == nil {
			p.Spec.NodeSelector = map[string]string{}
		}
		p.Spec.NodeSelector["kubernetes.io/hostname"] = name
	}
}

// gpuPod is a pod as a user's manifest would make it: the class label, a
// workspace, and a GPU limit; no node selection or toleration (the webhook
// and the engine add those).
func gpuPod(name, class string, gpus int, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{reservation.ClassLabel: class, reservation.WorkspaceLabel: wsCourse}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "ucsdets/datahub-base-notebook:2026.4"}},
			TerminationGracePeriodSeconds: ptrInt64(0)},
	}
	if gpus > 0 {
		q := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{devcluster.ResourceGPU: q}
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func ptrInt64(v int64) *int64 { return &v }

func create(t *testing.T, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", p.Name, err)
	}
	return out
}

// waitEvent waits for a reservation event of reason about the pod and
// checks what every reservation event must carry.
func waitEvent(t *testing.T, ns, pod, reason string) *corev1.Event {
	t.Helper()
	var found *corev1.Event
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), poll, waitFor, true, func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String()})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for i := range list.Items {
			ev := &list.Items[i]
			seen = append(seen, ev.Source.Component+"/"+ev.Reason)
			if ev.Reason == reason && ev.Source.Component == reservation.Component {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event from %s about pod %s/%s; events: %v", reason, reservation.Component, ns, pod, seen)
	}
	if found.InvolvedObject.Kind != "Pod" || found.InvolvedObject.UID == "" {
		t.Errorf("%s: involvedObject %+v, want the pod with its UID", reason, found.InvolvedObject)
	}
	if len(found.Message) > 1024 || !strings.HasSuffix(strings.TrimSpace(found.Message), ".") && !strings.Contains(found.Message, "@") {
		t.Errorf("%s: message is not a full sentence of at most 1024 chars: %q", reason, found.Message)
	}
	return found
}

// wantEvent waits for the event and checks its type and message facts.
func wantEvent(t *testing.T, ns, pod, reason, typ string, facts ...string) *corev1.Event {
	t.Helper()
	ev := waitEvent(t, ns, pod, reason)
	if ev.Type != typ {
		t.Errorf("%s: type %s, want %s", reason, ev.Type, typ)
	}
	for _, f := range facts {
		if !strings.Contains(ev.Message, f) {
			t.Errorf("%s: message lacks %q: %s", reason, f, ev.Message)
		}
	}
	t.Logf("%s (%s): %s", reason, ev.Type, ev.Message)
	return ev
}

func getPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading pod %s: %v", name, err)
	}
	return p
}

func tolerated(p *corev1.Pod) bool {
	for _, tol := range p.Spec.Tolerations {
		if tol.Key == devcluster.ReservationTaintKey {
			return true
		}
	}
	return false
}

func admitted(p *corev1.Pod) bool {
	return tolerated(p) && p.Annotations[prefix+"booking-reference"] != ""
}

// wantHeld checks a waiting pod: Pending, not admitted, unbound.
func wantHeld(t *testing.T, ns, name string) {
	t.Helper()
	p := getPod(t, ns, name)
	if admitted(p) || tolerated(p) || p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		t.Errorf("pod %s should be held: tolerated=%v ref=%q node=%q phase=%s", name, tolerated(p),
			p.Annotations[prefix+"booking-reference"], p.Spec.NodeName, p.Status.Phase)
	}
}

// waitAdmitted waits until the engine admitted the pod and the scheduler
// bound it to a node of its class.
func waitAdmitted(t *testing.T, ns, name, class string) *corev1.Pod {
	t.Helper()
	p := env.WaitForPod(t, ns, name, "admitted and bound", func(p *corev1.Pod) bool { return admitted(p) && p.Spec.NodeName != "" })
	if !strings.HasPrefix(p.Spec.NodeName, "g-"+class+"-") {
		t.Errorf("pod %s bound to %s, want a node of class %s", name, p.Spec.NodeName, class)
	}
	return p
}

func waitGone(t *testing.T, ns, name string) { t.Helper(); env.WaitForPodGone(t, ns, name) }

// book creates a booking through the controller's admin side, as the
// admin API does.
func book(t testing.TB, owner, ws, class string, gpus int, start, end time.Time) reservation.Reservation {
	t.Helper()
	b, err := ctl.CreateBooking(context.Background(), reservation.Reservation{Owner: owner, Workspace: ws, Class: class, GPUs: gpus,
		Start: start.UTC().Truncate(time.Second), End: end.UTC().Truncate(time.Second)})
	if err != nil {
		t.Fatalf("booking: %v", err)
	}
	waitReservation(t, b.ID, func(r reservation.Reservation) bool { return true })
	return b
}

// waitReservation waits until the controller's cache shows reservation id
// in a state cond accepts.
func waitReservation(t testing.TB, id int64, cond func(reservation.Reservation) bool) reservation.Reservation {
	t.Helper()
	var last reservation.Reservation
	err := wait.PollUntilContextTimeout(context.Background(), poll, waitFor, true, func(context.Context) (bool, error) {
		for _, r := range ctl.Reservations() {
			if r.ID == id {
				last = r
				return cond(r), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("reservation %d never reached the wanted state; last %+v", id, last)
	}
	return last
}

// leasesOf returns the leases and best-effort records minted for a pod.
func leasesOf(uid string) []reservation.Reservation {
	var out []reservation.Reservation
	for _, r := range ctl.Reservations() {
		if string(r.PodUID) == uid {
			out = append(out, r)
		}
	}
	return out
}

// step moves the engine's clock; the controller's ticker fires on it.
func step(d time.Duration) { clk.Step(d) }

func ref(id int64) string { return fmt.Sprintf("res-%d", id) }
