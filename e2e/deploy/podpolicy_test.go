package deploy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dsmlp/spawner/e2e/harness"
)

// asServiceAccount is a client that impersonates the chart's service
// account in ns, as spawnerd's own token would act.
func asServiceAccount(t *testing.T, ns string) kubernetes.Interface {
	t.Helper()
	rc := rest.CopyConfig(env.Config)
	rc.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + release,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func plainPod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
}

var dryRun = []string{metav1.DryRunAll}

// byPolicy reports whether err is the pod write policy's refusal.
func byPolicy(err error) bool { return err != nil && strings.Contains(err.Error(), "-pod-writes'") }

// TestPodWritePolicy applies the chart with the GPU engine and user
// namespaces, whose RBAC lets spawnerd's service account patch and delete
// pods in every namespace and create them in any: the pod write policy
// narrows that to the engine's admission PATCH (class toleration,
// reservation annotations, gate removal), creates in the notebook namespace
// and labelled user namespaces, and deletes of its own and GPU pods.
func TestPodWritePolicy(t *testing.T) {
	ns := env.Namespace(t)
	m := mustRender(t, ns, "--set", "reservation.enabled=true", "--set", "userNamespaces.enabled=true")
	label := "spawnerd.dsmlp.io/user-namespace"
	// spawnerd labels the user namespaces it creates (the chart's config).
	if got := spawnerConfig(t, m).UserNamespaceLabels[label]; got != ns+"-"+release {
		t.Errorf("user_namespace_labels[%s] = %q, want %q", label, got, ns+"-"+release)
	}
	apply(t, m)
	waitForRBAC(t, ns)
	ctx := context.Background()
	admin := env.Client
	sa := asServiceAccount(t, ns)

	// A pod of kube-system, one of somebody's namespace with a scheduling
	// gate, and a GPU pod there; a user namespace of this release.
	sysPod, err := admin.CoreV1().Pods("kube-system").Create(ctx, plainPod("podpolicy-"+ns, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Pods("kube-system").Delete(context.Background(), sysPod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	other := env.Namespace(t)
	gated := plainPod("gated", map[string]string{"gpu-class": "a5000"})
	gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "dsmlp.io/gpu-admission"}}
	if _, err := admin.CoreV1().Pods(other).Create(ctx, gated, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	userNs := env.Namespace(t)
	if _, err := admin.CoreV1().Namespaces().Patch(ctx, userNs, types.MergePatchType,
		fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, label, ns+"-"+release), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	imagePatch := []byte(`{"spec":{"containers":[{"name":"c","image":"evil:latest"}]}}`)
	patch := func(c kubernetes.Interface, pns, name string, body []byte, opts metav1.PatchOptions) error {
		_, err := c.CoreV1().Pods(pns).Patch(ctx, name, types.StrategicMergePatchType, body, opts)
		return err
	}
	// RBAC allows the image change (the engine's ClusterRole); the policy,
	// once the API server has loaded it, refuses it. Dry runs: a policy that
	// does not hold must not change kube-system.
	err = wait.PollUntilContextTimeout(ctx, harness.Interval, harness.Timeout, true, func(context.Context) (bool, error) {
		err := patch(sa, "kube-system", sysPod.Name, imagePatch, metav1.PatchOptions{DryRun: dryRun})
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), nil
	})
	if err != nil {
		t.Fatalf("spawnerd's service account may change a kube-system pod's image")
	}

	refused := map[string]struct {
		ns, name string
		body     string
	}{
		"a kube-system pod's image":      {"kube-system", sysPod.Name, string(imagePatch)},
		"an annotation outside galends/": {other, "gated", `{"metadata":{"annotations":{"example.com/x":"1"}}}`},
		"a label":                        {other, "gated", `{"metadata":{"labels":{"gpu-class":"other"}}}`},
		"another toleration":             {other, "gated", `{"spec":{"tolerations":[{"key":"dedicated","operator":"Exists"}]}}`},
		"a container image":              {other, "gated", string(imagePatch)},
	}
	for what, c := range refused {
		if err := patch(sa, c.ns, c.name, []byte(c.body), metav1.PatchOptions{DryRun: dryRun}); !byPolicy(err) {
			t.Errorf("spawnerd's service account changing %s: %v, want refused by the pod write policy", what, err)
		}
	}

	// The engine's admission: class toleration, reservation annotations,
	// gate removed, in one PATCH (a merge patch, as the engine sends).
	admission := `{"metadata":{"annotations":{"galends/booking-reference":"res-1","galends/reservation-kind":"booking"}},` +
		`"spec":{"tolerations":[{"key":"gpu-class-reservation","operator":"Equal","value":"a5000","effect":"NoSchedule"}],"schedulingGates":[]}}`
	p, err := sa.CoreV1().Pods(other).Patch(ctx, "gated", types.MergePatchType, []byte(admission), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("the engine's admission PATCH was refused: %v", err)
	}
	if p.Annotations["galends/booking-reference"] != "res-1" || len(p.Spec.Tolerations) == 0 || len(p.Spec.SchedulingGates) != 0 {
		t.Errorf("admission PATCH not applied: %+v %+v", p.Annotations, p.Spec)
	}
	// A later annotation update (a termination warning), and a removal.
	if _, err := sa.CoreV1().Pods(other).Patch(ctx, "gated", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"galends/termination-warning-at":"2030-01-01T00:00:00Z","galends/reservation-kind":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("an annotation update was refused: %v", err)
	}

	// Creates: the notebook namespace and a labelled user namespace, not
	// an unlabelled namespace (RBAC would allow it: a ClusterRole).
	creates := []struct {
		ns   string
		want bool
	}{{ns, true}, {userNs, true}, {other, false}, {"kube-system", false}}
	for _, c := range creates {
		_, err := sa.CoreV1().Pods(c.ns).Create(ctx, plainPod("created", nil), metav1.CreateOptions{DryRun: dryRun})
		if (err == nil) != c.want || (err != nil && !byPolicy(err)) {
			t.Errorf("create a pod in %s: error %v, want allowed %v", c.ns, err, c.want)
		}
	}
	// Deletes: a GPU pod anywhere (evictions), not another kube-system pod.
	if err := sa.CoreV1().Pods(other).Delete(ctx, "gated", metav1.DeleteOptions{DryRun: dryRun}); err != nil {
		t.Errorf("the engine's eviction of a GPU pod was refused: %v", err)
	}
	if err := sa.CoreV1().Pods("kube-system").Delete(ctx, sysPod.Name, metav1.DeleteOptions{DryRun: dryRun}); !byPolicy(err) {
		t.Errorf("spawnerd's service account deleting a kube-system pod: %v, want refused by the pod write policy", err)
	}

	pol, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, ns+"-"+release+"-pod-writes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w := pol.Status.TypeChecking; w != nil && len(w.ExpressionWarnings) > 0 {
		t.Errorf("policy CEL warnings: %+v", w.ExpressionWarnings)
	}
}
