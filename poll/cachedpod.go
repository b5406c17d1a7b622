package poll

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// cachedPod is what the pod cache keeps of a pod: the fields spawnerd reads,
// in a layout of its own. A corev1.Pod is about 1.2 KB before any of its
// values (its spec and status structs are mostly fields spawnerd never
// reads), and each of its containers another 400 bytes; this is about a
// third of that. The cache's readers get a corev1.Pod made from it (pod),
// so the cache's type stays inside this package. The embedded ObjectMeta
// makes it a metav1.Object, which the informer's store keys by.
type cachedPod struct {
	metav1.ObjectMeta
	nodeName string
	phase    corev1.PodPhase
	reason   string
	message  string
	podIP    string
	// containers are the spec's containers: the notebook's port gives the
	// server's URL, its image shows in the admin list.
	containers        []cachedContainer
	conditions        []corev1.PodCondition
	containerStatuses []corev1.ContainerStatus
}

type cachedContainer struct {
	name, image string
	ports       []corev1.ContainerPort
}

// pod returns a corev1.Pod holding what the cache keeps. It shares the
// cached maps and slices: never modify them.
func (c *cachedPod) pod() *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: c.ObjectMeta,
		Spec:       corev1.PodSpec{NodeName: c.nodeName},
		Status: corev1.PodStatus{
			Phase:             c.phase,
			Reason:            c.reason,
			Message:           c.message,
			PodIP:             c.podIP,
			Conditions:        c.conditions,
			ContainerStatuses: c.containerStatuses,
		},
	}
	if len(c.containers) > 0 {
		p.Spec.Containers = make([]corev1.Container, len(c.containers))
		for i, ct := range c.containers {
			p.Spec.Containers[i] = corev1.Container{Name: ct.name, Image: ct.image, Ports: ct.ports}
		}
	}
	return p
}

// PodVersion names one state of one pod: another UID is another pod,
// another resourceVersion a change to it.
type PodVersion struct {
	UID             types.UID
	ResourceVersion string
}

// VersionOf returns a pod's version.
func VersionOf(pod *corev1.Pod) PodVersion {
	return PodVersion{UID: pod.UID, ResourceVersion: pod.ResourceVersion}
}

func (c *cachedPod) version() PodVersion {
	return PodVersion{UID: c.UID, ResourceVersion: c.ResourceVersion}
}

// asPod returns the pod an informer handed a handler, a cached pod, made
// into a corev1.Pod; nil for anything else.
func asPod(obj any) *corev1.Pod {
	if c, ok := obj.(*cachedPod); ok {
		return c.pod()
	}
	return nil
}
