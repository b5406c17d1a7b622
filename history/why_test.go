package history

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestWhy(t *testing.T) {
	t.Parallel()
	pst, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	ended := time.Date(2026, 12, 4, 18, 22, 5, 0, time.UTC) // 10:22:05 PST
	// ended is a session of alice's server that ended at ended.
	endedSession := func(server string, st Stopper, by *Actor, node string, end *EndFacts) Session {
		s := Session{
			Identity: Identity{UID: "u", User: "alice", Server: server, Reservation: "dsc10-week3"},
			Started:  ended.Add(-time.Hour), EndedAt: &ended, Stopper: st, Node: node, End: end,
		}
		if by != nil {
			at := ended.Add(-time.Second)
			s.StopRequestedAt, s.StopRequestedBy = &at, by
		}
		return s
	}
	tests := map[string]struct {
		s    Session
		loc  *time.Location
		want string
	}{
		"user": {
			s:    endedSession("", StopperUser, &Actor{Kind: ActorUser, Name: "alice"}, "n1", &EndFacts{Phase: "Succeeded"}),
			want: "alice's server was stopped by its own user, alice, at 2026-12-04 10:22:05 PST.",
		},
		"admin, named server": {
			s:    endedSession("gpu", StopperAdmin, &Actor{Kind: ActorAdmin, Name: "bob"}, "n1", nil),
			want: `alice's server "gpu" was stopped by admin bob at 2026-12-04 10:22:05 PST.`,
		},
		"admin, unknown name": {
			s:    endedSession("", StopperAdmin, nil, "", nil),
			want: "alice's server was stopped by a hub admin at 2026-12-04 10:22:05 PST.",
		},
		"culler": {
			s:    endedSession("", StopperCuller, &Actor{Kind: ActorCuller, Name: "idle-culler"}, "", nil),
			want: "alice's server was stopped by the idle culler (idle-culler) at 2026-12-04 10:22:05 PST.",
		},
		"service": {
			s:    endedSession("", StopperService, &Actor{Kind: ActorService, Name: "grader"}, "", nil),
			want: "alice's server was stopped by the hub service grader at 2026-12-04 10:22:05 PST.",
		},
		"hub": {
			s:    endedSession("", StopperHub, &Actor{Kind: ActorHub}, "", nil),
			want: "alice's server was stopped by the hub itself at 2026-12-04 10:22:05 PST (a hub shutdown, the cleanup of a failed spawn, or a stop whose requester is unknown).",
		},
		"start timeout": {
			s:    endedSession("", StopperStartTimeout, nil, "", &EndFacts{Message: "pod not ready after 300s"}),
			want: "alice's server was removed by spawnerd at 2026-12-04 10:22:05 PST because its pod was not ready within the start timeout: pod not ready after 300s.",
		},
		"evicted": {
			s: endedSession("", StopperEvicted, nil, "gpu-3", &EndFacts{Phase: "Failed", Reason: "Evicted",
				Message: "The node was low on resource: memory.", ExitCode: intp(137)}),
			want: "alice's server ended at 2026-12-04 10:22:05 PST: the kubelet evicted the pod from node gpu-3 (The node was low on resource: memory.); phase Failed, reason Evicted, exit code 137.",
		},
		"oom": {
			s:    endedSession("", StopperOOM, nil, "gpu-3", &EndFacts{Phase: "Running", ContainerReason: "OOMKilled", ExitCode: intp(137)}),
			want: "alice's server ended at 2026-12-04 10:22:05 PST: its notebook container was killed for running out of memory (OOMKilled, exit code 137) on node gpu-3; phase Running.",
		},
		"container exit": {
			s:    endedSession("", StopperContainerExit, nil, "n1", &EndFacts{Phase: "Failed", ContainerReason: "Error", ExitCode: intp(1)}),
			want: "alice's server ended at 2026-12-04 10:22:05 PST: its notebook container (or its pod) ended on its own on node n1; phase Failed, container Error, exit code 1.",
		},
		"node lost": {
			s:    endedSession("", StopperNodeLost, nil, "n7", &EndFacts{Phase: "Failed", Reason: "NodeLost", Message: "Node n7 which was running pod jupyter-alice is unresponsive"}),
			want: "alice's server ended at 2026-12-04 10:22:05 PST: its node n7 went away, and the pod with it (Node n7 which was running pod jupyter-alice is unresponsive); phase Failed, reason NodeLost.",
		},
		"deleted": {
			s:    endedSession("", StopperDeleted, nil, "n1", nil),
			want: "alice's server ended at 2026-12-04 10:22:05 PST: its pod was deleted outside the hub (with kubectl delete, say).",
		},
		"preempted": {
			s:    endedSession("", StopperPreempted, nil, "gpu-1", &EndFacts{Reason: "Preempted", Message: "Booking dsc20-lab needs 4 a5000 GPUs from 10:30."}),
			want: "alice's server was preempted by the GPU reservation engine at 2026-12-04 10:22:05 PST: Booking dsc20-lab needs 4 a5000 GPUs from 10:30.",
		},
		"preempted, no message": {
			s:    endedSession("", StopperPreempted, nil, "gpu-1", nil),
			want: "alice's server was preempted by the GPU reservation engine at 2026-12-04 10:22:05 PST to free its GPUs for a booking.",
		},
		"reservation cancelled": {
			s:    endedSession("", StopperReservationCancelled, nil, "gpu-1", &EndFacts{Message: "Booking dsc10-week3 was cancelled by admin carol."}),
			want: "alice's server was stopped at 2026-12-04 10:22:05 PST because its GPU booking dsc10-week3 was cancelled: Booking dsc10-week3 was cancelled by admin carol.",
		},
		"reservation reassigned": {
			s:    endedSession("", StopperReservationReassigned, nil, "gpu-1", nil),
			want: "alice's server was stopped at 2026-12-04 10:22:05 PST because its GPU booking dsc10-week3 was given to another owner.",
		},
		"unknown stopper": {
			s:    endedSession("", "alien", nil, "", &EndFacts{Phase: "Failed"}),
			want: `alice's server ended at 2026-12-04 10:22:05 PST (stopped by "alien"); phase Failed.`,
		},
		"UTC when no location": {
			s:    endedSession("", StopperDeleted, nil, "", nil),
			loc:  nil,
			want: "alice's server ended at 2026-12-04 18:22:05 UTC: its pod was deleted outside the hub (with kubectl delete, say).",
		},
		"running": {
			s:    Session{Identity: Identity{User: "alice"}, Started: ended, ReadyAt: &ended, ScheduledAt: &ended, Node: "n1"},
			want: "alice's server is still running (ready since 2026-12-04 10:22:05 PST).",
		},
		"scheduled": {
			s:    Session{Identity: Identity{User: "alice", Server: "gpu"}, Started: ended, ScheduledAt: &ended, Node: "gpu-2"},
			want: `alice's server "gpu" is starting on node gpu-2 (scheduled at 2026-12-04 10:22:05 PST).`,
		},
		"requested": {
			s:    Session{Identity: Identity{User: "alice"}, Started: ended, RequestedAt: &ended},
			want: "alice's server is starting (since 2026-12-04 10:22:05 PST).",
		},
		"stopping": {
			s:    Session{Identity: Identity{User: "alice"}, Started: ended, ReadyAt: &ended, StopRequestedAt: &ended, StopRequestedBy: &Actor{Kind: ActorAdmin, Name: "bob"}},
			want: "alice's server is stopping: admin bob asked for it to stop at 2026-12-04 10:22:05 PST.",
		},
	}
	covered := make(map[Stopper]string)
	for name, tc := range tests {
		loc := pst
		if name == "UTC when no location" {
			loc = tc.loc
		}
		got := Why(tc.s, loc)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: Why (-want,+got):\n%s", name, diff)
		}
		if tc.s.EndedAt != nil {
			covered[tc.s.Stopper] = got
		}
	}
	// Every stopper has its own sentence.
	seen := make(map[string]Stopper)
	for _, st := range Stoppers {
		s := Why(endedSession("", st, nil, "", nil), time.UTC)
		if _, ok := covered[st]; !ok {
			t.Errorf("stopper %q has no test case", st)
		}
		if other, ok := seen[s]; ok {
			t.Errorf("stoppers %q and %q have the same sentence %q", st, other, s)
		}
		seen[s] = st
	}
}
