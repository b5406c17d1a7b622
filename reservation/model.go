package reservation

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Labels the engine reads on pods (platform contract, seed 000).
const (
	// ClassLabel names the pod's GPU class; a pod without it is not managed.
	ClassLabel = "gpu-class"
	// WorkspaceLabel names the workspace (usage group) a pod is charged to.
	WorkspaceLabel = "dsmlp/course"
	// OrgOnDemand is the implicit workspace of pods without a workspace:
	// every user belongs to it, and it holds no bookings.
	OrgOnDemand = "ORG_ON_DEMAND"
	// GPUResource is the extended resource GPU pods request.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
	// Component is the event source the engine writes as.
	Component = "gpu-reservation-controller"
)

// Kind is what sort of reservation a record is.
type Kind string

// The three kinds of reservation.
const (
	// KindBooking is a window booked ahead in the reservation store.
	KindBooking Kind = "booking"
	// KindOnDemand is a lease the engine mints just in time for one pod.
	KindOnDemand Kind = "on_demand"
	// KindBestEffort is a zero-length, uncharged record for one pod.
	KindBestEffort Kind = "best_effort"
)

// Status is whether a reservation still holds GPUs.
type Status string

// Reservation statuses.
const (
	StatusActive    Status = "active"
	StatusCancelled Status = "cancelled"
)

// CancelReason says why a reservation was cancelled (§3.1).
type CancelReason string

// Cancellation reasons. The first three are people's decisions and evict
// (or re-link) the pods under an open reservation; the rest are the
// engine's own bookkeeping.
const (
	CancelUser          CancelReason = "user"       // by the owner
	CancelOther         CancelReason = "other"      // by another user: manager, admin, teammate
	CancelSuperseded    CancelReason = "superseded" // replaced (Extend, or a lease merged into a booking)
	CancelNoShow        CancelReason = "no-show"
	CancelRevoked       CancelReason = "controller-revoked"
	CancelPodTerminated CancelReason = "pod-terminated"
)

// byPeople reports whether a cancellation is one the pods under the
// reservation must react to (relink or eviction).
func (r CancelReason) byPeople() bool {
	return r == CancelUser || r == CancelOther || r == CancelSuperseded
}

// GPUClass is one class of GPU the platform offers.
type GPUClass struct {
	// Label is the gpu-class label value (case-sensitive), e.g. "medium".
	Label string `json:"label"`
	// DisplayName is shown in annotations and messages. Defaults to Label.
	DisplayName string `json:"display_name,omitempty"`
	// NodeSelector is the node selection the admission webhook adds to pods
	// of this class; entries of a pod's nodeSelector found here are not the
	// pod's own constraint. Default none.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// GPUsPerNode is used for nodes of the class that publish no
	// nvidia.com/gpu allocatable. Default 0 (such nodes hold nothing).
	GPUsPerNode int `json:"gpus_per_node,omitempty"`
	// OnDemand says whether on-demand leases are offered for this class.
	// Defaults to true.
	OnDemand *bool `json:"on_demand,omitempty"`
}

// Workspace is a usage group: the value of a pod's dsmlp/course label.
type Workspace struct {
	// Name is the dsmlp/course value.
	Name string `json:"name"`
	// Members are the users (namespaces) who may charge on-demand leases to
	// it. Empty means any user: the platform's admission webhook already
	// checks the label against the namespace (seed 000).
	Members []string `json:"members,omitempty"`
	// Classes are the GPU classes granted. Empty means every class.
	Classes []string `json:"classes,omitempty"`
	// Caps are per-class ceilings on the GPUs the workspace's admitted pods
	// may hold at once. A class not listed has no ceiling.
	Caps map[string]int `json:"caps,omitempty"`
	// OnDemand says whether pods of this workspace may run on on-demand
	// leases. Defaults to true.
	OnDemand *bool `json:"on_demand,omitempty"`
	// MaxLease caps the length of one on-demand lease (runtime + buffer).
	// Zero means no cap.
	MaxLease metav1.Duration `json:"max_lease,omitempty"`
	// ActiveFrom and ActiveUntil bound the dates the workspace may be used;
	// nil means unbounded.
	ActiveFrom  *metav1.Time `json:"active_from,omitempty"`
	ActiveUntil *metav1.Time `json:"active_until,omitempty"`
}

// Reservation is a booking, an on-demand lease or a best-effort record. The
// window is half-open, [Start, End).
type Reservation struct {
	ID        int64     `json:"id"`
	Kind      Kind      `json:"kind"`
	Owner     string    `json:"owner"` // user == pod namespace
	Workspace string    `json:"workspace"`
	Class     string    `json:"class"`
	GPUs      int       `json:"gpus"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	Status    Status    `json:"status"`
	// CancelReason, CancelledAt and SupersededBy are set once cancelled.
	CancelReason CancelReason `json:"cancel_reason,omitempty"`
	CancelledAt  time.Time    `json:"cancelled_at,omitzero"`
	SupersededBy int64        `json:"superseded_by,omitempty"`
	// PodUID is the idempotency key of leases and best-effort records: the
	// pod the record was minted for.
	PodUID types.UID `json:"pod_uid,omitempty"`
}

func (r *Reservation) active() bool { return r.Status != StatusCancelled }

// openAt reports whether the reservation is active and its window contains t.
func (r *Reservation) openAt(t time.Time) bool {
	return r.active() && !t.Before(r.Start) && t.Before(r.End)
}

// Snapshot is everything one decision cycle reads. It must come from synced
// caches: Decide treats a missing object as gone. Objects are never
// modified.
type Snapshot struct {
	// Now is the instant the snapshot stands for; zero means the engine's
	// clock.
	Now time.Time
	// Pods are the pods carrying the gpu-class label (others may be present
	// and are ignored unless bound to a reservation node).
	Pods []*corev1.Pod
	// Nodes are the cluster's nodes; those tainted with the class taint are
	// the reservation nodes.
	Nodes []*corev1.Node
	// Reservations are all bookings, leases and best-effort records that
	// have not ended long ago.
	Reservations []Reservation
	// Paused are the classes an administrator paused on-demand admission
	// for, each with the administrator's reason (may be empty).
	Paused map[string]string
}
