package reservation

import (
	"strings"
	"time"
)

// ClassStatus is one GPU class as the cycle left it: what an administrator
// asks about capacity, occupancy, the queue and preemption risk.
type ClassStatus struct {
	Class       string `json:"class"`
	DisplayName string `json:"display_name"`
	// Nodes and Capacity count the schedulable, Ready, tainted nodes of the
	// class and their GPUs.
	Nodes    int `json:"nodes"`
	Capacity int `json:"capacity"`
	// Used is the GPUs held on those nodes (plus admitted pods not yet
	// bound); Free is Capacity − Used.
	Used int `json:"used"`
	Free int `json:"free"`
	// Booked is the GPUs of bookings open now; Unclaimed the part of them
	// no pod holds yet.
	Booked    int `json:"booked"`
	Unclaimed int `json:"unclaimed"`
	// AdmittedPods and AdmittedGPUs are the live pods under a reservation.
	AdmittedPods int `json:"admitted_pods"`
	AdmittedGPUs int `json:"admitted_gpus"`
	// WaitingPods and WaitingGPUs are the queue: managed pods not admitted.
	WaitingPods int `json:"waiting_pods"`
	WaitingGPUs int `json:"waiting_gpus"`
	// Paused says why on-demand admission is paused; empty when it is not.
	Paused string `json:"paused,omitempty"`
	// Risk lists the booking boundaries within the risk horizon.
	Risk []RiskPoint `json:"risk"`
}

// RiskPoint is the preemption outlook at one booking boundary: how many
// GPUs would be short if nothing ended before it, and which admitted pods
// would be past their guarantee then (the pool victims come from).
type RiskPoint struct {
	Boundary time.Time `json:"boundary"`
	// Demand is the GPUs of bookings active then that no pod holds yet.
	Demand int `json:"demand"`
	// Shortfall is what the class lacks at the boundary: Used + Demand −
	// Capacity, at least 0.
	Shortfall int `json:"shortfall"`
	// AtRiskPods and AtRiskGPUs are the pods past their guarantee by then.
	AtRiskPods int `json:"at_risk_pods"`
	AtRiskGPUs int `json:"at_risk_gpus"`
	// Unmet is the part of the shortfall even every at-risk pod could not
	// cover: bookings that would wait.
	Unmet int `json:"unmet"`
}

// status summarises every class after routing.
func (c *cycle) status() []ClassStatus {
	waiting := map[string][2]int{}
	for _, p := range c.pods {
		if p.live && !p.admitted && !p.bypass && p.res == nil && c.classes[p.class] != nil {
			w := waiting[p.class]
			waiting[p.class] = [2]int{w[0] + 1, w[1] + p.gpus}
		}
	}
	horizon := c.now.Add(c.e.cfg.RiskHorizon.Duration)
	out := make([]ClassStatus, 0, len(c.e.classNames))
	for _, name := range c.e.classNames {
		cs := c.classes[name]
		st := ClassStatus{Class: name, DisplayName: cs.cls.DisplayName, Nodes: len(cs.nodes), Capacity: cs.capacity,
			Used: cs.used, Free: cs.free(), Unclaimed: c.unclaimed(cs, c.now), Paused: cs.paused,
			WaitingPods: waiting[name][0], WaitingGPUs: waiting[name][1], Risk: []RiskPoint{}}
		for _, b := range cs.bookings {
			if b.openAt(c.now) {
				st.Booked += b.GPUs
			}
		}
		for _, p := range cs.admitted {
			if !p.gone {
				st.AdmittedPods++
				st.AdmittedGPUs += p.gpus
			}
		}
		var last time.Time
		for _, b := range cs.bookings {
			t := b.Start
			if !b.active() || !t.After(c.now) || t.After(horizon) || t.Equal(last) {
				continue
			}
			last = t
			pool := c.eligible(cs, func(p *podState) bool { return p.overstay(t) })
			rp := RiskPoint{Boundary: t, Demand: c.unclaimed(cs, t), AtRiskPods: len(pool.pods), AtRiskGPUs: pool.gpus}
			rp.Shortfall = max(0, cs.used+rp.Demand-cs.capacity)
			rp.Unmet = max(0, rp.Shortfall-pool.gpus)
			st.Risk = append(st.Risk, rp)
		}
		out = append(out, st)
	}
	return out
}

// Hold is what a waiting event means for someone waiting on the pod.
type Hold int

const (
	// HoldNone: not a waiting event (admission, stop, or not the engine's).
	HoldNone Hold = iota
	// HoldClears: the wait can end on its own (a booking opens, a lease is
	// retried, a node frees up); keep waiting.
	HoldClears
	// HoldNeedsFix: waiting will not help; the pod or the bookings must
	// change, so a spawn should fail at once with the event's message.
	HoldNeedsFix
)

// HoldOf classifies an event the engine wrote by its reason and message.
func HoldOf(reason, message string) Hold {
	switch reason {
	case WaitingForReservation, ReservationFull, OnDemandAdmissionPaused, WaitingForNode:
		return HoldClears
	case OnDemandLeaseDenied:
		if strings.Contains(message, "waiting will not change this") {
			return HoldNeedsFix
		}
		return HoldClears
	case UnknownGpuClass, NoGpuRequest, NoMatchingNode, OnDemandLeaseRejected, ReservationTooSmall, NoReservation:
		return HoldNeedsFix
	}
	return HoldNone
}
