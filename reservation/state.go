package reservation

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podState is one managed pod (it carries a gpu-class label) as this cycle
// sees it, and what the cycle decided about it.
type podState struct {
	pod        *corev1.Pod
	ref        PodRef
	class      string
	gpus       int
	workspace  string
	wsSource   string
	live       bool // not terminal, not deleting
	admitted   bool // carries the class toleration and a booking-reference
	bypass     bool // carries the toleration without a booking-reference
	refID      int64
	admittedAt string    // its admitted-at annotation (sorts by time: UTC, fixed width)
	warnAt     time.Time // its termination-warning-at annotation, if it has one
	warned     bool
	usedIn     *classState // the class whose used count includes this pod
	onNode     *nodeState  // the counted node it is bound to

	res      *Reservation // the reservation it runs under (after relinks)
	held     bool         // counted in occ[res.ID]
	until    time.Time    // end of its guarantee
	resolved bool         // until is known
	stamp    bool         // (re)linked this cycle: annotations re-stamped
	gone     bool         // evicted this cycle
	warning  *warning
	events   []Event // written after its annotation update
}

func (p *podState) overstay(now time.Time) bool { return !p.resolved || !now.Before(p.until) }

func (p *podState) kind(k *annotationKeys) Kind {
	if p.res != nil {
		return p.res.Kind
	}
	return Kind(p.pod.Annotations[k.kind])
}

// classState is one GPU class's capacity and holdings this cycle.
type classState struct {
	cls      *GPUClass
	nodes    []*nodeState // counted nodes, by name
	capacity int          // Σ allocatable GPUs of counted nodes
	// used is the GPUs held: live pods bound to counted nodes plus admitted
	// live pods not yet bound. Pods on excluded nodes neither hold nor free.
	used     int
	bookings []*Reservation // active bookings, by start then ID
	admitted []*podState    // admitted live pods, in admission order
	paused   string         // why on-demand admission is paused, if it is
}

func (cs *classState) free() int { return cs.capacity - cs.used }

type claimKey struct{ owner, class, workspace string }

type chainKey struct {
	claimKey
	gpus  int
	start int64
}

// next is the booking a guarantee chain continues into after r: same
// owner, class, workspace and GPU count, starting when r ends.
func (c *cycle) next(r *Reservation) *Reservation {
	return c.follows[chainKey{claimKey{r.Owner, r.Class, r.Workspace}, r.GPUs, r.End.Unix()}]
}

type wsClass struct{ workspace, class string }

// cycle is the working state of one Decide call.
type cycle struct {
	e    *Engine
	now  time.Time
	plan Plan
	rng  *rand.Rand

	pods    []*podState // managed pods, by creation time then UID
	byUID   map[types.UID]*podState
	nodes   map[string]*nodeState
	classes map[string]*classState

	res      map[int64]*Reservation // working copies; cancellations marked here
	leases   []*Reservation         // active leases and best-effort records, by ID
	leaseOf  map[types.UID]*Reservation
	bookings map[claimKey][]*Reservation
	byOwner  map[string][]*Reservation
	follows  map[chainKey]*Reservation // the booking a guarantee chain continues into
	occ      map[int64]int             // GPUs of live pods under each reservation
	chained  map[int64]int             // GPUs that guarantee chains will carry into a future booking
	holders  map[int64][]*podState
	wsUsed   map[wsClass]int
	nextID   int64
	planned  map[int64]bool // leases this cycle mints: not yet in any snapshot
	paused   map[string]string
}

func (e *Engine) newCycle(now time.Time, snap *Snapshot) *cycle {
	c := &cycle{
		e: e, now: now, plan: Plan{Now: now},
		rng:      rand.New(rand.NewPCG(e.cfg.Seed, uint64(now.Unix()))),
		byUID:    make(map[types.UID]*podState, len(snap.Pods)),
		nodes:    make(map[string]*nodeState, len(snap.Nodes)),
		classes:  make(map[string]*classState, len(e.classes)),
		res:      make(map[int64]*Reservation, len(snap.Reservations)),
		leaseOf:  map[types.UID]*Reservation{},
		bookings: map[claimKey][]*Reservation{},
		byOwner:  map[string][]*Reservation{},
		follows:  map[chainKey]*Reservation{},
		occ:      map[int64]int{},
		chained:  map[int64]int{},
		holders:  map[int64][]*podState{},
		wsUsed:   map[wsClass]int{},
		nextID:   e.lastID,
		planned:  map[int64]bool{},
		paused:   snap.Paused,
	}
	for label, cls := range e.classes {
		c.classes[label] = &classState{cls: cls}
	}
	c.indexReservations(snap.Reservations)
	for _, n := range snap.Nodes {
		ns := newNodeState(n, e.cfg.TaintKey, e.classes)
		c.nodes[n.Name] = ns
		if ns.counted {
			cs := c.classes[ns.class]
			cs.nodes = append(cs.nodes, ns)
			cs.capacity += ns.gpus
		}
	}
	for _, cs := range c.classes {
		slices.SortFunc(cs.nodes, func(a, b *nodeState) int { return strings.Compare(a.node.Name, b.node.Name) })
	}
	c.indexPods(snap.Pods)
	for _, l := range e.minted {
		c.nextID = max(c.nextID, l.ID)
	}
	return c
}

func (c *cycle) indexReservations(all []Reservation) {
	copies := make([]Reservation, 0, len(all))
	for _, r := range all {
		if r.ID <= 0 || r.GPUs <= 0 || r.End.Before(r.Start) || (r.Kind == KindBooking && !r.End.After(r.Start)) {
			continue // malformed: no pod can be admitted under it
		}
		copies = append(copies, r)
	}
	slices.SortFunc(copies, func(a, b Reservation) int { return cmp.Compare(a.ID, b.ID) })
	for i := range copies {
		r := &copies[i]
		c.res[r.ID] = r
		c.nextID = max(c.nextID, r.ID)
		if !r.active() {
			continue
		}
		switch r.Kind {
		case KindBooking:
			k := claimKey{r.Owner, r.Class, r.Workspace}
			c.bookings[k] = append(c.bookings[k], r)
			c.byOwner[r.Owner] = append(c.byOwner[r.Owner], r)
			c.follows[chainKey{k, r.GPUs, r.Start.Unix()}] = r
			if cs := c.classes[r.Class]; cs != nil {
				cs.bookings = append(cs.bookings, r)
			}
		case KindOnDemand, KindBestEffort:
			if r.PodUID == "" {
				continue
			}
			if c.leaseOf[r.PodUID] != nil {
				// Never two leases for one pod: keep the first.
				c.cancel(r, CancelRevoked, 0)
				continue
			}
			c.leaseOf[r.PodUID] = r
			c.leases = append(c.leases, r)
		}
	}
	byStart := func(a, b *Reservation) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.ID, b.ID))
	}
	for _, l := range c.bookings {
		slices.SortFunc(l, byStart)
	}
	for _, l := range c.byOwner {
		slices.SortFunc(l, byStart)
	}
	for _, cs := range c.classes {
		slices.SortFunc(cs.bookings, byStart)
	}
}

func (c *cycle) indexPods(pods []*corev1.Pod) {
	k := &c.e.keys
	for _, pod := range pods {
		live := pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
		class := pod.Labels[ClassLabel]
		if !live && class == "" {
			continue
		}
		gpus := PodGPUs(pod)
		var onNode *nodeState
		if n := c.nodes[pod.Spec.NodeName]; live && n != nil && n.counted {
			onNode = n
			n.used += gpus
		}
		if class == "" {
			continue
		}
		p := &podState{pod: pod, ref: refOf(pod), class: class, gpus: gpus, live: live, onNode: onNode}
		p.workspace, p.wsSource = workspaceOf(pod, k)
		refVal, hasRef := pod.Annotations[k.ref]
		tolerated := c.tolerates(pod, class)
		p.admitted = hasRef && tolerated
		p.bypass = tolerated && !hasRef
		if p.admitted {
			p.refID = parseRef(refVal)
			c.nextID = max(c.nextID, p.refID)
			p.admittedAt = pod.Annotations[k.admittedAt]
			p.warnAt, p.warned = parseUTC(pod.Annotations[k.warnAt])
		}
		switch {
		case onNode != nil:
			p.usedIn = c.classes[onNode.class]
		case live && p.admitted && pod.Spec.NodeName == "":
			p.usedIn = c.classes[class]
		}
		if p.usedIn != nil && onNode == nil {
			p.usedIn.used += gpus
		}
		c.pods = append(c.pods, p)
		c.byUID[pod.UID] = p
	}
	for _, cs := range c.classes {
		for _, n := range cs.nodes {
			cs.used += n.used
		}
	}
	slices.SortFunc(c.pods, func(a, b *podState) int {
		return cmp.Or(a.pod.CreationTimestamp.Compare(b.pod.CreationTimestamp.Time), strings.Compare(string(a.ref.UID), string(b.ref.UID)))
	})
}

// workspaceOf is the workspace a pod is charged to, and where that came
// from (for messages).
func workspaceOf(pod *corev1.Pod, k *annotationKeys) (string, string) {
	if ws := pod.Labels[WorkspaceLabel]; ws != "" {
		return ws, "from its dsmlp/course label"
	}
	if ws := pod.Annotations[k.usageGroup]; ws != "" {
		return ws, "from its usage-group annotation"
	}
	return OrgOnDemand, "the default for pods without a dsmlp/course label"
}

// tolerates reports whether the pod tolerates the class's reservation taint.
func (c *cycle) tolerates(pod *corev1.Pod, class string) bool {
	for _, t := range pod.Spec.Tolerations {
		if t.Key == c.e.cfg.TaintKey && (t.Effect == "" || t.Effect == corev1.TaintEffectNoSchedule) &&
			(t.Operator == corev1.TolerationOpExists || t.Value == class) {
			return true
		}
	}
	return false
}

func (c *cycle) toleration(class string) corev1.Toleration {
	return corev1.Toleration{Key: c.e.cfg.TaintKey, Operator: corev1.TolerationOpEqual, Value: class, Effect: corev1.TaintEffectNoSchedule}
}

// hold counts p's GPUs under r.
func (c *cycle) hold(p *podState, r *Reservation) {
	c.unhold(p)
	p.res, p.held = r, true
	c.occ[r.ID] += p.gpus
	c.holders[r.ID] = append(c.holders[r.ID], p)
	c.wsUsed[wsClass{r.Workspace, p.class}] += p.gpus
}

func (c *cycle) unhold(p *podState) {
	if !p.held {
		return
	}
	c.occ[p.res.ID] -= p.gpus
	c.wsUsed[wsClass{p.res.Workspace, p.class}] -= p.gpus
	p.held = false
}

// release forgets everything p holds: it is being deleted.
func (c *cycle) release(p *podState) {
	c.unhold(p)
	if p.usedIn != nil {
		p.usedIn.used -= p.gpus
		p.usedIn = nil
	}
	if p.onNode != nil {
		p.onNode.used -= p.gpus
		p.onNode = nil
	}
}

// room is the GPUs r can still take.
func (c *cycle) room(r *Reservation) int { return r.GPUs - c.occ[r.ID] }

// chainEnd is the guarantee a pod under r has (§3.1): r's end, extended
// through each booking of the same owner, class, GPU count and workspace
// that starts exactly when the previous one ends.
func (c *cycle) chainEnd(r *Reservation) time.Time {
	if r.Kind == KindBestEffort {
		return r.Start
	}
	end := r.End
	for range len(c.res) { // bounded: each step moves to a later booking
		next := c.next(r)
		if next == nil || !next.End.After(r.End) {
			break
		}
		r, end = next, next.End
	}
	return end
}

// cancel marks r cancelled in the working copy and plans the cancellation,
// settling a lease's charge.
func (c *cycle) cancel(r *Reservation, reason CancelReason, supersededBy int64) {
	if !r.active() {
		return
	}
	r.Status, r.CancelReason, r.CancelledAt, r.SupersededBy = StatusCancelled, reason, c.now, supersededBy
	if c.leaseOf[r.PodUID] == r {
		delete(c.leaseOf, r.PodUID)
	}
	cn := Cancel{ReservationID: r.ID, Reason: reason, SupersededBy: supersededBy}
	if r.Kind == KindOnDemand {
		end := r.End
		if c.now.Before(end) {
			end = c.now
		}
		used := end.Sub(r.Start)
		cn.Charge = &Charge{Workspace: r.Workspace, Owner: r.Owner, ReservationID: r.ID, Kind: r.Kind,
			GPUHours: gpuHours(r.GPUs, max(used, 0)) - gpuHours(r.GPUs, r.End.Sub(r.Start)), Reason: ChargeSettled}
	}
	c.plan.Cancels = append(c.plan.Cancels, cn)
}

func gpuHours(gpus int, d time.Duration) float64 { return float64(gpus) * d.Hours() }

// evict plans a stop event and the pod's deletion.
func (c *cycle) evict(p *podState, reason string, d *eventData) {
	p.gone = true
	c.release(p)
	c.plan.Evictions = append(c.plan.Evictions, Eviction{Pod: p.ref, Event: c.e.msg.render(p.ref, reason, d)})
}

// emit writes a waiting event through the throttle; the message is only
// rendered when it is written.
func (c *cycle) emit(p *podState, reason string, d *eventData) {
	d.Contact = c.e.msg.contact
	if c.e.throttle.allow(p.ref.UID, eventTable[reason].topic, reason, d.fingerprint(c.e.msg.seed, reason), c.now) {
		c.plan.Events = append(c.plan.Events, c.e.msg.render(p.ref, reason, d))
	}
}

// unclaimed is the GPUs bookings of the class active at t hold but no pod
// uses or will carry into them: capacity they may claim at any moment.
func (c *cycle) unclaimed(cs *classState, t time.Time) int {
	n := 0
	for _, b := range cs.bookings {
		if !b.Start.After(t) && t.Before(b.End) && b.active() {
			n += max(0, b.GPUs-c.occ[b.ID]-c.chained[b.ID])
		}
	}
	return n
}
