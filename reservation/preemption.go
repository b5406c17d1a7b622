package reservation

import (
	"fmt"
	"time"
)

// sweep is the preemption sweep (§3.8), per class: free the GPUs that
// bookings at a boundary and the on-demand headroom need by deleting pods
// past their guarantee, and warn the pods at risk. A pod inside its
// guarantee is never a victim; a shortfall only such pods could cover is
// reported as unmet demand. Victims go best-effort first, then on-demand,
// then booking, uniformly at random within a kind (seeded). The sweep is
// stateless: pods being deleted no longer count as holding GPUs, so a
// boundary is not paid for twice.
func (c *cycle) sweep() {
	for _, name := range c.e.classNames {
		if cs := c.classes[name]; cs.capacity > 0 {
			c.sweepClass(cs)
		}
	}
}

func (c *cycle) sweepClass(cs *classState) {
	cfg := &c.e.cfg
	lead := cfg.KillLead.Duration
	warnings := map[*podState]*warning{}
	// Many pods share a warning time: format each message once.
	type msgKey struct {
		at, boundary time.Time
		headroom     bool
	}
	texts := map[msgKey]string{}
	message := func(k msgKey) string {
		if s, ok := texts[k]; ok {
			return s
		}
		s := fmt.Sprintf("This pod may be stopped from %s to free its GPU for a reservation starting %s; save your work before then.",
			c.e.msg.formatTime(k.at), c.e.msg.formatTime(k.boundary))
		if k.headroom {
			s = fmt.Sprintf("This pod may be stopped from %s to keep %d%% of gpu-class %s free for on-demand use; save your work before then.",
				c.e.msg.formatTime(k.at), *cfg.HeadroomPercent, cs.cls.Label)
		}
		texts[k] = s
		return s
	}

	// Boundaries: now, for bookings already open, and every booking start
	// within the warning lookahead.
	points := []time.Time{c.now}
	for _, b := range cs.bookings {
		if b.active() && b.Start.After(c.now) && !b.Start.After(c.now.Add(cfg.WarningLookahead.Duration)) &&
			!b.Start.Equal(points[len(points)-1]) {
			points = append(points, b.Start)
		}
	}
	for _, t := range points {
		short := cs.used + c.unclaimed(cs, t) - cs.capacity
		if short <= 0 {
			continue
		}
		boundary := c.boundaryAt(cs, t)
		if t.Sub(c.now) <= lead {
			short -= c.preempt(cs, short, func(p *podState) bool { return p.overstay(c.now) },
				eventData{Boundary: boundary, Class: cs.cls.Label})
			if short <= 0 {
				continue
			}
		}
		pool := c.eligible(cs, func(p *podState) bool { return p.overstay(t) })
		c.noteUnmet(cs, boundary, short, pool)
		for _, p := range pool.pods {
			at := t.Add(-lead)
			if p.resolved {
				at = later(at, p.until)
			}
			mergeWarning(warnings, p, at, pool.risk(short), message(msgKey{at: at, boundary: boundary}))
		}
	}

	if pct := *cfg.HeadroomPercent; pct > 0 {
		target := (pct*cs.capacity + 99) / 100
		short := target - (cs.free() - c.unclaimed(cs, c.now))
		if short > 0 {
			// Only pods warned earlier, whose notice has run out, may go.
			short -= c.preempt(cs, short, func(p *podState) bool {
				return p.overstay(c.now) && p.warned && !c.now.Before(p.warnAt)
			}, eventData{Headroom: pct, Class: cs.cls.Label})
		}
		if short > 0 {
			pool := c.eligible(cs, func(p *podState) bool { return p.overstay(c.now) })
			c.noteUnmet(cs, c.now, short, pool)
			for _, p := range pool.pods {
				// The notice is sticky: a pod already warned keeps its time.
				at := p.warnAt
				if !p.warned {
					at = c.now.Add(cfg.HeadroomNotice.Duration)
				}
				mergeWarning(warnings, p, at, pool.risk(short), message(msgKey{at: at, headroom: true}))
			}
		}
	}
	for p, w := range warnings {
		p.warning = w
	}
}

// boundaryAt is the booking start a shortfall at t is for: t itself for a
// future boundary, else the earliest open booking still short of GPUs.
func (c *cycle) boundaryAt(cs *classState, t time.Time) time.Time {
	if t.After(c.now) {
		return t
	}
	for _, b := range cs.bookings {
		if b.openAt(c.now) && b.GPUs > c.occ[b.ID]+c.chained[b.ID] {
			return b.Start
		}
	}
	return t
}

// victimPool is the pods a shortfall could take, and their GPUs.
type victimPool struct {
	pods []*podState
	gpus int
}

func (v victimPool) risk(short int) float64 {
	if v.gpus == 0 {
		return 1
	}
	return min(1, float64(short)/float64(v.gpus))
}

// eligible is the class's admitted pods that hold its GPUs, are not going
// already and pass ok.
func (c *cycle) eligible(cs *classState, ok func(*podState) bool) victimPool {
	var v victimPool
	for _, p := range cs.admitted {
		if !p.gone && p.usedIn == cs && !p.stamp && ok(p) {
			v.pods = append(v.pods, p)
			v.gpus += p.gpus
		}
	}
	return v
}

// preempt deletes eligible pods, in victim order, until short GPUs are
// freed or none are left; it returns the GPUs freed.
func (c *cycle) preempt(cs *classState, short int, ok func(*podState) bool, d eventData) int {
	var byKind [3][]*podState
	for _, p := range c.eligible(cs, ok).pods {
		switch p.kind(&c.e.keys) {
		case KindBestEffort:
			byKind[0] = append(byKind[0], p)
		case KindOnDemand:
			byKind[1] = append(byKind[1], p)
		default:
			byKind[2] = append(byKind[2], p)
		}
	}
	freed := 0
	for _, list := range byKind {
		c.rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
		for _, p := range list {
			if freed >= short {
				return freed
			}
			ev := d
			ev.Unresolved = !p.resolved
			ev.Overstay = c.now.Sub(p.until)
			c.evict(p, Preempted, &ev)
			freed += p.gpus
		}
	}
	return freed
}

// noteUnmet reports the part of a shortfall that even every eligible pod
// could not cover.
func (c *cycle) noteUnmet(cs *classState, boundary time.Time, short int, pool victimPool) {
	if rest := short - pool.gpus; rest > 0 {
		c.plan.Unmet = append(c.plan.Unmet, UnmetDemand{Class: cs.cls.Label, Boundary: boundary, GPUs: rest})
	}
}

// mergeWarning keeps, per pod, the earliest warning time (with its
// message) and the highest risk over all causes.
func mergeWarning(ws map[*podState]*warning, p *podState, at time.Time, risk float64, msg string) {
	w := ws[p]
	if w == nil {
		ws[p] = &warning{at: at, risk: risk, message: msg}
		return
	}
	if at.Before(w.at) {
		w.at, w.message = at, msg
	}
	w.risk = max(w.risk, risk)
}
