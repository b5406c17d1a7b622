package reservation

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Plan is what one decision cycle wants done. Apply it in field order:
//
//  1. Evictions: create the stop event, then DELETE the pod (UID precondition).
//  2. Cancels: cancel the reservations in the store; record a cancel's
//     Charge only if the cancel took effect.
//  3. Mints: create each lease or best-effort record (ID included; a
//     create for a PodUID that already has a record is a retry and returns
//     that record); record its Charge only if the create made a record.
//  4. Admissions: one PATCH each (MergePatch), then its events. A failed
//     PATCH whose lease was created in step 3 should cancel that lease with
//     CancelRevoked; the next cycle plans again either way.
//  5. Updates: one annotation PATCH each, then its events.
//  6. Events: waiting events, already throttled.
//  7. Unmet: log them.
//
// Every step is level-based: an unapplied plan is planned again next cycle.
type Plan struct {
	Now        time.Time
	Evictions  []Eviction
	Cancels    []Cancel
	Mints      []Mint
	Admissions []PodPatch
	Updates    []PodPatch
	Events     []Event
	Unmet      []UnmetDemand
	// Classes is each class's state after the plan, for the admin view; it
	// asks for no write.
	Classes []ClassStatus
}

// Empty reports whether the plan asks for no write at all.
func (p *Plan) Empty() bool {
	return len(p.Evictions)+len(p.Cancels)+len(p.Mints)+len(p.Admissions)+len(p.Updates)+len(p.Events) == 0
}

// PodRef names a pod as the snapshot saw it.
type PodRef struct {
	Namespace       string    `json:"namespace"`
	Name            string    `json:"name"`
	UID             types.UID `json:"uid"`
	ResourceVersion string    `json:"resourceVersion,omitempty"`
}

func refOf(p *corev1.Pod) PodRef {
	return PodRef{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion}
}

// PodPatch is one PATCH of one pod: annotations to set or remove, and for
// an admission the pod's new toleration list and scheduling gates.
type PodPatch struct {
	Pod PodRef
	// Reservation is the reservation the pod runs under after the patch.
	Reservation int64
	// Annotations to set; a nil value removes the key.
	Annotations map[string]*string
	// Tolerations, when non-nil, is the pod's complete new toleration list
	// (a merge patch replaces lists).
	Tolerations []corev1.Toleration
	// SchedulingGates, when non-nil, is the pod's complete new gate list.
	SchedulingGates []corev1.PodSchedulingGate
	// Events are written after the PATCH succeeds, in order.
	Events []Event
}

// MergePatch renders the patch as a JSON merge patch
// (application/merge-patch+json). The UID guards against a recreated pod of
// the same name; when lists are replaced, resourceVersion guards against a
// concurrent change of them (a conflict is retried next cycle).
func (p PodPatch) MergePatch() ([]byte, error) {
	meta := map[string]any{"uid": p.Pod.UID}
	if len(p.Annotations) > 0 {
		meta["annotations"] = p.Annotations
	}
	doc := map[string]any{"metadata": meta}
	spec := map[string]any{}
	if p.Tolerations != nil {
		spec["tolerations"] = p.Tolerations
	}
	if p.SchedulingGates != nil {
		spec["schedulingGates"] = p.SchedulingGates
	}
	if len(spec) > 0 {
		doc["spec"] = spec
		if p.Pod.ResourceVersion != "" {
			meta["resourceVersion"] = p.Pod.ResourceVersion
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding patch of pod %s/%s: %w", p.Pod.Namespace, p.Pod.Name, err)
	}
	return b, nil
}

// Event is one reservation event about a pod.
type Event struct {
	Pod     PodRef
	Reason  string
	Type    string // corev1.EventTypeNormal or corev1.EventTypeWarning
	Action  string
	Message string
}

// Name is a deterministic event name for idempotent creates: the same
// event in the same repeat bucket gets the same name, so AlreadyExists
// means "already told".
func (ev Event) Name(now time.Time, bucket time.Duration) string {
	h := fnv.New32a()
	h.Write([]byte(ev.Message))
	n := int64(0)
	if bucket > 0 {
		n = now.UnixNano() / int64(bucket)
	}
	suffix := fmt.Sprintf(".%s.%08x.%d", strings.ToLower(ev.Reason), h.Sum32(), n)
	pod := ev.Pod.Name
	if max := 253 - len(suffix); len(pod) > max {
		pod = pod[:max]
	}
	return pod + suffix
}

// Eviction stops a pod: write Event, then delete the pod.
type Eviction struct {
	Pod   PodRef
	Event Event
}

// Cancel cancels a reservation in the store.
type Cancel struct {
	ReservationID int64
	Reason        CancelReason
	SupersededBy  int64 // for CancelSuperseded
	// Charge settles a lease: the unused part of its window is refunded.
	// Nil for bookings, whose charges are the booking store's.
	Charge *Charge
}

// Mint creates a lease or best-effort record minted for one pod.
type Mint struct {
	Reservation Reservation
	// Charge is the lease's whole window, charged when granted (zero for
	// best-effort).
	Charge Charge
}

// Charge is GPU-hours charged (positive) or refunded (negative) to a
// workspace for one reservation.
type Charge struct {
	Workspace     string
	Owner         string
	ReservationID int64
	Kind          Kind
	GPUHours      float64
	Reason        string // ChargeGranted or ChargeSettled
}

// Charge reasons.
const (
	// ChargeGranted charges a lease's whole window when it is minted.
	ChargeGranted = "lease-granted"
	// ChargeSettled refunds the unused part when a lease ends early.
	ChargeSettled = "lease-settled"
)

// ChargesByWorkspace sums the plan's charges (mints and settlements) per
// workspace, assuming every write succeeds.
func (p *Plan) ChargesByWorkspace() map[string]float64 {
	out := map[string]float64{}
	for _, m := range p.Mints {
		out[m.Charge.Workspace] += m.Charge.GPUHours
	}
	for _, c := range p.Cancels {
		if c.Charge != nil {
			out[c.Charge.Workspace] += c.Charge.GPUHours
		}
	}
	return out
}

// UnmetDemand is a shortfall only pods inside their guarantee could cover;
// it is logged, never acted on.
type UnmetDemand struct {
	Class    string
	Boundary time.Time
	GPUs     int
}
