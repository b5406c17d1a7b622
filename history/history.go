// Package history keeps the life of every notebook server in a database:
// who asked for it, when it was created, scheduled and ready, and how it
// ended (who or what stopped it, with the Kubernetes facts of the end). It
// outlives spawnerd's processes and Kubernetes' one-hour event TTL, so hub
// admins can ask "why did this student's session end" days later.
//
// A session is one pod of one hub server, keyed by the pod's UID. Writes are
// records of one event each (requested, created, scheduled, ready,
// stop-requested, ended), idempotent per UID and event kind: the first
// record of a kind wins, so replicas that observe the same pod, retries and
// failovers never double a row nor overwrite what was recorded first.
//
// Two stores share one schema and one set of migrations: embedded SQLite (a
// pure-Go driver, a file on a volume) and PostgreSQL for replicated
// deployments, chosen by the DSN given to Open.
package history

import (
	"errors"
	"strings"
	"time"
)

// EventKind is one step of a session's life.
type EventKind string

// The events a session records, in the order they usually happen.
const (
	EventRequested     EventKind = "requested"      // the hub asked spawnerd to start the server
	EventCreated       EventKind = "created"        // the pod exists (its creationTimestamp)
	EventScheduled     EventKind = "scheduled"      // bound to a node
	EventReady         EventKind = "ready"          // every container ready (KubeSpawner's is_pod_running)
	EventStopRequested EventKind = "stop-requested" // someone asked for the server to stop
	EventEnded         EventKind = "ended"          // the session is over; Stopper says who or what ended it
)

// EventKinds lists every kind, in life order.
var EventKinds = []EventKind{EventRequested, EventCreated, EventScheduled, EventReady, EventStopRequested, EventEnded}

// ActorKind says who asked for a start or a stop through the hub.
type ActorKind string

// Who can ask the hub to start or stop a server.
const (
	ActorUser    ActorKind = "user"    // the server's own user (the hub's pages, or the user's token)
	ActorAdmin   ActorKind = "admin"   // another hub user with rights on the server: a hub admin
	ActorCuller  ActorKind = "culler"  // the idle culler service
	ActorService ActorKind = "service" // another hub service, with its API token
	ActorHub     ActorKind = "hub"     // the hub itself (shutdown, a failed spawn's cleanup), or unknown
)

// Actor is who asked.
type Actor struct {
	Kind ActorKind `json:"kind"`
	// Name is the hub user's or service's name; empty for the hub itself.
	Name string `json:"name,omitempty"`
}

// Stopper is who or what ended a session.
type Stopper string

// The stoppers. The first six are requests made through the hub (the
// Actor kinds, plus spawnerd's own start timeout); the rest are what
// spawnerd saw happen in the cluster.
const (
	StopperUser    Stopper = "user"    // the user stopped it
	StopperAdmin   Stopper = "admin"   // a hub admin stopped it
	StopperCuller  Stopper = "culler"  // the idle culler stopped it
	StopperService Stopper = "service" // another hub service stopped it
	StopperHub     Stopper = "hub"     // the hub stopped it (shutdown, spawn failure), or the requester is unknown
	// StopperStartTimeout: spawnerd removed a pod that was not ready
	// within start_timeout, or that a GPU reservation hold needed fixed.
	StopperStartTimeout Stopper = "start-timeout"

	StopperEvicted       Stopper = "evicted"        // the kubelet evicted the pod (status.reason Evicted)
	StopperOOM           Stopper = "oom"            // the notebook container was OOM-killed
	StopperContainerExit Stopper = "container-exit" // the notebook container (or the pod) ended on its own
	StopperNodeLost      Stopper = "node-lost"      // the node went away (pod GC, taint eviction, NodeLost)
	StopperDeleted       Stopper = "deleted"        // someone deleted the pod outside the hub (kubectl delete)

	StopperPreempted             Stopper = "preempted"              // the GPU reservation engine preempted it for a booking
	StopperReservationCancelled  Stopper = "reservation-cancelled"  // its GPU booking was cancelled
	StopperReservationReassigned Stopper = "reservation-reassigned" // its GPU booking went to another owner
)

// Stoppers lists every stopper.
var Stoppers = []Stopper{
	StopperUser, StopperAdmin, StopperCuller, StopperService, StopperHub, StopperStartTimeout,
	StopperEvicted, StopperOOM, StopperContainerExit, StopperNodeLost, StopperDeleted,
	StopperPreempted, StopperReservationCancelled, StopperReservationReassigned,
}

// StopperOf is the stopper of a stop requested through the hub by actor.
func StopperOf(a Actor) Stopper {
	switch a.Kind {
	case ActorUser, ActorAdmin, ActorCuller, ActorService:
		return Stopper(a.Kind)
	}
	return StopperHub
}

// Identity is what a session is about: its server, its pod, and what it
// ran. Every record carries it; a field recorded empty is filled by a
// later record that knows it (a booking is known only after admission).
type Identity struct {
	UID       string `json:"uid"` // the pod's UID: the session's key
	User      string `json:"user"`
	Server    string `json:"server"` // "" for the default server
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Profile   string `json:"profile,omitempty"` // the profile slug the user picked
	Image     string `json:"image,omitempty"`   // the notebook container's image
	Course    string `json:"course,omitempty"`  // the workspace (dsmlp/course label)
	GPUClass  string `json:"gpu_class,omitempty"`
	// Reservation is the GPU booking or lease the pod ran under
	// (galends/booking-reference), ReservationKind its kind
	// (booking, on_demand, best_effort).
	Reservation     string `json:"reservation,omitempty"`
	ReservationKind string `json:"reservation_kind,omitempty"`
}

// EndFacts are the Kubernetes facts of a session's end.
type EndFacts struct {
	Phase           string `json:"phase,omitempty"`            // the pod's status.phase
	Reason          string `json:"reason,omitempty"`           // status.reason (Evicted, ...), or the engine's event reason
	Message         string `json:"message,omitempty"`          // status.message, the container's, or the engine's event message
	ContainerReason string `json:"container_reason,omitempty"` // the notebook container's terminated reason (OOMKilled, ...)
	ExitCode        *int   `json:"exit_code,omitempty"`        // the notebook container's exit code, when it ended
}

// Record is one event of one session. Identity.UID, Identity.User and Kind
// are required, At too; the other fields are those the kind carries.
type Record struct {
	Identity
	Kind EventKind
	At   time.Time
	// By: who asked, for EventRequested and EventStopRequested.
	By Actor
	// Node: for EventScheduled.
	Node string
	// Stopper and End: for EventEnded.
	Stopper Stopper
	End     EndFacts
}

// Session is everything recorded of one session.
type Session struct {
	Identity
	RequestedAt     *time.Time `json:"requested_at,omitempty"`
	RequestedBy     *Actor     `json:"requested_by,omitempty"`
	CreatedAt       *time.Time `json:"created_at,omitempty"`
	ScheduledAt     *time.Time `json:"scheduled_at,omitempty"`
	Node            string     `json:"node,omitempty"`
	ReadyAt         *time.Time `json:"ready_at,omitempty"`
	StopRequestedAt *time.Time `json:"stop_requested_at,omitempty"`
	StopRequestedBy *Actor     `json:"stop_requested_by,omitempty"`
	EndedAt         *time.Time `json:"ended_at,omitempty"`
	Stopper         Stopper    `json:"stopper,omitempty"`
	End             *EndFacts  `json:"end,omitempty"`
	// Started is when the session began: RequestedAt, else CreatedAt.
	// Lists are ordered by it, newest first.
	// (The earlier of the two when both are recorded, should clocks
	// disagree; until either is, the earliest event recorded.)
	Started time.Time `json:"started"`
	// Why is the end in one sentence (see Why); empty while it runs.
	Why string `json:"why,omitempty"`
}

// Event is one recorded step of a session, for its timeline.
type Event struct {
	UID  string    `json:"uid"`
	Kind EventKind `json:"kind"`
	At   time.Time `json:"at"`
	// Detail is the kind's own data: who asked, the node, or the stopper
	// and the end's facts.
	By      *Actor    `json:"by,omitempty"`
	Node    string    `json:"node,omitempty"`
	Stopper Stopper   `json:"stopper,omitempty"`
	End     *EndFacts `json:"end,omitempty"`
}

// Filter selects sessions. Zero fields match everything.
type Filter struct {
	User   string
	Server *string // nil: any server of the user; "" the default server
	Course string
	Class  string // GPU class
	// Reason matches the stopper (evicted, user, ...), or the end's
	// Kubernetes reason or container reason (Evicted, OOMKilled),
	// case-insensitively.
	Reason string
	// Since and Until select sessions that were alive at some time in
	// [Since, Until): started before Until and not ended before Since.
	Since, Until time.Time
	// Ended only lists sessions that ended; Running only those that did not.
	Ended, Running bool
}

// Matches says whether f selects s: the meaning both stores' queries
// implement, in Go, for fakes and for checking the queries.
func (f Filter) Matches(s Session) bool {
	switch {
	case f.User != "" && s.User != f.User,
		f.Server != nil && s.Server != *f.Server,
		f.Course != "" && s.Course != f.Course,
		f.Class != "" && s.GPUClass != f.Class,
		f.Ended && s.EndedAt == nil,
		f.Running && s.EndedAt != nil,
		!f.Until.IsZero() && !s.Started.Before(f.Until),
		!f.Since.IsZero() && s.EndedAt != nil && s.EndedAt.Before(f.Since):
		return false
	}
	if f.Reason == "" {
		return true
	}
	end := EndFacts{}
	if s.End != nil {
		end = *s.End
	}
	return s.EndedAt != nil && (strings.EqualFold(string(s.Stopper), f.Reason) ||
		strings.EqualFold(end.Reason, f.Reason) || strings.EqualFold(end.ContainerReason, f.Reason))
}

// Page asks for one page of a list.
type Page struct {
	// Limit is the page size; 0 means DefaultLimit, more than MaxLimit is
	// cut to MaxLimit.
	Limit int
	// Cursor is the Next of the previous page; empty for the first.
	Cursor string
}

// Page sizes.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// SessionPage is one page of sessions, newest first.
type SessionPage struct {
	Sessions []Session `json:"sessions"`
	// Next is the cursor of the following page; empty on the last.
	Next string `json:"next,omitempty"`
}

// DayCount is how many sessions ended on one day for one stopper.
type DayCount struct {
	Day     string  `json:"day"` // YYYY-MM-DD in the location asked for
	Stopper Stopper `json:"stopper"`
	Count   int     `json:"count"`
}

// Errors.
var (
	// ErrNotFound: no such session.
	ErrNotFound = errors.New("no such session")
	// ErrBadCursor: a page cursor that this store did not make.
	ErrBadCursor = errors.New("malformed page cursor")
	// ErrInvalid: a record that lacks a required field.
	ErrInvalid = errors.New("invalid history record")
)

// DefaultRetention is how long ended sessions are kept.
const DefaultRetention = 90 * 24 * time.Hour
