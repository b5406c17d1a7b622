package spark_test

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/e2e/harness"
)

// TestReplicaSetReplacesFailedPodButKeepsIt records what the real
// controller-manager does with an evicted pod of a Deployment, without
// spawnerd: the ReplicaSet counts only active pods, so it creates a
// replacement at once, but nothing removes the Failed pod (the pod garbage
// collector waits for 12,500 terminated pods). That is why spawnerd deletes
// stopped Spark pods itself.
func TestReplicaSetReplacesFailedPodButKeepsIt(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	labels := map[string]string{"app": "bare"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example/bare:1"}}},
			},
		},
	}
	_, err := env.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	must(t, err)
	running := func() []corev1.Pod {
		var out []corev1.Pod
		for _, p := range podsBy(t, ns, "app=bare") {
			if harness.PodRunning(&p) {
				out = append(out, p)
			}
		}
		return out
	}
	var first corev1.Pod
	must(t, wait.PollUntilContextTimeout(ctx, harness.Interval, harness.Timeout, true, func(context.Context) (bool, error) {
		r := running()
		if len(r) == 1 {
			first = r[0]
		}
		return len(r) == 1, nil
	}))
	must(t, harness.Evict(ctx, env.Client, ns, first.Name))
	var replacement corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, harness.Interval, harness.Timeout, true, func(context.Context) (bool, error) {
		r := running()
		if len(r) == 1 && r[0].Name != first.Name {
			replacement = r[0]
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the ReplicaSet did not replace the evicted pod %s: %v", first.Name, err)
	}
	kept, err := env.Client.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("evicted pod %s is gone (%v); the controller-manager removed it", first.Name, err)
	}
	if kept.Status.Phase != corev1.PodFailed {
		t.Errorf("evicted pod phase %s, want Failed", kept.Status.Phase)
	}
	t.Logf("replacement %s runs beside the kept Failed pod %s", replacement.Name, first.Name)
}
