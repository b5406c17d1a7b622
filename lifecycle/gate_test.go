package lifecycle

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsmlp/spawner/spawner"
)

func TestGateOnlyGPUPodsOnce(t *testing.T) {
	const g = "dsmlp.ucsd.edu/gpu-reservation"
	gpu := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{spawner.LabelGPUClass: "a5000"}}}
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		gate string
		want []corev1.PodSchedulingGate
	}{
		"gpu pod gated":      {gpu(), g, []corev1.PodSchedulingGate{{Name: g}}},
		"no gate configured": {gpu(), "", nil},
		"cpu pod left alone": {&corev1.Pod{}, g, nil},
		"foreign gate kept": {func() *corev1.Pod {
			p := gpu()
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "other"}}
			return p
		}(), g, []corev1.PodSchedulingGate{{Name: "other"}, {Name: g}}},
	} {
		t.Run(name, func(t *testing.T) {
			gate(tc.pod, tc.gate)
			gate(tc.pod, tc.gate) // a second pass adds nothing
			if !reflect.DeepEqual(tc.pod.Spec.SchedulingGates, tc.want) {
				t.Errorf("gates = %+v, want %+v", tc.pod.Spec.SchedulingGates, tc.want)
			}
		})
	}
}
