package poll

import (
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// lastAppliedAnnotation is kubectl's copy of the whole manifest; it can be
// bigger than everything else the cache keeps of a pod.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// trimPod is the pod informer's cache.TransformFunc. It builds a new pod
// holding only what Status, the admin list and the stop reaction read, so the
// decoded original (env, volumes, affinity, managedFields, ...) becomes
// garbage. It is idempotent, as client-go requires of transforms.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		// cache.DeletedFinalStateUnknown and friends pass through.
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: trimMeta(pod.ObjectMeta),
		Spec: corev1.PodSpec{
			NodeName:   intern(pod.Spec.NodeName),
			Containers: make([]corev1.Container, len(pod.Spec.Containers)),
		},
		Status: corev1.PodStatus{
			Phase:     pod.Status.Phase,
			Reason:    pod.Status.Reason,
			Message:   pod.Status.Message,
			PodIP:     pod.Status.PodIP,
			HostIP:    pod.Status.HostIP,
			StartTime: pod.Status.StartTime,
		},
	}
	for i, c := range pod.Spec.Containers {
		// Ports give the URL: KubeSpawner reads the port named notebook-port.
		out.Spec.Containers[i] = corev1.Container{
			Name:  intern(c.Name),
			Image: intern(c.Image),
			Ports: c.Ports,
		}
	}
	for _, c := range pod.Status.Conditions {
		if !keptConditions[c.Type] {
			continue
		}
		out.Status.Conditions = append(out.Status.Conditions, corev1.PodCondition{
			Type:               intern(c.Type),
			Status:             intern(c.Status),
			Reason:             intern(c.Reason),
			Message:            c.Message,
			LastTransitionTime: c.LastTransitionTime,
		})
	}
	out.Status.ContainerStatuses = trimContainerStatuses(pod.Status.ContainerStatuses)
	return out, nil
}

// keptConditions are the pod conditions that say why a pod is not running:
// unschedulable, not ready, or about to be evicted or preempted.
var keptConditions = map[corev1.PodConditionType]bool{
	corev1.PodScheduled:     true,
	corev1.PodReady:         true,
	corev1.DisruptionTarget: true,
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

func internMap(m map[string]string, skip string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if k != skip {
			out[intern(k)] = intern(v)
		}
	}
	return out
}

func trimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name:                       m.Name,
		Namespace:                  m.Namespace,
		UID:                        m.UID,
		ResourceVersion:            m.ResourceVersion,
		CreationTimestamp:          m.CreationTimestamp,
		DeletionTimestamp:          m.DeletionTimestamp,
		DeletionGracePeriodSeconds: m.DeletionGracePeriodSeconds,
		Labels:                     internMap(m.Labels, ""),
		Annotations:                internMap(m.Annotations, lastAppliedAnnotation),
		// The stop reaction reads FinalizerStopReport.
		Finalizers: m.Finalizers,
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

// trimEvent is the event cache's transform: it keeps what progress messages
// and failure diagnosis show.
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
