package recorder

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/serverid"
)

// Disruption reasons on a pod's DisruptionTarget condition that mean its
// node went away (k8s.io/api/core/v1, v1.37).
var nodeLostReasons = map[string]bool{
	"DeletionByPodGC":        true, // pod GC: the node object no longer exists
	"DeletionByTaintManager": true, // NoExecute taint, e.g. node.kubernetes.io/unreachable
	"TerminationByKubelet":   true, // graceful node shutdown
}

// engineStoppers are the reservation engine's stop events.
var engineStoppers = map[string]history.Stopper{
	reservation.Preempted:             history.StopperPreempted,
	reservation.ReservationCancelled:  history.StopperReservationCancelled,
	reservation.ReservationReassigned: history.StopperReservationReassigned,
}

// EngineStopper is the stopper of a reservation engine stop event's reason;
// false for other reasons.
func EngineStopper(reason string) (history.Stopper, bool) {
	s, ok := engineStoppers[reason]
	return s, ok
}

// Classify says who or what ended a pod, from what the cluster shows: the
// stop request written on the pod, the reservation engine's stop event,
// then the pod's own status. It also returns the Kubernetes facts of the
// end; an engine stop's facts are its event's reason and message.
func Classify(pod *corev1.Pod, info poll.StopInfo, events []*corev1.Event) (history.Stopper, history.EndFacts) {
	facts := history.EndFacts{Phase: info.Phase, Reason: info.Reason, Message: info.Message, ContainerReason: info.ContainerReason}
	if info.Terminated {
		code := info.ExitCode
		facts.ExitCode = &code
	}
	if info.Reason == poll.ReasonDeleted && facts.Phase == string(corev1.PodRunning) {
		// The phase of a pod deleted while it ran says nothing of the end.
		facts.Phase = ""
	}
	if kind, name, ok := serverid.StopRequester(pod); ok {
		switch kind {
		case serverid.StopByTimeout:
			return history.StopperStartTimeout, facts
		default:
			return history.StopperOf(history.Actor{Kind: history.ActorKind(kind), Name: name}), facts
		}
	}
	// The engine writes its event before it deletes the pod.
	for i := len(events) - 1; i >= 0; i-- {
		ev := events[i]
		if ev.Source.Component != reservation.Component && ev.ReportingController != reservation.Component {
			continue
		}
		if ev.InvolvedObject.UID != "" && ev.InvolvedObject.UID != pod.UID {
			continue
		}
		if s, ok := engineStoppers[ev.Reason]; ok {
			facts.Reason, facts.Message = ev.Reason, ev.Message
			return s, facts
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && nodeLostReasons[c.Reason] {
			if facts.Reason == "" || facts.Reason == poll.ReasonDeleted {
				facts.Reason, facts.Message = c.Reason, c.Message
			}
			return history.StopperNodeLost, facts
		}
	}
	switch {
	case info.Reason == "Evicted":
		return history.StopperEvicted, facts
	case info.Reason == "NodeLost" || info.Reason == "NodeShutdown" || info.Reason == "Terminated" && strings.Contains(info.Message, "node"):
		return history.StopperNodeLost, facts
	case info.ContainerReason == "OOMKilled":
		return history.StopperOOM, facts
	case info.Reason == poll.ReasonDeleted:
		return history.StopperDeleted, facts
	}
	return history.StopperContainerExit, facts
}
