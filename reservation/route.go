package reservation

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// maxRuntime bounds minimum-runtime-seconds: a longer value is treated as
// invalid rather than minting a lease for years.
const maxRuntime = 31 * 24 * time.Hour

// route decides every waiting pod (§3.3): first the pods a booking within
// the claim horizon can take (reserved path), then the rest in creation
// order: a full booking, a lease, or the reason nothing admits them.
func (c *cycle) route() {
	horizon := c.now.Add(c.e.cfg.ClaimHorizon.Duration)
	var rest []*podState
	for _, p := range c.pods {
		if !p.live || p.admitted || p.bypass {
			continue
		}
		cs := c.classes[p.class]
		switch {
		case cs == nil:
			c.emit(p, UnknownGpuClass, &eventData{Class: clean(p.class), Known: c.e.classNames})
			continue
		case p.gpus == 0:
			c.emit(p, NoGpuRequest, &eventData{Class: p.class})
			continue
		}
		b := c.pickBooking(c.claimable(p), func(b *Reservation) bool {
			return b.End.After(c.now) && !b.Start.After(horizon) && c.room(b) >= p.gpus
		})
		switch {
		case b == nil:
			rest = append(rest, p)
		case b.openAt(c.now) && cs.used+p.gpus <= cs.capacity:
			c.admit(p, b)
		case b.openAt(c.now):
			// Held for this pod; the sweep frees the class's GPUs.
			c.emit(p, WaitingForReservation, &eventData{Res: viewOf(b), Class: p.class, Freeing: true})
		default:
			d := &eventData{Res: viewOf(b), Class: p.class}
			if ok, why := c.leaseEligible(p); !ok {
				d.Why = why
			}
			c.emit(p, WaitingForReservation, d)
		}
	}
	for _, p := range rest {
		c.routeRest(p, horizon)
	}
}

func (c *cycle) claimable(p *podState) []*Reservation {
	return c.bookings[claimKey{p.ref.Namespace, p.class, p.workspace}]
}

// routeRest handles a pod no booking can take now (route steps 2–4).
func (c *cycle) routeRest(p *podState, horizon time.Time) {
	eligible, why := c.leaseEligible(p)
	list := c.claimable(p)
	// A booking within the horizon that could hold the pod is full: wait
	// for it, falling back to a lease after FullFallback if allowed.
	if full := c.pickBooking(list, func(b *Reservation) bool {
		return b.End.After(c.now) && !b.Start.After(horizon) && b.GPUs >= p.gpus
	}); full != nil {
		fallback := later(full.Start, p.pod.CreationTimestamp.Time).Add(c.e.cfg.FullFallback.Duration)
		if !eligible || c.now.Before(fallback) {
			d := &eventData{Res: viewOf(full), Class: p.class, Short: p.gpus - c.room(full)}
			d.Holders, d.MoreHolders = c.holderNames(full)
			if eligible {
				d.FallbackAt = fallback
			} else {
				d.Why = why
			}
			c.emit(p, ReservationFull, d)
			return
		}
	}
	if !eligible {
		c.explainIneligible(p, list, why)
		return
	}
	c.leasePath(p)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// explainIneligible says why a pod that cannot go on demand waits: for a
// later booking, on one too small, or for nothing at all.
func (c *cycle) explainIneligible(p *podState, list []*Reservation, why []string) {
	if b := c.pickBooking(list, func(b *Reservation) bool { return b.End.After(c.now) && b.GPUs >= p.gpus }); b != nil {
		c.emit(p, WaitingForReservation, &eventData{Res: viewOf(b), Class: p.class, Why: why})
		return
	}
	var largest *Reservation
	for _, b := range list {
		if b.active() && b.End.After(c.now) && (largest == nil || b.GPUs > largest.GPUs) {
			largest = b
		}
	}
	if largest != nil {
		c.emit(p, ReservationTooSmall, &eventData{GPUs: p.gpus, Res: viewOf(largest), Class: p.class, Why: why})
		return
	}
	c.emit(p, NoReservation, &eventData{User: clean(p.ref.Namespace), Class: p.class, Workspace: clean(p.workspace),
		Why: why, NearMiss: c.nearMisses(p, true)})
}

// leaseEligible reports whether the pod may go on demand at all, and why
// not (every reason).
func (c *cycle) leaseEligible(p *podState) (bool, []string) {
	var why []string
	if !*c.e.cfg.OnDemand {
		why = append(why, "on-demand GPU admission is turned off")
	}
	if cls := c.e.classes[p.class]; !*cls.OnDemand {
		why = append(why, "on-demand admission is not offered for gpu-class "+p.class)
	}
	if ws := c.e.workspaces[p.workspace]; ws != nil && !*ws.OnDemand {
		why = append(why, "workspace "+clean(p.workspace)+" does not allow on-demand use")
	}
	return len(why) == 0, why
}

// leasePath runs the guards and the lease request for a lease-eligible
// pod (route step 2), in the order of §1.5: scheduler verdict, class with
// no node, node placement, class pauses, then the request itself.
func (c *cycle) leasePath(p *podState) {
	cs := c.classes[p.class]
	runtime, bestEffort := c.leaseInputs(p)
	if l := c.existingLease(p); l != nil {
		c.admitExisting(p, cs, l)
		return
	}
	if *c.e.cfg.WaitForScheduler && !c.gated(p.pod) {
		if ruled, unfixable := c.schedulerVerdict(p.pod); !ruled || unfixable {
			return // no event: the scheduler has not ruled, or no lease fixes it
		}
	}
	if len(cs.nodes) == 0 {
		c.emit(p, OnDemandAdmissionPaused, &eventData{Class: p.class, Cause: "no node of this class is schedulable"})
		return
	}
	pl := placementOf(p.pod, cs.cls)
	allowed, roomy := 0, false
	for _, n := range cs.nodes {
		if pl.allows(n.node) {
			allowed++
			roomy = roomy || n.free() >= p.gpus
		}
	}
	if allowed == 0 {
		c.emit(p, NoMatchingNode, &eventData{Selector: pl.describe(), Nodes: len(cs.nodes), Class: p.class, OtherClass: c.otherClass(p, pl)})
		return
	}
	if pl.hasOwn() && !roomy {
		c.emit(p, WaitingForNode, &eventData{Class: p.class, Selector: pl.describe(), GPUs: p.gpus})
		return
	}
	if cs.paused != "" {
		c.emit(p, OnDemandAdmissionPaused, &eventData{Class: p.class, Cause: cs.paused})
		return
	}
	ws := c.e.workspaces[p.workspace]
	if ws == nil {
		c.emit(p, OnDemandLeaseRejected, &eventData{GPUs: p.gpus, Class: p.class,
			Denial: fmt.Sprintf("Workspace '%s' is not known to the reservation service.", clean(p.workspace)),
			User:   clean(p.ref.Namespace), Workspace: clean(p.workspace), WorkspaceSource: p.wsSource,
			NearMiss: c.nearMisses(p, false)})
		return
	}
	length := runtime + c.e.cfg.LeaseBuffer.Duration
	if d := c.policy(p, ws, cs, length, bestEffort); d != nil {
		c.emit(p, OnDemandLeaseDenied, d)
		return
	}
	if !roomy {
		return // no event: the class has room, but no single node holds the pod
	}
	c.grant(p, length, bestEffort)
}

// leaseInputs reads the annotations that size a lease, reporting the one
// it ignores (the runtime-guarantee problem first: it changes the charge).
func (c *cycle) leaseInputs(p *podState) (time.Duration, bool) {
	k, cfg := &c.e.keys, &c.e.cfg
	runtime := cfg.DefaultRuntime.Duration
	var ignored *eventData
	if v, ok := p.pod.Annotations[k.minRuntime]; ok {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n <= 0 || time.Duration(n)*time.Second > maxRuntime {
			ignored = &eventData{Key: k.minRuntime, Value: clean(v), Because: "it must be a positive whole number of seconds, at most " + strconv.Itoa(int(maxRuntime/time.Second)),
				Instead: fmt.Sprintf("The default runtime of %s is used, so the pod's on-demand lease lasts %s.",
					formatDuration(runtime), formatDuration(runtime+cfg.LeaseBuffer.Duration))}
		} else {
			runtime = time.Duration(n) * time.Second
		}
	}
	bestEffort := false
	if v, ok := p.pod.Annotations[k.guarantee]; ok {
		instead := "The pod will be admitted on an ordinary on-demand lease and charged for it."
		switch {
		case v == "none" && cfg.BestEffort:
			bestEffort = true
		case v == "none":
			ignored = &eventData{Key: k.guarantee, Value: v, Because: "best-effort admission is not enabled on this cluster", Instead: instead}
		default:
			ignored = &eventData{Key: k.guarantee, Value: clean(v), Because: `the only value understood is "none"`, Instead: instead}
		}
	}
	if ignored != nil {
		c.emit(p, AnnotationIgnored, ignored)
	}
	return runtime, bestEffort
}

// existingLease is the lease already minted for this pod, found by its
// UID: in the snapshot, or planned by this engine and not yet visible.
func (c *cycle) existingLease(p *podState) *Reservation {
	if l := c.leaseOf[p.ref.UID]; l != nil {
		return l
	}
	l, ok := c.e.minted[p.ref.UID]
	if !ok {
		return nil
	}
	if other := c.res[l.ID]; other != nil {
		if other.PodUID != p.ref.UID {
			// The ID went to another record, so the create never happened:
			// mint afresh.
			delete(c.e.minted, p.ref.UID)
		}
		return nil
	}
	lr := l
	c.res[l.ID], c.leaseOf[p.ref.UID], c.planned[l.ID] = &lr, &lr, true
	c.plan.Mints = append(c.plan.Mints, Mint{Reservation: l, Charge: grantCharge(&l)})
	return &lr
}

// admitExisting admits a pod under the lease minted for it earlier (its
// admission did not land), or revokes a lease that has run out meanwhile.
func (c *cycle) admitExisting(p *podState, cs *classState, l *Reservation) {
	if l.Kind == KindOnDemand && !c.now.Before(l.End) {
		c.cancel(l, CancelRevoked, 0)
		return
	}
	if cs.used+p.gpus <= cs.capacity {
		c.admit(p, l)
	}
}

// schedulerVerdict reports whether kube-scheduler has ruled the pod
// unschedulable, and whether for a shortage no lease fixes.
func (c *cycle) schedulerVerdict(pod *corev1.Pod) (ruled, unfixable bool) {
	for _, cond := range pod.Status.Conditions {
		if cond.Type != corev1.PodScheduled || cond.Status != corev1.ConditionFalse || cond.Reason != corev1.PodReasonUnschedulable {
			continue
		}
		for _, s := range c.e.cfg.UnfixableShortages {
			if strings.Contains(cond.Message, s) {
				return true, true
			}
		}
		return true, false
	}
	return false, false
}

// gated reports whether the pod carries the engine's scheduling gate: the
// scheduler never tries such a pod, so there is no verdict to wait for.
func (c *cycle) gated(pod *corev1.Pod) bool {
	g := c.e.cfg.SchedulingGate
	return g != "" && slices.ContainsFunc(pod.Spec.SchedulingGates, func(s corev1.PodSchedulingGate) bool { return s.Name == g })
}

// otherClass names a class whose nodes the pod's own constraint matches.
func (c *cycle) otherClass(p *podState, pl placement) string {
	if !pl.hasOwn() {
		return ""
	}
	for _, name := range c.e.classNames {
		if name == p.class {
			continue
		}
		for _, n := range c.classes[name].nodes {
			if pl.allowsOwn(n.node) {
				return name
			}
		}
	}
	return ""
}

// Denial endings (§3.5 #4).
const (
	endRetry = "retry"
	endClear = "clear"
	endNever = "never"
)

// policy checks a lease request against the workspace's rules and the
// class's capacity, structural refusals first; nil means granted.
func (c *cycle) policy(p *podState, ws *Workspace, cs *classState, length time.Duration, bestEffort bool) *eventData {
	deny := func(ending, format string, args ...any) *eventData {
		return &eventData{GPUs: p.gpus, Class: p.class, Denial: fmt.Sprintf(format, args...), Ending: ending}
	}
	name, user := clean(ws.Name), clean(p.ref.Namespace)
	if len(ws.Members) > 0 && !slices.Contains(ws.Members, p.ref.Namespace) {
		return deny(endNever, "User '%s' is not a member of workspace '%s'.", user, name)
	}
	if len(ws.Classes) > 0 && !slices.Contains(ws.Classes, p.class) {
		return deny(endNever, "GPU class %s is not granted to workspace '%s'.", p.class, name)
	}
	ceiling, capped := ws.Caps[p.class]
	if capped && p.gpus > ceiling {
		return deny(endNever, "Exceeds the limit of %d GPU(s) of class %s that workspace '%s' may hold.", ceiling, p.class, name)
	}
	if ws.ActiveUntil != nil && !c.now.Before(ws.ActiveUntil.Time) {
		return deny(endNever, "Workspace '%s' was active until %s.", name, c.e.msg.formatTime(ws.ActiveUntil.Time))
	}
	if ws.ActiveFrom != nil && c.now.Before(ws.ActiveFrom.Time) {
		d := deny(endClear, "Workspace '%s' is not active yet.", name)
		d.ClearBy = ws.ActiveFrom.Time
		return d
	}
	if limit := ws.MaxLease.Duration; !bestEffort && limit > 0 && length > limit {
		return deny(endNever, "This lease runs %s but workspace '%s' limits a single reservation to %s.",
			formatDuration(length), name, formatDuration(limit))
	}
	if capped {
		if held := c.wsUsed[wsClass{ws.Name, p.class}]; held+p.gpus > ceiling {
			return deny(endRetry, "Only %d GPU(s) of class %s are available to workspace '%s' (its ceiling is %d).",
				max(0, ceiling-held), p.class, name, ceiling)
		}
	}
	if avail := cs.free() - c.unclaimed(cs, c.now); avail < p.gpus {
		return deny(endRetry, "Only %d GPU(s) of class %s are free for on-demand use.", max(0, avail), p.class)
	}
	if bestEffort {
		return nil
	}
	// A lease is guaranteed for its whole length and never preempts: the
	// GPUs must stay free past every booking that starts during it.
	end := c.now.Add(length)
	var last time.Time
	for _, b := range cs.bookings { // by start: each distinct start once
		if !b.active() || !b.Start.After(c.now) || !b.Start.Before(end) || b.Start.Equal(last) {
			continue
		}
		last = b.Start
		if avail := cs.capacity - c.guaranteedAt(cs, b.Start) - c.unclaimed(cs, b.Start); avail < p.gpus {
			return deny(endRetry, "Only %d GPU(s) of class %s stay free for the whole lease: reservations starting %s hold the rest.",
				max(0, avail), p.class, c.e.msg.formatTime(b.Start))
		}
	}
	return nil
}

// guaranteedAt is the GPUs of admitted pods of the class still inside
// their guarantee at t: capacity nothing may take from them.
func (c *cycle) guaranteedAt(cs *classState, t time.Time) int {
	n := 0
	for _, p := range cs.admitted {
		if !p.gone && p.resolved && p.until.After(t) {
			n += p.gpus
		}
	}
	return n
}

// grant mints a lease (or best-effort record) for the pod and admits it.
func (c *cycle) grant(p *podState, length time.Duration, bestEffort bool) {
	c.nextID++
	r := Reservation{ID: c.nextID, Kind: KindOnDemand, Owner: p.ref.Namespace, Workspace: p.workspace, Class: p.class,
		GPUs: p.gpus, Start: c.now, End: c.now.Add(length), Status: StatusActive, PodUID: p.ref.UID}
	if bestEffort {
		r.Kind, r.End = KindBestEffort, c.now
	}
	c.e.minted[p.ref.UID] = r
	lr := r
	c.res[r.ID], c.leaseOf[p.ref.UID], c.planned[r.ID] = &lr, &lr, true
	c.plan.Mints = append(c.plan.Mints, Mint{Reservation: r, Charge: grantCharge(&r)})
	c.admit(p, &lr)
}

func grantCharge(r *Reservation) Charge {
	h := 0.0
	if r.Kind == KindOnDemand {
		h = gpuHours(r.GPUs, r.End.Sub(r.Start))
	}
	return Charge{Workspace: r.Workspace, Owner: r.Owner, ReservationID: r.ID, Kind: r.Kind, GPUHours: h, Reason: ChargeGranted}
}

// admit plans the one PATCH that admits a pod under r: the class
// toleration, every reservation annotation, the scheduling gate removed.
func (c *cycle) admit(p *podState, r *Reservation) {
	if l := c.leaseOf[p.ref.UID]; l != nil && l != r {
		c.cancel(l, CancelSuperseded, r.ID)
	}
	c.hold(p, r)
	p.until, p.resolved = c.chainEnd(r), true
	cs := c.classes[p.class]
	if p.usedIn == nil {
		cs.used += p.gpus
		p.usedIn = cs
	}
	cs.admitted = append(cs.admitted, p)
	c.carryChain(p)

	k := &c.e.keys
	st := admittedState{res: r, className: cs.cls.DisplayName, now: c.now, until: p.until, resolved: true, stamp: true}
	// Fresh values throughout: whatever the pod carried before admission
	// (a stale admitted-at, say) is not the engine's.
	patch := PodPatch{Pod: p.ref, Reservation: r.ID, Annotations: k.diff(p.pod.Annotations, k.desired(nil, st))}
	patch.Tolerations = append(slices.Clone(p.pod.Spec.Tolerations), c.toleration(p.class))
	if g := c.e.cfg.SchedulingGate; g != "" {
		gates := slices.DeleteFunc(slices.Clone(p.pod.Spec.SchedulingGates), func(s corev1.PodSchedulingGate) bool { return s.Name == g })
		if len(gates) != len(p.pod.Spec.SchedulingGates) {
			patch.SchedulingGates = append([]corev1.PodSchedulingGate{}, gates...)
		}
	}
	if r.Kind == KindBestEffort {
		patch.Events = []Event{c.e.msg.render(p.ref, BestEffortAdmitted, &eventData{Class: p.class})}
	} else {
		patch.Events = []Event{c.e.msg.render(p.ref, RuntimeGuaranteed, &eventData{For: p.until.Sub(c.now), Until: p.until})}
	}
	c.plan.Admissions = append(c.plan.Admissions, patch)
}

// holderNames lists the pods under b for ReservationFull: a few names,
// then how many more.
func (c *cycle) holderNames(b *Reservation) ([]string, int) {
	var names []string
	for _, h := range c.holders[b.ID] {
		if !h.gone && h.held && h.res == b {
			names = append(names, clean(h.ref.Name))
		}
	}
	slices.Sort(names)
	const shown = 3
	if len(names) > shown {
		return names[:shown], len(names) - shown
	}
	return names, 0
}

// nearMisses names the owner's bookings that almost match the pod: the
// right class under another workspace, or (when classes is set) another
// class under the right workspace.
func (c *cycle) nearMisses(p *podState, classes bool) []string {
	var out []string
	for _, b := range c.byOwner[p.ref.Namespace] {
		if !b.active() || !b.End.After(c.now) {
			continue
		}
		var s string
		switch {
		case b.Class == p.class && b.Workspace != p.workspace:
			s = fmt.Sprintf("You do have a %s reservation (#%d) under workspace %s; set the pod's dsmlp/course label to that workspace to use it.",
				b.Class, b.ID, clean(b.Workspace))
		case classes && b.Workspace == p.workspace && b.Class != p.class:
			s = fmt.Sprintf("You do have a reservation (#%d) for gpu-class %s under workspace %s; set the pod's gpu-class label to %s to use it.",
				b.ID, b.Class, clean(b.Workspace), b.Class)
		}
		if s != "" && !slices.Contains(out, s) && len(out) < 3 {
			out = append(out, s)
		}
	}
	return out
}
