package reservation_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/reservation"
)

// The chart's policy closes the ways around the class taint that a pod
// spec allows: a key-less Exists toleration (it tolerates every taint), and
// GPUs asked for without the gpu-class label (the engine never sees them).
func TestPolicyRefusesBookingBypasses(t *testing.T) {
	n := env.Namespace(t)
	student := impersonate(t, "student2")
	gpus := corev1.ResourceList{devcluster.ResourceGPU: *resource.NewQuantity(1, resource.DecimalSI)}
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.Pod)
		why    string // "" = accepted
	}{
		{"exists-all", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		}, "no key and operator Exists"},
		{"exists-noschedule", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		}, "no key and operator Exists"},
		{"gpus-no-class", func(p *corev1.Pod) {
			delete(p.Labels, reservation.ClassLabel)
			p.Spec.Containers[0].Resources.Limits = gpus
		}, "needs the gpu-class label"},
		{"gpus-init-no-class", func(p *corev1.Pod) {
			delete(p.Labels, reservation.ClassLabel)
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", Resources: corev1.ResourceRequirements{Limits: gpus}}}
		}, "needs the gpu-class label"},
		// Not bypasses: a NoExecute wildcard (the class taint is NoSchedule),
		// a keyed toleration of another taint, and a CPU pod without a class.
		{"exists-noexecute", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
		}, ""},
		{"other-key", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
		}, ""},
		{"cpu-no-class", func(p *corev1.Pod) {
			delete(p.Labels, reservation.ClassLabel)
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "cpu-0"}
		}, ""},
	} {
		p := gpuPod(tc.name, "misc", 1)
		if tc.name == "cpu-no-class" {
			p = gpuPod(tc.name, "misc", 0)
		}
		tc.mutate(p)
		_, err := student.CoreV1().Pods(n).Create(context.Background(), p, metav1.CreateOptions{})
		switch {
		case tc.why == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.why != "" && err == nil:
			t.Errorf("%s: accepted, want refused (%s)", tc.name, tc.why)
		case tc.why != "" && !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
			t.Errorf("%s: err %v, want a policy refusal", tc.name, err)
		case tc.why != "" && !strings.Contains(err.Error(), tc.why):
			t.Errorf("%s: the refusal does not say why (%q): %v", tc.name, tc.why, err)
		}
	}
}

// A GPU pod the engine does not manage (no gpu-class label: made before the
// policy existed, or by an exempt identity, or bound straight to a node)
// still holds GPUs: the engine counts it and never promises them again.
func TestUnmanagedGPUPodCountedInOccupancy(t *testing.T) {
	n := env.Namespace(t)
	node := "g-foreign-0" // the class's only node: 2 GPUs
	foreign := gpuPod("foreign", "foreign", 1)
	delete(foreign.Labels, reservation.ClassLabel)
	foreign.Spec.NodeName = node // past the scheduler and its taints, as a bound pod is
	create(t, n, foreign)        // the tests' admin is the engine's identity, so the policy lets it through
	env.WaitForPod(t, n, "foreign", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

	create(t, n, gpuPod("first", "foreign", 1))
	waitAdmitted(t, n, "first", "foreign")
	create(t, n, gpuPod("second", "foreign", 1))
	// Without the unmanaged pod 1 GPU would be left; with it, none is.
	wantEvent(t, n, "second", reservation.OnDemandLeaseDenied, warning, "Only 0 GPU(s)", "foreign")
	wantHeld(t, n, "second")
	classes, err := ctl.Classes(6 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var status *reservation.ClassStatus
	for i := range classes {
		if classes[i].Class == "foreign" {
			status = &classes[i]
		}
	}
	if status == nil {
		t.Fatal("no status for class foreign")
	}
	if status.Used != 2 || status.Capacity != 2 {
		t.Errorf("class foreign: used %d of %d, want 2 of 2 (the unmanaged pod's GPU counted)", status.Used, status.Capacity)
	}
	// Once it is gone its GPU is free again, and the waiting pod gets it.
	if err := env.Client.CoreV1().Pods(n).Delete(context.Background(), "foreign", metav1.DeleteOptions{GracePeriodSeconds: ptrInt64(0)}); err != nil {
		t.Fatal(err)
	}
	waitAdmitted(t, n, "second", "foreign")
}
