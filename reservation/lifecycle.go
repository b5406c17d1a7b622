package reservation

import (
	"cmp"
	"slices"
	"strings"
)

// resolveAdmitted settles, for every admitted live pod, which reservation
// it runs under now and until when it is guaranteed (§3.7):
//
//  1. pods whose reservation is open are counted under it first, so
//     later moves only take room that is really free;
//  2. a booking handed to another owner evicts the old owner's pods;
//  3. a pod whose reservation ended moves into the booking its guarantee
//     chain continues into; one whose reservation people cancelled moves
//     to another open booking of its owner, or is evicted;
//  4. a pod on a lease merges into an open booking of its owner, and a pod
//     past its guarantee is rescued by one, before the sweep can pick it.
func (c *cycle) resolveAdmitted() {
	var adm []*podState
	for _, p := range c.pods {
		if p.live && p.admitted {
			adm = append(adm, p)
		}
	}
	k := &c.e.keys
	slices.SortStableFunc(adm, func(a, b *podState) int { return strings.Compare(a.admittedAt, b.admittedAt) })

	var ended, displaced []*podState
	for _, p := range adm {
		r := c.lookup(p)
		switch {
		case r == nil:
			// The record left the store; the annotations still say when
			// its window ended.
			p.until, p.resolved = parseUTC(p.pod.Annotations[k.end])
		case r.Kind == KindBooking && r.active() && r.Owner != p.ref.Namespace:
			c.evict(p, ReservationReassigned, &eventData{NewOwner: clean(r.Owner)})
		case !r.active() && r.CancelReason.byPeople() && (r.CancelledAt.IsZero() || r.CancelledAt.Before(r.End)):
			p.res = r
			displaced = append(displaced, p)
		case !r.active() && !r.CancelReason.byPeople():
			// The engine's own bookkeeping dropped the claim (revoked,
			// no-show): the guarantee can no longer be resolved.
			p.res = r
		case r.Kind == KindBestEffort:
			c.hold(p, r)
			p.until, p.resolved = r.Start, true
		case r.active() && c.now.Before(r.End):
			c.hold(p, r)
			p.until, p.resolved = c.chainEnd(r), true
		default: // ended, or cancelled only after it ended
			p.res = r
			ended = append(ended, p)
		}
	}

	for _, p := range ended {
		prev := p.res
		end, next := prev.End, c.next(prev)
		for next != nil && !c.now.Before(next.End) {
			end, next = next.End, c.next(next)
		}
		if next != nil && c.room(next) >= p.gpus {
			c.relink(p, next, ReservationRelinked, "chained", prev)
			continue
		}
		p.until, p.resolved = end, true
	}
	for _, p := range displaced {
		prev := p.res
		inside := c.now.Before(prev.End)
		if target := c.relinkTarget(p, prev.SupersededBy); target != nil {
			switch {
			case !inside:
				c.relink(p, target, OverstayRelinked, "", prev)
			case prev.Kind != KindBooking:
				c.relink(p, target, ReservationRelinked, "merged", prev)
			default:
				c.relink(p, target, ReservationRelinked, "replaced", prev)
			}
			continue
		}
		c.evict(p, ReservationCancelled, &eventData{Variant: string(prev.CancelReason)})
	}

	for _, p := range adm {
		if p.gone || p.stamp {
			continue
		}
		inside := !p.overstay(c.now)
		if inside && p.kind(k) != KindOnDemand {
			continue // a booking pod inside its guarantee stays put
		}
		target := c.relinkTarget(p, 0)
		if target == nil {
			continue
		}
		prev := p.res
		if inside {
			c.relink(p, target, ReservationRelinked, "merged", prev)
		} else {
			c.relink(p, target, OverstayRelinked, "", prev)
		}
		if prev != nil && prev.Kind != KindBooking {
			c.cancel(prev, CancelSuperseded, target.ID)
		}
	}

	for _, p := range adm {
		if p.gone {
			continue
		}
		if cs := c.classes[p.class]; cs != nil {
			cs.admitted = append(cs.admitted, p)
		}
		c.carryChain(p)
	}
	for _, cs := range c.classes {
		cs.paused = c.pauseCause(cs)
	}
}

// lookup finds the reservation an admitted pod names, including a lease
// this engine minted that the snapshot does not show yet.
func (c *cycle) lookup(p *podState) *Reservation {
	if r := c.res[p.refID]; r != nil {
		return r
	}
	if l, ok := c.e.minted[p.ref.UID]; ok && l.ID == p.refID {
		c.res[l.ID], c.planned[l.ID] = &l, true
		return &l
	}
	return nil
}

// carryChain counts p's GPUs in the future bookings its guarantee chain
// runs through: they are spoken for, not free demand.
func (c *cycle) carryChain(p *podState) {
	r := p.res
	if r == nil || !p.resolved || !p.held || r.Kind == KindBestEffort {
		return
	}
	for range len(c.res) {
		next := c.next(r)
		if next == nil || !next.Start.After(c.now) {
			return
		}
		c.chained[next.ID] += p.gpus
		r = next
	}
}

// relink moves p onto target and queues the guarantee and relink events
// (RuntimeGuaranteed first, stating the new guarantee).
func (c *cycle) relink(p *podState, target *Reservation, reason, variant string, prev *Reservation) {
	c.hold(p, target)
	p.until, p.resolved, p.stamp = c.chainEnd(target), true, true
	p.warning = nil
	d := &eventData{Res: viewOf(target), Prev: viewOf(prev), Variant: variant, Until: p.until, For: p.until.Sub(c.now)}
	if d.Prev == nil {
		d.Prev = &resView{ID: p.refID} // the record left the store; the pod still names it
	}
	p.events = append(p.events, c.e.msg.render(p.ref, RuntimeGuaranteed, d), c.e.msg.render(p.ref, reason, d))
}

// relinkTarget is the open booking of p's owner, class and workspace with
// room that p should move to: prefer first if it qualifies, else the
// routing order.
func (c *cycle) relinkTarget(p *podState, prefer int64) *Reservation {
	ok := func(b *Reservation) bool {
		return b.openAt(c.now) && c.room(b) >= p.gpus && (p.res == nil || b.ID != p.res.ID)
	}
	if b := c.res[prefer]; b != nil && b.Kind == KindBooking && b.Owner == p.ref.Namespace &&
		b.Class == p.class && b.Workspace == p.workspace && ok(b) {
		return b
	}
	return c.pickBooking(c.bookings[claimKey{p.ref.Namespace, p.class, p.workspace}], ok)
}

// pickBooking chooses among bookings that pass ok: soonest start, then
// most room, then lowest ID (§3.3). list is sorted by start then ID.
func (c *cycle) pickBooking(list []*Reservation, ok func(*Reservation) bool) *Reservation {
	var best *Reservation
	for _, b := range list {
		if !b.active() || !ok(b) {
			continue
		}
		if best == nil {
			best = b
			continue
		}
		if !b.Start.Equal(best.Start) {
			break
		}
		if c.room(b) > c.room(best) {
			best = b
		}
	}
	return best
}

// endLeases cancels leases whose pod ended (pod-terminated) or now runs
// under another reservation (superseded), settling their charges.
func (c *cycle) endLeases() {
	for _, l := range c.leases {
		if !l.active() {
			continue
		}
		p := c.byUID[l.PodUID]
		switch {
		case p == nil || !p.live:
			c.cancel(l, CancelPodTerminated, 0)
		case p.admitted && !p.gone && p.res != nil && p.res.ID != l.ID && p.resolved:
			c.cancel(l, CancelSuperseded, p.res.ID)
		}
	}
}

// cancelNoShows cancels open bookings nobody claims (§3.7): open for
// NoShowAfter, no pod under them or waiting for them, and NoShowGrace past
// the last pod under them (or past the engine's start, which may have
// missed pods).
func (c *cycle) cancelNoShows() {
	smallest := map[claimKey]int{}
	for _, p := range c.pods {
		if p.live && !p.admitted && !p.bypass && p.gpus > 0 {
			k := claimKey{p.ref.Namespace, p.class, p.workspace}
			if n, ok := smallest[k]; !ok || p.gpus < n {
				smallest[k] = p.gpus
			}
		}
	}
	var open []*Reservation
	for _, list := range c.bookings {
		for _, b := range list {
			if b.openAt(c.now) && !c.now.Before(b.Start.Add(c.e.cfg.NoShowAfter.Duration)) && c.occ[b.ID] == 0 {
				open = append(open, b)
			}
		}
	}
	slices.SortFunc(open, func(a, b *Reservation) int { return cmp.Compare(a.ID, b.ID) })
	for _, b := range open {
		if n, ok := smallest[claimKey{b.Owner, b.Class, b.Workspace}]; ok && n <= b.GPUs {
			continue
		}
		last := c.e.lastOccupied[b.ID]
		if last.IsZero() && b.Start.Before(c.e.started) {
			last = c.e.started
		}
		if !last.IsZero() && c.now.Before(last.Add(c.e.cfg.NoShowGrace.Duration)) {
			continue
		}
		c.cancel(b, CancelNoShow, 0)
	}
}

// pauseCause says why on-demand admission is paused for a class (§3.5 #6),
// or "" when it is not. A class with no schedulable node is handled where
// it is checked, before the node guard.
func (c *cycle) pauseCause(cs *classState) string {
	if why, ok := c.paused[cs.cls.Label]; ok {
		if why = clean(why); why != "" {
			return "an administrator paused it (" + why + ")"
		}
		return "an administrator paused it"
	}
	booked := 0
	for _, b := range cs.bookings {
		if b.openAt(c.now) {
			booked += b.GPUs
		}
	}
	if len(cs.nodes) > 0 && booked > cs.capacity {
		return "more GPUs of this class are booked for now than are online"
	}
	k := &c.e.keys
	for _, p := range cs.admitted {
		if p.kind(k) != KindBooking || p.pod.Spec.NodeName != "" {
			continue
		}
		at, ok := parseUTC(p.admittedAt)
		if ok && c.now.Sub(at) >= c.e.cfg.StuckAfter.Duration && !placementOf(p.pod, cs.cls).hasOwn() {
			return "pods that already hold a reservation for this class are still waiting to be placed, and they go first"
		}
	}
	return ""
}
