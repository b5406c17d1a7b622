package reservation

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestPropertyInvariants drives the engine through random histories: pods
// arriving and ending, bookings made, cancelled and reassigned, nodes
// cordoned and failing, clock jumps, plans applied only in part, and engine
// restarts (a new Engine that knows only what the snapshot says). After
// every cycle:
//
//   - no booking holds more GPUs than it has;
//   - a class that admitted a pod holds no more GPUs than its nodes;
//   - no preempted pod was inside its guarantee (by an independent oracle);
//   - no pod has two active leases, and no cycle mints one for a pod that
//     has a lease.
func TestPropertyInvariants(t *testing.T) {
	runs, steps := 24, 150
	if testing.Short() {
		runs, steps = 8, 100
	}
	for seed := range uint64(runs) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { simulate(t, seed, steps) })
	}
}

var simUsers = []string{"alice", "bob", "carol", "dave"} // dave is no member of the course

type sim struct {
	t     *testing.T
	rng   *rand.Rand
	w     *world
	e     *Engine
	cfg   func(*Config)
	pods  int
	stats map[string]int
}

func simulate(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	bestEffort, headroom := rng.IntN(2) == 0, []int{0, 15, 34}[rng.IntN(3)]
	cfg := func(c *Config) {
		c.BestEffort, c.HeadroomPercent, c.Seed = bestEffort, ptr(headroom), seed
	}
	nodes := []*corev1.Node{
		newNode("gpu-s1", "small", 2+rng.IntN(3)), newNode("gpu-s2", "small", 2),
		newNode("gpu-m1", "medium", 2), newNode("gpu-m2", "medium", 2), newNode("gpu-m3", "medium", 4),
	}
	s := &sim{t: t, rng: rng, w: newWorld(t, t0.Add(-6*time.Hour), nodes...), cfg: cfg, stats: map[string]int{}}
	s.e = newEngine(t, cfg)
	for step := range steps {
		s.mutate()
		before := s.w.snapshot()
		plan := s.e.Decide(before)
		s.checkPlan(before, plan)
		s.applyPart(plan)
		s.checkWorld(plan)
		s.count(plan)
		switch r := rng.IntN(10); {
		case r < 2:
			s.w.step(0)
		case r < 8:
			s.w.step(time.Duration(1+rng.IntN(10)) * time.Minute)
		default:
			s.w.step(time.Duration(10+rng.IntN(50)) * time.Minute)
		}
		if t.Failed() {
			t.Fatalf("invariant broken at step %d (%v)", step, s.w.now)
		}
	}
	t.Logf("%v", s.stats)
	for _, k := range []string{"admitted", Preempted, "minted"} {
		if s.stats[k] == 0 {
			t.Logf("seed %d never %s a pod", seed, k) // coverage note, not a failure
		}
	}
}

func (s *sim) pick(n int) int { return s.rng.IntN(n) }

// mutate applies a few random changes to the world.
func (s *sim) mutate() {
	w, rng := s.w, s.rng
	for range 1 + rng.IntN(3) {
		s.pods++
		b := newPod(simUsers[s.pick(len(simUsers))], fmt.Sprintf("p%d", s.pods)).class([]string{"small", "medium", "medium", "Medium"}[s.pick(4)])
		if rng.IntN(12) > 0 {
			b.gpus(1 + rng.IntN(3))
		}
		switch rng.IntN(6) {
		case 0, 1, 2:
			b.course(course)
		case 3:
			b.course(noOD)
		case 4:
			b.course("UNKNOWN101")
		}
		if rng.IntN(4) == 0 {
			b.ann(AnnMinimumRuntime, fmt.Sprint([]int{600, 1800, 7200, -5}[rng.IntN(4)]))
		}
		if rng.IntN(6) == 0 {
			b.ann(AnnRuntimeGuarantee, "none")
		}
		if rng.IntN(15) == 0 {
			b.selector("kubernetes.io/hostname", w.nodes[s.pick(len(w.nodes))].Name)
		}
		if rng.IntN(3) > 0 {
			w.addPod(b.obj())
		}
	}
	if rng.IntN(3) == 0 {
		owner := simUsers[s.pick(3)]
		class := []string{"small", "medium"}[s.pick(2)]
		gpus := 1 + rng.IntN(3)
		start := w.now.Truncate(10 * time.Minute).Add(time.Duration(rng.IntN(16)-3) * 10 * time.Minute)
		ws := course
		if rng.IntN(5) == 0 {
			ws = noOD
		}
		length := time.Duration(1+rng.IntN(3)) * time.Hour
		id := w.book(owner, ws, class, gpus, start, start.Add(length))
		if rng.IntN(3) == 0 { // a back-to-back booking: a guarantee chain
			r := *w.reservation(id)
			w.book(r.Owner, r.Workspace, r.Class, r.GPUs, r.End, r.End.Add(time.Hour))
		}
	}
	if active := s.activeBookings(); len(active) > 0 {
		switch rng.IntN(20) {
		case 0:
			r := active[s.pick(len(active))]
			r.Status, r.CancelReason, r.CancelledAt = StatusCancelled, []CancelReason{CancelUser, CancelOther, CancelSuperseded}[s.pick(3)], w.now
		case 1:
			r := active[s.pick(len(active))]
			r.Owner = simUsers[s.pick(3)]
		}
	}
	for n := rng.IntN(3); n > 0 && len(w.pods) > 0; n-- {
		p := w.pods[s.pick(len(w.pods))].DeepCopy()
		if rng.IntN(2) == 0 {
			p.Status.Phase = corev1.PodSucceeded
		} else {
			p.DeletionTimestamp = ptr(metav1.NewTime(w.now))
		}
		w.replace(p)
	}
	if rng.IntN(25) == 0 {
		n := w.nodes[s.pick(len(w.nodes))]
		if rng.IntN(2) == 0 {
			n.Spec.Unschedulable = !n.Spec.Unschedulable
		} else {
			c := &n.Status.Conditions[0]
			c.Status = map[corev1.ConditionStatus]corev1.ConditionStatus{corev1.ConditionTrue: corev1.ConditionFalse, corev1.ConditionFalse: corev1.ConditionTrue}[c.Status]
		}
	}
	if rng.IntN(15) == 0 {
		s.e = newEngine(s.t, s.cfg) // restart: nothing but the snapshot survives
		s.stats["restarts"]++
	}
}

func (s *sim) activeBookings() []*Reservation {
	var out []*Reservation
	for i := range s.w.res {
		if r := &s.w.res[i]; r.Kind == KindBooking && r.Status == StatusActive && r.End.After(s.w.now) {
			out = append(out, r)
		}
	}
	return out
}

// applyPart applies the plan, or, now and then, only a prefix of it, as a
// controller that crashed half-way would.
func (s *sim) applyPart(plan Plan) {
	if s.rng.IntN(8) > 0 {
		s.w.apply(plan)
		return
	}
	s.stats["partial"]++
	cut := Plan{Now: plan.Now}
	switch s.rng.IntN(4) {
	case 3:
		cut.Admissions = plan.Admissions
		fallthrough
	case 2:
		cut.Mints = plan.Mints
		fallthrough
	case 1:
		cut.Cancels = plan.Cancels
		fallthrough
	case 0:
		cut.Evictions = plan.Evictions
	}
	s.w.apply(cut)
}

func (s *sim) count(plan Plan) {
	s.stats["admitted"] += len(plan.Admissions)
	s.stats["minted"] += len(plan.Mints)
	for _, ev := range plan.Evictions {
		s.stats[ev.Event.Reason]++
	}
}

// checkPlan checks a plan against the snapshot it was made from.
func (s *sim) checkPlan(snap Snapshot, plan Plan) {
	t := s.t
	activeLease := map[types.UID]int64{}
	for _, r := range snap.Reservations {
		if r.Kind != KindBooking && r.Status == StatusActive {
			activeLease[r.PodUID] = r.ID
		}
	}
	minted := map[types.UID]bool{}
	for _, m := range plan.Mints {
		uid := m.Reservation.PodUID
		if minted[uid] {
			t.Errorf("two mints for pod %s", uid)
		}
		minted[uid] = true
		if id, ok := activeLease[uid]; ok && id != m.Reservation.ID {
			t.Errorf("minted lease #%d for pod %s, which has lease #%d", m.Reservation.ID, uid, id)
		}
	}
	pods := map[types.UID]*corev1.Pod{}
	for _, p := range snap.Pods {
		pods[p.UID] = p
	}
	touched := map[types.UID]string{}
	for _, pp := range plan.Admissions {
		if touched[pp.Pod.UID] != "" {
			t.Errorf("pod %s admitted twice", pp.Pod.Name)
		}
		touched[pp.Pod.UID] = "admitted"
		if pods[pp.Pod.UID].Annotations[prefix+AnnBookingReference] != "" && slices.ContainsFunc(pods[pp.Pod.UID].Spec.Tolerations,
			func(tol corev1.Toleration) bool { return tol.Key == "gpu-class-reservation" }) {
			t.Errorf("pod %s admitted again", pp.Pod.Name)
		}
	}
	for _, pp := range plan.Updates {
		if len(pp.Events) > 0 {
			touched[pp.Pod.UID] = "relinked"
		}
	}
	for _, ev := range plan.Evictions {
		if what := touched[ev.Pod.UID]; what != "" {
			t.Errorf("pod %s both %s and evicted", ev.Pod.Name, what)
		}
		if ev.Event.Reason != Preempted {
			continue
		}
		until, resolved := oracleGuarantee(snap, pods[ev.Pod.UID])
		if resolved && snap.Now.Truncate(time.Second).Before(until) {
			t.Errorf("preempted %s inside its guarantee (until %v, now %v): %s", ev.Pod.Name, until, snap.Now, ev.Event.Message)
		}
	}
}

// oracleGuarantee computes a pod's guarantee from the snapshot the naive
// way (§3.1): its reservation's end, extended through back-to-back bookings
// of the same owner, class, GPU count and workspace; unresolved if the
// engine itself cancelled its reservation.
func oracleGuarantee(snap Snapshot, p *corev1.Pod) (time.Time, bool) {
	ref := parseRef(p.Annotations[prefix+AnnBookingReference])
	var r *Reservation
	for i := range snap.Reservations {
		if snap.Reservations[i].ID == ref {
			r = &snap.Reservations[i]
		}
	}
	if r == nil {
		return parseUTC(p.Annotations[prefix+AnnEnd])
	}
	switch {
	case r.Status == StatusCancelled && !r.CancelReason.byPeople():
		return time.Time{}, false
	case r.Kind == KindBestEffort:
		return r.Start, true
	}
	end := r.End
	for extended := true; extended; {
		extended = false
		for _, b := range snap.Reservations {
			if b.Kind == KindBooking && b.Status == StatusActive && b.Owner == r.Owner && b.Class == r.Class &&
				b.GPUs == r.GPUs && b.Workspace == r.Workspace && b.Start.Equal(end) && b.End.After(end) {
				end, extended = b.End, true
			}
		}
	}
	return end, true
}

// checkWorld checks the state after the plan was applied.
func (s *sim) checkWorld(plan Plan) {
	t, w := s.t, s.w
	live := func(p *corev1.Pod) bool {
		return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
	}
	admitted := func(p *corev1.Pod) bool {
		return p.Annotations[prefix+AnnBookingReference] != "" &&
			slices.ContainsFunc(p.Spec.Tolerations, func(tol corev1.Toleration) bool { return tol.Key == "gpu-class-reservation" })
	}
	occ := map[int64]int{}
	held := map[string]int{}
	counted := map[string]bool{}
	capacity := map[string]int{}
	for _, n := range w.nodes {
		if !n.Spec.Unschedulable && nodeReady(n) {
			counted[n.Name] = true
			capacity[n.Spec.Taints[0].Value] += int(n.Status.Allocatable.Name(GPUResource, "").Value())
		}
	}
	for _, p := range w.pods {
		if !live(p) || !admitted(p) {
			continue
		}
		occ[parseRef(p.Annotations[prefix+AnnBookingReference])] += PodGPUs(p)
		if p.Spec.NodeName == "" || counted[p.Spec.NodeName] {
			held[p.Labels[ClassLabel]] += PodGPUs(p)
		}
	}
	leases := map[types.UID]int{}
	for _, r := range w.res {
		if r.Kind == KindBooking {
			if occ[r.ID] > r.GPUs {
				t.Errorf("booking #%d holds %d GPUs of %d", r.ID, occ[r.ID], r.GPUs)
			}
		} else if r.Status == StatusActive {
			leases[r.PodUID]++
			if leases[r.PodUID] > 1 {
				t.Errorf("pod %s has %d active leases", r.PodUID, leases[r.PodUID])
			}
		}
	}
	for _, pp := range plan.Admissions {
		p := w.podByUID(pp.Pod.UID)
		if p == nil || !admitted(p) {
			continue // the patch was not applied
		}
		if class := p.Labels[ClassLabel]; held[class] > capacity[class] {
			t.Errorf("class %s holds %d GPUs of %d after admitting %s", class, held[class], capacity[class], p.Name)
		}
	}
}
