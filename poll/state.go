package poll

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dsmlp/spawner/serverid"
)

// State is what the hub's poll() needs to know about a notebook pod.
type State string

// The states a notebook pod can be in. Stopped and absent both make the hub's
// poll() return an exit code; pending and running both make it return None.
const (
	// StatePending means the pod exists and is starting, not ready, or being
	// deleted: a pod with a deletionTimestamp that is not yet stopped is
	// still pending, since its container may still be serving and the hub
	// must not forget it before it is gone.
	StatePending State = "pending"
	// StateRunning matches KubeSpawner's is_pod_running: phase Running, a pod IP,
	// no deletionTimestamp and every container ready.
	StateRunning State = "running"
	// StateStopped means phase Failed or Succeeded, or a terminated notebook
	// container.
	StateStopped State = "stopped"
	// StateAbsent means there is no such pod in the cache.
	StateAbsent State = "absent"
)

// Stopped reports whether the hub should consider the server stopped.
func (s State) Stopped() bool { return s == StateStopped || s == StateAbsent }

// NotebookContainer is the name of the container whose state decides whether
// a server stopped (KubeSpawner's make_pod names it so).
const NotebookContainer = "notebook"

// ReasonDeleted is StopInfo.Reason for a pod that was deleted while it was
// not (yet) stopped by the phase/container rule.
const ReasonDeleted = "Deleted"

// defaultExitCode is what KubeSpawner's poll returns when no container exit
// code is known.
const defaultExitCode = 1

// Annotation and label keys that name the hub user and server of a pod, in
// the order they are tried.
const (
	// AnnotationUser is this service's raw hub user name.
	AnnotationUser = serverid.AnnotationUser
	// AnnotationServerName is this service's raw hub server name.
	AnnotationServerName = serverid.AnnotationServer
	// AnnotationHubUsername is KubeSpawner's raw user name annotation.
	AnnotationHubUsername = "hub.jupyter.org/username"
	// AnnotationHubServer is KubeSpawner's raw server name annotation, set
	// for named servers only.
	AnnotationHubServer = "hub.jupyter.org/servername"
	// LabelHubServer is KubeSpawner's server name label ("" for the default
	// server; a label-safe slug otherwise).
	LabelHubServer = "hub.jupyter.org/servername"
)

// ServerRef identifies a hub server and the pod that runs it.
type ServerRef struct {
	User      string // raw hub user name
	Server    string // raw hub server name, "" for the default server
	Namespace string
	Pod       string
}

// StopInfo says why a pod stopped.
type StopInfo struct {
	Phase           string    // pod status.phase when it stopped
	Reason          string    // pod status.reason ("Evicted", ...) or ReasonDeleted
	Message         string    // pod status.message, else the notebook container's termination message
	ContainerReason string    // notebook container's terminated reason ("OOMKilled", "Completed", ...)
	ExitCode        int       // notebook container's exit code, else 1
	At              time.Time // when it stopped (container finish, else first seen stopped)
	PodDeleted      bool      // the pod object is gone
	// Terminated: the notebook container has a terminated state, so
	// ExitCode and ContainerReason are its own, not defaults.
	Terminated bool
}

// Status is the state of one notebook pod as the cache shows it.
type Status struct {
	State    State
	ExitCode int       // for the hub's poll() when State.Stopped()
	Stop     *StopInfo // set when State.Stopped() and the reason is known
	// Pod is the cached pod, trimmed to what the service reads (see
	// trimPod), nil when absent. It is shared with the cache: read-only.
	Pod *corev1.Pod
}

// serverRefOf reads the hub names from the pod's annotations, preferring this
// service's own annotations over KubeSpawner's.
func serverRefOf(pod *corev1.Pod) ServerRef {
	ref := ServerRef{Namespace: pod.Namespace, Pod: pod.Name}
	ann := pod.Annotations
	if u, ok := ann[AnnotationUser]; ok {
		ref.User = u
	} else {
		ref.User = ann[AnnotationHubUsername]
	}
	if s, ok := ann[AnnotationServerName]; ok {
		ref.Server = s
	} else if s, ok := ann[AnnotationHubServer]; ok {
		ref.Server = s
	} else {
		// The label is a label-safe slug; it equals the raw name for the
		// simple names KubeSpawner users mostly have.
		ref.Server = pod.Labels[LabelHubServer]
	}
	return ref
}

// notebookStatus returns the status of the notebook container, or nil.
func notebookStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == NotebookContainer {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// classify applies the stopped rule to a pod. It is stricter than
// KubeSpawner's poll, which ignores the phase: seed 003 shows an evicted pod
// whose notebook container still reads running, so phase Failed/Succeeded
// counts as stopped whatever the container says.
func classify(pod *corev1.Pod) (State, *StopInfo) {
	nb := notebookStatus(pod)
	var term *corev1.ContainerStateTerminated
	if nb != nil {
		term = nb.State.Terminated
	}
	phase := pod.Status.Phase
	if phase == corev1.PodFailed || phase == corev1.PodSucceeded || term != nil {
		return StateStopped, stopInfoOf(pod, term)
	}
	if isRunning(pod) {
		return StateRunning, nil
	}
	return StatePending, nil
}

// isRunning matches KubeSpawner's is_pod_running.
func isRunning(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
		return false
	}
	if len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if !cs.Ready {
			return false
		}
	}
	return true
}

// stopInfoOf describes a stopped pod; At is left zero when the pod carries no
// time for the stop.
func stopInfoOf(pod *corev1.Pod, term *corev1.ContainerStateTerminated) *StopInfo {
	info := &StopInfo{
		Phase:    string(pod.Status.Phase),
		Reason:   pod.Status.Reason,
		Message:  pod.Status.Message,
		ExitCode: defaultExitCode,
	}
	if term != nil {
		info.Terminated = true
		info.ExitCode = int(term.ExitCode)
		info.ContainerReason = term.Reason
		if info.Message == "" {
			info.Message = term.Message
		}
		info.At = term.FinishedAt.Time
	}
	if info.At.IsZero() {
		// A disruption (an API eviction, the pod GC, a node shutdown) is
		// stamped on its condition. A kubelet eviction as seed 003 shows
		// it changes no condition: its time stays zero, to be filled with
		// when the stop was first seen (the newest transition there is
		// the pod's Ready, its start, not its end).
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
				info.At = c.LastTransitionTime.Time
			}
		}
	}
	return info
}

// deletedStopInfo describes a pod that disappeared, from its last known state.
func deletedStopInfo(pod *corev1.Pod) *StopInfo {
	if state, info := classify(pod); state == StateStopped {
		info.PodDeleted = true
		return info
	}
	info := stopInfoOf(pod, nil)
	info.Reason = ReasonDeleted
	info.At = time.Time{}
	info.PodDeleted = true
	return info
}

// StopOf applies the stopped rule to a pod: its stop, and true, if it is
// stopped (phase Failed or Succeeded, or a terminated notebook container).
func StopOf(pod *corev1.Pod) (StopInfo, bool) {
	state, info := classify(pod)
	if state != StateStopped {
		return StopInfo{}, false
	}
	return *info, true
}

// EndOf describes how a pod that is gone, or being deleted, ended, from its
// last known state: its stop if it was stopped, else ReasonDeleted.
func EndOf(pod *corev1.Pod) StopInfo { return *deletedStopInfo(pod) }
