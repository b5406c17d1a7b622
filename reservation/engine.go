package reservation

import (
	"fmt"
	"slices"
	"time"
	// The display zone must load in minimal images without a zoneinfo tree.
	_ "time/tzdata"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Engine decides GPU admission for pods from snapshots of pods, nodes and
// reservations. It keeps only what a restart may lose: the event throttle
// ledger, when each open booking last had a pod, and the leases it minted
// that the snapshot does not show yet. It is not safe for concurrent use;
// one control loop calls Decide.
type Engine struct {
	cfg        Config
	classes    map[string]*GPUClass
	classNames []string
	workspaces map[string]*Workspace
	keys       annotationKeys
	msg        *messages
	clock      clock.PassiveClock
	throttle   *throttle

	started      time.Time                 // the first cycle: no-show grace restarts here
	lastOccupied map[int64]time.Time       // open booking → last cycle a pod ran under it
	minted       map[types.UID]Reservation // leases planned but not yet in a snapshot
	lastID       int64
}

// Option configures an Engine.
type Option func(*Engine)

// WithClock sets the clock used when a snapshot carries no time. Defaults
// to the real clock.
func WithClock(c clock.PassiveClock) Option { return func(e *Engine) { e.clock = c } }

// New builds an engine from a configuration, which is defaulted and
// validated first.
func New(cfg Config, opts ...Option) (*Engine, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	loc, err := time.LoadLocation(cfg.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("loading time zone %q: %w", cfg.TimeZone, err)
	}
	msg, err := newMessages(loc, cfg.SupportContact)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:          cfg,
		classes:      map[string]*GPUClass{},
		workspaces:   map[string]*Workspace{},
		keys:         newAnnotationKeys(cfg.AnnotationPrefix),
		msg:          msg,
		clock:        clock.RealClock{},
		throttle:     newThrottle(cfg.EventRepeat.Duration),
		lastOccupied: map[int64]time.Time{},
		minted:       map[types.UID]Reservation{},
	}
	for i := range cfg.Classes {
		e.classes[cfg.Classes[i].Label] = &cfg.Classes[i]
		e.classNames = append(e.classNames, cfg.Classes[i].Label)
	}
	slices.Sort(e.classNames)
	for i := range cfg.Workspaces {
		e.workspaces[cfg.Workspaces[i].Name] = &cfg.Workspaces[i]
	}
	if e.workspaces[OrgOnDemand] == nil {
		e.workspaces[OrgOnDemand] = &Workspace{Name: OrgOnDemand, OnDemand: orTrue(nil)}
	}
	for _, o := range opts {
		o(e)
	}
	return e, nil
}

// Decide runs one decision cycle over a snapshot and returns what to write.
// It performs no I/O; apply the plan as Plan describes. Calling it again
// with the same snapshot plans the same writes (less throttled events), so
// a plan that failed to apply is simply planned again.
func (e *Engine) Decide(snap Snapshot) Plan {
	now := snap.Now
	if now.IsZero() {
		now = e.clock.Now()
	}
	// Annotations and leases are second-granular.
	now = now.Truncate(time.Second)
	if e.started.IsZero() {
		e.started = now
	}

	// 1. Snapshot: index reservations, nodes and pods; count what each
	//    class, node and reservation holds.
	c := e.newCycle(now, &snap)
	// 2. Resolve each admitted pod's reservation and guarantee: evict on
	//    reassignment or cancellation, re-link where a booking takes it.
	c.resolveAdmitted()
	// 3. End leases whose pod ended or moved on.
	c.endLeases()
	// 4. Cancel open bookings nobody claimed.
	c.cancelNoShows()
	// 5. Preemption sweep: free the GPUs bookings and headroom need, warn
	//    the pods at risk.
	c.sweep()
	// 6. Route waiting pods: reserved path first, then on demand in
	//    creation order; admit, mint, or say why they wait.
	c.route()
	// 7. Reconcile admitted pods' annotations, writing only changes.
	c.reconcile()
	c.plan.Classes = c.status()
	// 8. Remember what the next cycle needs.
	e.remember(c)
	return c.plan
}

// remember keeps the little state a cycle leaves behind, bounded by the
// snapshot.
func (e *Engine) remember(c *cycle) {
	e.throttle.endCycle()
	for uid, l := range e.minted {
		p := c.byUID[uid]
		if _, seen := c.res[l.ID]; (seen && !c.planned[l.ID]) || p == nil || !p.live {
			delete(e.minted, uid)
		}
	}
	for id, r := range c.res {
		if r.Kind == KindBooking && r.openAt(c.now) && c.occ[id] > 0 {
			e.lastOccupied[id] = c.now
		}
	}
	for id := range e.lastOccupied {
		if r := c.res[id]; r == nil || !r.openAt(c.now) {
			delete(e.lastOccupied, id)
		}
	}
	e.lastID = max(e.lastID, c.nextID)
}

// reconcile writes the annotation changes of every admitted pod that stays,
// with the events of its relink; an unchanged pod costs nothing.
func (c *cycle) reconcile() {
	want := make(map[string]string, len(c.e.keys.written))
	for _, p := range c.pods {
		if !p.live || !p.admitted || p.gone {
			continue
		}
		st := admittedState{res: p.res, className: c.displayName(p), now: c.now, until: p.until,
			resolved: p.resolved, stamp: p.stamp, warning: p.warning}
		current := p.pod.Annotations
		changes := c.e.keys.diff(current, c.e.keys.desiredInto(want, current, st))
		if changes == nil && len(p.events) == 0 {
			continue
		}
		ref := int64(0)
		if p.res != nil {
			ref = p.res.ID
		}
		c.plan.Updates = append(c.plan.Updates, PodPatch{Pod: p.ref, Reservation: ref, Annotations: changes, Events: p.events})
	}
}

func (c *cycle) displayName(p *podState) string {
	class := p.class
	if p.res != nil {
		class = p.res.Class
	}
	if cls := c.e.classes[class]; cls != nil {
		return cls.DisplayName
	}
	return class
}
