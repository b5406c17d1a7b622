// Package reservation is the GPU reservation engine's pure core: from a
// snapshot of pods, nodes and reservations it decides which GPU pods to
// admit, under which booking or lease, what to tell each pod, and whom to
// preempt, and returns that as a Plan for a controller to write.
//
// The engine follows the proposed semantics of the reservation spec (§3)
// and holds pods back with the class taint (§4): admission is one PATCH
// adding the class toleration and the reservation annotations. Where §3
// leaves a choice, the engine takes the simplest rule that keeps its
// invariants (no booking holds more GPUs than it has, no class admits more
// GPUs than its counted nodes hold, no pod inside its guarantee is
// preempted, one lease per pod):
//
//   - Admitted means carrying both the class toleration and a
//     booking-reference. A pod with only the toleration bypassed the engine
//     and is left alone (its GPUs still count on its node); one with only
//     the annotation is routed like any waiting pod.
//   - A class's used GPUs are those of live pods bound to its counted nodes
//     (schedulable, Ready, tainted) plus admitted pods not yet bound. A pod
//     being deleted no longer counts, so victims free their GPUs at once in
//     the engine's books and the sweep needs no memory of past kills.
//   - Every admission, booking or lease, also needs the class to have the
//     GPUs free; a booking pod that has room in its booking but not on the
//     class waits with WaitingForReservation ("not free yet") while the
//     sweep frees the class.
//   - A lease is granted only if the GPUs are free now after setting aside
//     the unclaimed GPUs of open bookings, and stay free through every
//     booking that starts before the lease ends (counting pods still inside
//     their guarantee then). That is what lets a lease never preempt and a
//     booking always find its GPUs.
//   - Lease denials are the engine's own policy gates, checked in this
//     order: membership, class granted, per-class cap, workspace dates,
//     lease length (structural), then the workspace's current usage and the
//     class's capacity (contended). An unknown workspace is the one
//     rejection (OnDemandLeaseRejected).
//   - ReservationFull falls back to a lease FullFallback after the later of
//     the booking's start and the pod's creation, computed from the
//     snapshot so a restart does not reset it.
//   - A class with no schedulable node pauses on-demand admission before
//     the node guard runs, so such pods read OnDemandAdmissionPaused rather
//     than NoMatchingNode against zero nodes.
//   - A pod whose reservation ended moves into the booking its guarantee
//     chain continues into (ReservationRelinked), so occupancy stays exact.
//     A pod whose reservation people cancelled moves to another open
//     booking of its owner or is evicted; one whose claim the engine itself
//     dropped (revoked, no-show) keeps running with an unresolved guarantee
//     and is preemptible. A reservation missing from the snapshot is read
//     from the pod's reservation-end annotation.
//   - Best-effort pods are overstay from the moment they are admitted (their
//     guarantee is the admission instant), which avoids a second write.
//   - Headroom victims need a termination-warning-at annotation already on
//     the pod whose time has passed; the warning time is kept once written,
//     so notice survives restarts without engine state.
//   - Victim order within a kind comes from a PCG source seeded by
//     Config.Seed and the cycle's time: deterministic for tests, uniform in
//     practice.
//   - Lease IDs are chosen by the engine (one above the largest ID it has
//     seen); the store creates the lease with that ID, and a create for a
//     pod UID that already has a lease returns it. Until a minted lease
//     shows in a snapshot the engine plans the same one again, so a lost
//     write never yields a second lease; if its ID shows up on another
//     record instead, the create never happened and a new lease is minted.
//   - The lease path waits for kube-scheduler's verdict (PodScheduled=False,
//     Unschedulable) unless the pod carries the engine's scheduling gate,
//     which keeps the scheduler from ever ruling.
//   - Charges are GPU-hours: a lease's whole window when minted, the unused
//     part refunded when it ends; bookings are charged by the booking store.
//   - The throttle compares a hash of the message's inputs, so a repeat is
//     dropped without rendering it; it counts an event as written when it
//     is planned, so a failed write waits for the next change or repeat.
//   - The engine does no I/O and no logging: Plan.Unmet is for the caller to
//     log.
package reservation
