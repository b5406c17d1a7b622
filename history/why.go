package history

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// whyTime is how Why writes times: what a hub admin reads, with the zone.
const whyTime = "2006-01-02 15:04:05 MST"

// Why says in one sentence how a session ended, with its facts, for a hub
// admin: who or what stopped it and the Kubernetes facts of the end, e.g.
//
//	alice's server ended at 2026-12-04 10:22:05 PST: the kubelet evicted the pod from node gpu-3 (The node was low on resource: memory.); phase Failed, reason Evicted, exit code 137.
//
// A session that has not ended is said to be starting, running or
// stopping. Times are in loc; nil means UTC.
func Why(s Session, loc *time.Location) string {
	if loc == nil {
		loc = time.UTC
	}
	at := func(t *time.Time) string { return t.In(loc).Format(whyTime) }
	server := serverPhrase(s)
	if s.EndedAt == nil {
		switch {
		case s.StopRequestedAt != nil:
			return fmt.Sprintf("%s is stopping: %s asked for it to stop at %s.", server, actorPhrase(s.StopRequestedBy), at(s.StopRequestedAt))
		case s.ReadyAt != nil:
			return fmt.Sprintf("%s is still running (ready since %s).", server, at(s.ReadyAt))
		case s.ScheduledAt != nil && s.Node != "":
			return fmt.Sprintf("%s is starting on node %s (scheduled at %s).", server, s.Node, at(s.ScheduledAt))
		default:
			started := s.Started
			return fmt.Sprintf("%s is starting (since %s).", server, at(&started))
		}
	}
	var end EndFacts
	if s.End != nil {
		end = *s.End
	}
	ended := at(s.EndedAt)
	onNode := ""
	if s.Node != "" {
		onNode = " on node " + s.Node
	}
	by := s.StopRequestedBy
	if by == nil {
		by = &Actor{}
	}
	switch s.Stopper {
	case StopperUser:
		return fmt.Sprintf("%s was stopped by its own user, %s, at %s.", server, s.User, ended)
	case StopperAdmin:
		who := "a hub admin"
		if by.Name != "" {
			who = "admin " + by.Name
		}
		return fmt.Sprintf("%s was stopped by %s at %s.", server, who, ended)
	case StopperCuller:
		who := "the idle culler"
		if by.Name != "" {
			who += " (" + by.Name + ")"
		}
		return fmt.Sprintf("%s was stopped by %s at %s.", server, who, ended)
	case StopperService:
		who := "a hub service"
		if by.Name != "" {
			who = "the hub service " + by.Name
		}
		return fmt.Sprintf("%s was stopped by %s at %s.", server, who, ended)
	case StopperHub:
		return fmt.Sprintf("%s was stopped by the hub itself at %s (a hub shutdown, the cleanup of a failed spawn, or a stop whose requester is unknown).", server, ended)
	case StopperStartTimeout:
		return fmt.Sprintf("%s was removed by spawnerd at %s because its pod was not ready within the start timeout%s.",
			server, ended, engineMessage(end.Message, ""))
	case StopperEvicted:
		from := ""
		if s.Node != "" {
			from = " from node " + s.Node
		}
		return fmt.Sprintf("%s ended at %s: the kubelet evicted the pod%s%s%s.",
			server, ended, from, parenthesized(end.Message), factsPhrase(end, false))
	case StopperOOM:
		cause := strings.Join(nonEmpty(end.ContainerReason, exitPhrase(end.ExitCode)), ", ")
		if cause != "" {
			cause = " (" + cause + ")"
		}
		return fmt.Sprintf("%s ended at %s: its notebook container was killed for running out of memory%s%s%s.",
			server, ended, cause, onNode, factsPhrase(EndFacts{Phase: end.Phase, Reason: end.Reason}, true))
	case StopperContainerExit:
		return fmt.Sprintf("%s ended at %s: its notebook container (or its pod) ended on its own%s%s%s.",
			server, ended, onNode, parenthesized(end.Message), factsPhrase(end, false))
	case StopperNodeLost:
		node := "its node"
		if s.Node != "" {
			node = "its node " + s.Node
		}
		return fmt.Sprintf("%s ended at %s: %s went away, and the pod with it%s%s.",
			server, ended, node, parenthesized(end.Message), factsPhrase(end, false))
	case StopperDeleted:
		return fmt.Sprintf("%s ended at %s: its pod was deleted outside the hub (with kubectl delete, say)%s.",
			server, ended, factsPhrase(end, false))
	case StopperPreempted:
		return fmt.Sprintf("%s was preempted by the GPU reservation engine at %s%s.",
			server, ended, engineMessage(end.Message, " to free its GPUs for a booking"))
	case StopperReservationCancelled:
		return fmt.Sprintf("%s was stopped at %s because %s was cancelled%s.",
			server, ended, bookingPhrase(s), engineMessage(end.Message, ""))
	case StopperReservationReassigned:
		return fmt.Sprintf("%s was stopped at %s because %s was given to another owner%s.",
			server, ended, bookingPhrase(s), engineMessage(end.Message, ""))
	}
	return fmt.Sprintf("%s ended at %s (stopped by %q)%s%s.", server, ended, string(s.Stopper), parenthesized(end.Message), factsPhrase(end, false))
}

// serverPhrase is `alice's server` or `alice's server "gpu"`.
func serverPhrase(s Session) string {
	if s.Server == "" {
		return s.User + "'s server"
	}
	return fmt.Sprintf("%s's server %q", s.User, s.Server)
}

func actorPhrase(a *Actor) string {
	if a == nil {
		return "someone"
	}
	switch a.Kind {
	case ActorUser:
		return "its user"
	case ActorAdmin:
		if a.Name != "" {
			return "admin " + a.Name
		}
		return "a hub admin"
	case ActorCuller:
		return "the idle culler"
	case ActorService:
		if a.Name != "" {
			return "the hub service " + a.Name
		}
		return "a hub service"
	}
	return "the hub"
}

func bookingPhrase(s Session) string {
	if s.Reservation == "" {
		return "its GPU booking"
	}
	return "its GPU booking " + s.Reservation
}

// engineMessage is spawnerd's or the reservation engine's message after a
// colon, or else the fallback.
func engineMessage(msg, fallback string) string {
	if msg = strings.TrimSpace(msg); msg == "" {
		return fallback
	}
	return ": " + strings.TrimSuffix(msg, ".")
}

func parenthesized(msg string) string {
	if msg = strings.TrimSpace(msg); msg == "" {
		return ""
	}
	return " (" + msg + ")"
}

// factsPhrase is "; phase Failed, reason Evicted, exit code 137" for the
// facts that are known ("" if none); skipContainer leaves out the
// container's reason and exit code, when the sentence said them already.
func factsPhrase(e EndFacts, skipContainer bool) string {
	var parts []string
	if e.Phase != "" {
		parts = append(parts, "phase "+e.Phase)
	}
	if e.Reason != "" {
		parts = append(parts, "reason "+e.Reason)
	}
	if e.ContainerReason != "" && !skipContainer {
		parts = append(parts, "container "+e.ContainerReason)
	}
	if !skipContainer {
		parts = append(parts, nonEmpty(exitPhrase(e.ExitCode))...)
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

func exitPhrase(code *int) string {
	if code == nil {
		return ""
	}
	return "exit code " + strconv.Itoa(*code)
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
