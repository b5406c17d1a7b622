package deploy_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestReservationChart installs the chart with the GPU reservation engine
// and Spark on: the CRD, the webhook configuration and the toleration
// policy are created, and the service account may do what the engine and
// Spark clusters need and no more.
func TestReservationChart(t *testing.T) {
	ns := env.Namespace(t)
	if out, err := helm(t, "install", release, chartDir(), "--namespace", ns, "--set", "reservation.enabled=true", "--set", "spark.enabled=true",
		"--set", "reservation.config.classes[0].label=a5000"); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = helm(t, "uninstall", release, "--namespace", ns) })
	ctx := context.Background()
	adm := env.Client.AdmissionregistrationV1()
	whc, err := adm.MutatingWebhookConfigurations().Get(ctx, release+"-gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("webhook configuration: %v", err)
	}
	if svc := whc.Webhooks[0].ClientConfig.Service; svc == nil || svc.Namespace != ns || *svc.Path != "/mutate" {
		t.Errorf("webhook client config %+v", whc.Webhooks[0].ClientConfig)
	}
	pol, err := adm.ValidatingAdmissionPolicies().Get(ctx, release+"-gpu-toleration", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	if w := pol.Status.TypeChecking; w != nil && len(w.ExpressionWarnings) > 0 {
		t.Errorf("policy CEL warnings: %+v", w.ExpressionWarnings)
	}
	exempt := false
	for _, v := range pol.Spec.Variables {
		exempt = exempt || (v.Name == "engine" && strings.Contains(v.Expression, "'system:serviceaccount:"+ns+":"+release+"'"))
	}
	if !exempt {
		t.Errorf("the policy does not exempt the chart's service account: %+v", pol.Spec.Variables)
	}
	if len(pol.Spec.Validations) != 3 {
		t.Errorf("the policy has %d validations, want 3 (class toleration, key-less Exists, GPUs without a class)", len(pol.Spec.Validations))
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Get(ctx, release+"-gpu-toleration", metav1.GetOptions{}); err != nil {
		t.Fatalf("binding: %v", err)
	}
	other := env.Namespace(t)
	for _, a := range []access{
		{"patch", "pods", other, true},
		{"delete", "pods", other, true},
		{"watch", "pods", "*", true},
		{"create", "events", other, true},
		{"list", "nodes", "", true},
		{"create", "gpureservations.reservations.dsmlp.io", "", true},
		{"patch", "gpureservations.reservations.dsmlp.io", "", true},
		{"delete", "gpureservations.reservations.dsmlp.io", "", false},
		{"update", "leases.coordination.k8s.io", ns, true},
		{"watch", "leases.coordination.k8s.io", ns, true},
		// The webhook certificate Secret, by name; any Secret may be
		// created (RBAC cannot name a create's object), none listed or read.
		{"get", "secrets:" + release + "-webhook-cert", ns, true},
		{"update", "secrets:" + release + "-webhook-cert", ns, true},
		{"create", "secrets", ns, true},
		{"get", "secrets:" + release, ns, false},
		{"list", "secrets", ns, false},
		{"watch", "secrets", ns, false},
		{"delete", "secrets:" + release + "-webhook-cert", ns, false},
		{"get", "secrets:" + release + "-webhook-cert", other, false},
		{"update", "leases.coordination.k8s.io", other, false},
		{"create", "pods", other, false},
		{"update", "nodes", "", false},
		{"create", "mutatingwebhookconfigurations.admissionregistration.k8s.io", "", false},
		// spark.enabled: Spark clusters in the notebook namespace.
		{"create", "deployments.apps", ns, true},
		{"delete", "configmaps", ns, true},
		{"patch", "configmaps", ns, true},
		{"watch", "endpointslices.discovery.k8s.io", ns, true},
		{"list", "resourcequotas", ns, true},
		{"update", "deployments.apps", ns, false},
	} {
		if got := canI(t, ns, a); got != a.want {
			t.Errorf("can %s: %v, want %v", a, got, a.want)
		}
	}
}
