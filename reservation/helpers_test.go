package reservation

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// t0 is 09:00 Pacific (PDT) on a weekday.
var t0 = time.Date(2026, 9, 23, 16, 0, 0, 0, time.UTC)

const (
	course = "DSC180A_FA26_A00"
	noOD   = "NOOD" // a workspace without on-demand use
	prefix = "galends/"
)

func ptr[T any](v T) *T { return &v }

func testConfig() Config {
	return Config{
		Classes: []GPUClass{
			{Label: "small", DisplayName: "Small (12 GB)", NodeSelector: map[string]string{"gpu-type": "small"}},
			{Label: "medium", DisplayName: "Medium (24 GB)", NodeSelector: map[string]string{"gpu-type": "medium"}},
		},
		Workspaces: []Workspace{
			{Name: course, Members: []string{"alice", "bob", "carol"}, Caps: map[string]int{"medium": 4}},
			{Name: noOD, OnDemand: ptr(false)},
		},
		Seed: 1,
	}
}

func newEngine(t testing.TB, mutate ...func(*Config)) *Engine {
	t.Helper()
	cfg := testConfig()
	for _, m := range mutate {
		m(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

// podBuilder builds pods as the launcher or a manifest would create them.
type podBuilder struct{ p *corev1.Pod }

func newPod(ns, name string) *podBuilder {
	return &podBuilder{&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID(ns + "-" + name + "-uid"), ResourceVersion: "1",
			Labels: map[string]string{}, Annotations: map[string]string{},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "scipy-ml-notebook"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/3 nodes are available: 3 node(s) had untolerated taint(s).",
		}}},
	}}
}

// class sets the gpu-class label and, as the admission webhook does, the
// class's node selection.
func (b *podBuilder) class(c string) *podBuilder {
	b.p.Labels[ClassLabel] = c
	if b.p.Spec.NodeSelector == nil {
		b.p.Spec.NodeSelector = map[string]string{}
	}
	b.p.Spec.NodeSelector["gpu-type"] = c
	return b
}

func (b *podBuilder) gpus(n int) *podBuilder {
	q := resource.MustParse(fmt.Sprint(n))
	b.p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{GPUResource: q}
	return b
}

func (b *podBuilder) course(ws string) *podBuilder {
	b.p.Labels[WorkspaceLabel] = ws
	return b
}

func (b *podBuilder) ann(key, v string) *podBuilder {
	b.p.Annotations[prefix+key] = v
	return b
}

func (b *podBuilder) created(t time.Time) *podBuilder {
	b.p.CreationTimestamp = metav1.NewTime(t)
	return b
}

func (b *podBuilder) selector(k, v string) *podBuilder {
	if b.p.Spec.NodeSelector == nil {
		b.p.Spec.NodeSelector = map[string]string{}
	}
	b.p.Spec.NodeSelector[k] = v
	return b
}

func (b *podBuilder) obj() *corev1.Pod { return b.p }

func newNode(name, class string, gpus int) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"gpu-type": class, "kubernetes.io/hostname": name}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "gpu-class-reservation", Value: class, Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{GPUResource: resource.MustParse(fmt.Sprint(gpus))},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

func booking(id int64, owner, ws, class string, gpus int, start, end time.Time) Reservation {
	return Reservation{ID: id, Kind: KindBooking, Owner: owner, Workspace: ws, Class: class, GPUs: gpus,
		Start: start, End: end, Status: StatusActive}
}

// world is a fake cluster and reservation store that applies plans the way
// the controller will: merge patches with their preconditions, events
// before deletes, idempotent lease creates.
type world struct {
	t       testing.TB
	now     time.Time
	pods    []*corev1.Pod
	nodes   []*corev1.Node
	res     []Reservation
	events  []Event
	charges map[string]float64
	rv      int
}

func newWorld(t testing.TB, now time.Time, nodes ...*corev1.Node) *world {
	return &world{t: t, now: now, nodes: nodes, charges: map[string]float64{}}
}

func (w *world) snapshot() Snapshot {
	return Snapshot{Now: w.now, Pods: slices.Clone(w.pods), Nodes: slices.Clone(w.nodes), Reservations: slices.Clone(w.res)}
}

func (w *world) addPod(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	if p.CreationTimestamp.IsZero() {
		p.CreationTimestamp = metav1.NewTime(w.now)
	}
	w.pods = append(w.pods, p)
	return p
}

// addRes adds reservations to the store, which keeps IDs unique.
func (w *world) addRes(rs ...Reservation) {
	w.t.Helper()
	for _, r := range rs {
		if w.reservation(r.ID) != nil {
			w.t.Fatalf("reservation ID %d already taken", r.ID)
		}
		w.res = append(w.res, r)
	}
}

// book adds a booking with the store's next ID, as a booking made while
// the engine runs would get.
func (w *world) book(owner, ws, class string, gpus int, start, end time.Time) int64 {
	id := int64(1)
	for _, r := range w.res {
		id = max(id, r.ID+1)
	}
	w.addRes(booking(id, owner, ws, class, gpus, start, end))
	return id
}

func (w *world) pod(ns, name string) *corev1.Pod {
	for _, p := range w.pods {
		if p.Namespace == ns && p.Name == name {
			return p
		}
	}
	return nil
}

func (w *world) reservation(id int64) *Reservation {
	for i := range w.res {
		if w.res[i].ID == id {
			return &w.res[i]
		}
	}
	return nil
}

// decide runs the engine on the world and applies the plan.
func (w *world) decide(e *Engine) Plan {
	plan := e.Decide(w.snapshot())
	w.apply(plan)
	return plan
}

func (w *world) apply(plan Plan) {
	w.t.Helper()
	for _, ev := range plan.Evictions {
		w.events = append(w.events, ev.Event)
		if p := w.podByUID(ev.Pod.UID); p != nil {
			q := p.DeepCopy()
			q.DeletionTimestamp = ptr(metav1.NewTime(w.now))
			w.replace(q)
		}
	}
	for _, cn := range plan.Cancels {
		r := w.reservation(cn.ReservationID)
		if r == nil || r.Status == StatusCancelled {
			continue
		}
		r.Status, r.CancelReason, r.CancelledAt, r.SupersededBy = StatusCancelled, cn.Reason, w.now, cn.SupersededBy
		if cn.Charge != nil {
			w.charges[cn.Charge.Workspace] += cn.Charge.GPUHours
		}
	}
	for _, m := range plan.Mints {
		if slices.ContainsFunc(w.res, func(r Reservation) bool { return r.PodUID == m.Reservation.PodUID && r.Status == StatusActive }) {
			continue // a retry: the store returns the existing lease
		}
		if w.reservation(m.Reservation.ID) != nil {
			w.t.Fatalf("mint of lease #%d: ID already taken", m.Reservation.ID)
		}
		w.res = append(w.res, m.Reservation)
		w.charges[m.Charge.Workspace] += m.Charge.GPUHours
	}
	for _, pp := range append(slices.Clone(plan.Admissions), plan.Updates...) {
		if w.patch(pp) {
			w.events = append(w.events, pp.Events...)
		}
	}
	w.events = append(w.events, plan.Events...)
}

func (w *world) podByUID(uid types.UID) *corev1.Pod {
	for _, p := range w.pods {
		if p.UID == uid {
			return p
		}
	}
	return nil
}

func (w *world) replace(q *corev1.Pod) {
	for i, p := range w.pods {
		if p.UID == q.UID {
			w.pods[i] = q
		}
	}
}

// patch applies a PodPatch as the API server would a merge patch.
func (w *world) patch(pp PodPatch) bool {
	w.t.Helper()
	p := w.podByUID(pp.Pod.UID)
	if p == nil {
		return false
	}
	body, err := pp.MergePatch()
	if err != nil {
		w.t.Fatalf("MergePatch: %v", err)
	}
	var patch map[string]any
	if err := json.Unmarshal(body, &patch); err != nil {
		w.t.Fatal(err)
	}
	meta := patch["metadata"].(map[string]any)
	if meta["uid"] != string(p.UID) {
		w.t.Fatalf("patch uid %v for pod %s", meta["uid"], p.UID)
	}
	if rv, ok := meta["resourceVersion"]; ok && rv != p.ResourceVersion {
		return false // conflict: retried next cycle
	}
	orig, _ := json.Marshal(p)
	var doc map[string]any
	_ = json.Unmarshal(orig, &doc)
	merged, _ := json.Marshal(mergePatch(doc, patch))
	var q corev1.Pod
	if err := json.Unmarshal(merged, &q); err != nil {
		w.t.Fatalf("patched pod: %v", err)
	}
	w.rv++
	q.ResourceVersion = fmt.Sprint(1000 + w.rv)
	w.replace(&q)
	return true
}

// mergePatch is RFC 7386.
func mergePatch(doc, patch map[string]any) map[string]any {
	if doc == nil {
		doc = map[string]any{}
	}
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			delete(doc, k)
		case map[string]any:
			dv, _ := doc[k].(map[string]any)
			doc[k] = mergePatch(dv, pv)
		default:
			doc[k] = v
		}
	}
	return doc
}

// step advances the clock, lets deleted pods go and has the "scheduler"
// bind admitted pods to a node of their class with room.
func (w *world) step(d time.Duration) {
	w.now = w.now.Add(d)
	// Deleted pods go; so do stopped ones, as the poll package deletes them.
	w.pods = slices.DeleteFunc(w.pods, func(p *corev1.Pod) bool {
		return p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	used := map[string]int{}
	for _, p := range w.pods {
		if p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			used[p.Spec.NodeName] += PodGPUs(p)
		}
	}
	for i, p := range w.pods {
		if p.Spec.NodeName != "" || p.Annotations[prefix+AnnBookingReference] == "" || p.Status.Phase != corev1.PodPending {
			continue
		}
		class := p.Labels[ClassLabel]
		for _, n := range w.nodes {
			free := int(n.Status.Allocatable.Name(GPUResource, resource.DecimalSI).Value()) - used[n.Name]
			if n.Spec.Taints[0].Value != class || n.Spec.Unschedulable || !nodeReady(n) || free < PodGPUs(p) ||
				!selectorMatches(p.Spec.NodeSelector, n) {
				continue
			}
			q := p.DeepCopy()
			q.Spec.NodeName = n.Name
			q.Status.Phase = corev1.PodRunning
			q.Status.Conditions = nil
			w.pods[i] = q
			used[n.Name] += PodGPUs(p)
			break
		}
	}
}

// allEvents lists every event in a plan, in the order they are written.
func allEvents(plan Plan) []Event {
	var out []Event
	for _, ev := range plan.Evictions {
		out = append(out, ev.Event)
	}
	for _, pp := range append(slices.Clone(plan.Admissions), plan.Updates...) {
		out = append(out, pp.Events...)
	}
	return append(out, plan.Events...)
}

func eventsFor(evs []Event, pod string) []Event {
	var out []Event
	for _, ev := range evs {
		if ev.Pod.Name == pod {
			out = append(out, ev)
		}
	}
	return out
}

func reasons(evs []Event) string {
	var rs []string
	for _, ev := range evs {
		rs = append(rs, ev.Reason)
	}
	return strings.Join(rs, ",")
}
