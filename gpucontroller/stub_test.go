package gpucontroller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsmlp/spawner/reservation"
)

func TestGPUStubKeepsOnlyWhatOccupancyNeeds(t *testing.T) {
	gpu := func(n int64) corev1.ResourceList {
		return corev1.ResourceList{reservation.GPUResource: *resource.NewQuantity(n, resource.DecimalSI)}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Labels: map[string]string{"a": "b"},
			Annotations: map[string]string{"big": "x"}},
		Spec: corev1.PodSpec{NodeName: "g-0",
			InitContainers: []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Limits: gpu(3)}}},
			Containers: []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Limits: gpu(1)}},
				{Name: "b", Resources: corev1.ResourceRequirements{Requests: gpu(1)}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	obj, err := gpuStub(pod)
	if err != nil {
		t.Fatal(err)
	}
	stub := obj.(*corev1.Pod)
	if !holdsGPUs(stub) || reservation.PodGPUs(stub) != 3 {
		t.Errorf("stub holds %d GPUs, want 3 (the init container's, as the scheduler counts)", reservation.PodGPUs(stub))
	}
	if stub.Spec.NodeName != "g-0" || stub.Status.Phase != corev1.PodRunning || stub.UID != "u1" {
		t.Errorf("stub lost where or whether it runs: %+v", stub)
	}
	if stub.Labels != nil || stub.Annotations != nil || len(stub.Spec.InitContainers) != 0 {
		t.Errorf("stub keeps more than it needs: %+v", stub)
	}
	pod.Spec.InitContainers, pod.Spec.Containers = nil, []corev1.Container{{Name: "cpu"}}
	obj, _ = gpuStub(pod)
	if holdsGPUs(obj) {
		t.Error("a CPU pod's stub holds GPUs")
	}
}
