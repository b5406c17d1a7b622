package poll

import (
	"strings"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/dsmlp/spawner/serverid"
	"github.com/dsmlp/spawner/spawner"
)

// lastAppliedAnnotation is kubectl's copy of the whole manifest; it can be
// bigger than everything else the cache keeps of a pod.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// trimPod is the pod informer's cache.TransformFunc. It builds the cached
// form of a pod (cachedPod), holding only what Status, the admin list, the
// session history and the stop reaction read, so the decoded original (env,
// volumes, affinity, managedFields, ...) becomes garbage. It is idempotent,
// as client-go requires of transforms: a cachedPod passes through.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		// cache.DeletedFinalStateUnknown and friends pass through.
		return obj, nil
	}
	out := &cachedPod{
		ObjectMeta: trimMeta(pod.ObjectMeta),
		nodeName:   intern(pod.Spec.NodeName),
		phase:      intern(pod.Status.Phase),
		reason:     intern(pod.Status.Reason),
		message:    pod.Status.Message,
		podIP:      pod.Status.PodIP,
		containers: make([]cachedContainer, len(pod.Spec.Containers)),
	}
	for i, c := range pod.Spec.Containers {
		// Ports give the URL: KubeSpawner reads the port named notebook-port.
		out.containers[i] = cachedContainer{name: intern(c.Name), image: intern(c.Image), ports: c.Ports}
	}
	n := 0
	for _, c := range pod.Status.Conditions {
		if keptConditions[c.Type] {
			n++
		}
	}
	if n > 0 {
		out.conditions = make([]corev1.PodCondition, 0, n)
	}
	for _, c := range pod.Status.Conditions {
		if !keptConditions[c.Type] {
			continue
		}
		out.conditions = append(out.conditions, corev1.PodCondition{
			Type:               intern(c.Type),
			Status:             intern(c.Status),
			Reason:             intern(c.Reason),
			Message:            c.Message,
			LastTransitionTime: c.LastTransitionTime,
		})
	}
	out.containerStatuses = trimContainerStatuses(pod.Status.ContainerStatuses)
	return out, nil
}

// keptConditions are the pod conditions that say why a pod is not running:
// unschedulable, not ready, or about to be evicted or preempted.
var keptConditions = map[corev1.PodConditionType]bool{
	corev1.PodScheduled:     true,
	corev1.PodReady:         true,
	corev1.DisruptionTarget: true,
}

// perServerValues are annotation and label keys whose values differ from
// server to server: interning them would add an intern table entry for
// each and share nothing.
var perServerValues = map[string]bool{
	serverid.LabelKey:                true,
	serverid.AnnotationUser:          true,
	AnnotationHubUsername:            true,
	serverid.AnnotationRequestedBy:   true,
	serverid.AnnotationStartDeadline: true,
}

// perPodReservation are the reservation engine's annotations (after its
// configurable prefix) whose values differ from pod to pod.
var perPodReservation = []string{
	"booking-reference", "reservation-start", "reservation-end", "admitted-at", "guaranteed-until",
	"termination-warning-at", "termination-warning-message",
}

// intern returns the canonical copy of a string that many cached objects
// repeat (label keys, images, node names), so each pod does not hold its own
// decoded copy.
func intern[S ~string](s S) S {
	if s == "" {
		return s
	}
	return S(unique.Make(string(s)).Value())
}

// internValue interns v unless it is the value of a per-server key.
func internValue(key, v string) string {
	if perServerValues[key] {
		return v
	}
	for _, suffix := range perPodReservation {
		if strings.HasSuffix(key, suffix) {
			return v
		}
	}
	return intern(v)
}

// keptLabels are the labels spawnerd reads from its pod cache; add a key
// here before reading it. A notebook pod carries a dozen (KubeSpawner's,
// the chart's, the network policy's): all of them would take a map twice
// the size, a sixth of the pod's cached bytes.
var keptLabels = map[string]bool{
	serverid.LabelKey:      true,
	LabelHubServer:         true,
	spawner.LabelCourse:    true,
	spawner.LabelGPUClass:  true,
	spawner.LabelComponent: true,
}

func trimLabels(m map[string]string) map[string]string {
	n := 0
	for k := range m {
		if keptLabels[k] {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make(map[string]string, n)
	for k, v := range m {
		if keptLabels[k] {
			out[intern(k)] = internValue(k, v)
		}
	}
	return out
}

func trimAnnotations(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	// spawnerd's and KubeSpawner's user annotations hold the same name:
	// one copy serves both.
	var user string
	for k, v := range m {
		switch k {
		case lastAppliedAnnotation:
			continue
		case serverid.AnnotationUser, AnnotationHubUsername:
			if v == user {
				v = user
			}
			user = v
		}
		out[intern(k)] = internValue(k, v)
	}
	return out
}

func trimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name:                       m.Name,
		Namespace:                  intern(m.Namespace),
		UID:                        m.UID,
		ResourceVersion:            m.ResourceVersion,
		CreationTimestamp:          m.CreationTimestamp,
		DeletionTimestamp:          m.DeletionTimestamp,
		DeletionGracePeriodSeconds: m.DeletionGracePeriodSeconds,
		Labels:                     trimLabels(m.Labels),
		Annotations:                trimAnnotations(m.Annotations),
	}
	// The stop reaction reads FinalizerStopReport.
	if len(m.Finalizers) > 0 {
		out.Finalizers = make([]string, len(m.Finalizers))
		for i, f := range m.Finalizers {
			out.Finalizers[i] = intern(f)
		}
	}
	return out
}

func trimContainerStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(in))
	for i, cs := range in {
		out[i] = corev1.ContainerStatus{
			Name:         intern(cs.Name),
			Ready:        cs.Ready,
			Started:      cs.Started,
			RestartCount: cs.RestartCount,
			State:        cs.State,
			LastTerminationState: corev1.ContainerState{
				// Only the last exit matters (crash loops); drop waiting/running.
				Terminated: cs.LastTerminationState.Terminated,
			},
		}
	}
	return out
}

// trimEvent is the event reflector's transform: it keeps what progress
// messages and failure diagnosis show, so that a watch-list buffers no more
// of an event than the event cache keeps.
func trimEvent(obj any) (any, error) {
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return obj, nil
	}
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:              ev.Name,
			Namespace:         ev.Namespace,
			UID:               ev.UID,
			ResourceVersion:   ev.ResourceVersion,
			CreationTimestamp: ev.CreationTimestamp,
		},
		InvolvedObject: corev1.ObjectReference{
			Kind:      ev.InvolvedObject.Kind,
			Namespace: ev.InvolvedObject.Namespace,
			Name:      ev.InvolvedObject.Name,
			UID:       ev.InvolvedObject.UID,
			FieldPath: ev.InvolvedObject.FieldPath,
		},
		Reason:              ev.Reason,
		Message:             ev.Message,
		Type:                ev.Type,
		Count:               ev.Count,
		FirstTimestamp:      ev.FirstTimestamp,
		LastTimestamp:       ev.LastTimestamp,
		EventTime:           ev.EventTime,
		Series:              ev.Series,
		Source:              corev1.EventSource{Component: ev.Source.Component},
		ReportingController: ev.ReportingController,
	}, nil
}

var (
	_ cache.TransformFunc = trimPod
	_ cache.TransformFunc = trimEvent
)
