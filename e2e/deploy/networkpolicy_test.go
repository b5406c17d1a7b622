package deploy_test

import (
	"context"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNetworkPolicy applies the chart's NetworkPolicy and reads it back from
// the API server: ingress only from the hub, the hub's proxy (the console)
// and the metrics scraper to the API port, and from the API server's
// addresses to the webhook port. The
// dev cluster runs no network plugin that enforces policies, so what is
// checked is the object the plugin would enforce, not dropped packets.
func TestNetworkPolicy(t *testing.T) {
	ns := env.Namespace(t)
	apply(t, mustRender(t, ns, "--set", "reservation.enabled=true", "--set", "networkPolicy.apiServer.cidrs={10.0.0.1/32}"))
	np, err := env.Client.NetworkingV1().NetworkPolicies(ns).Get(context.Background(), release, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("network policy: %v", err)
	}
	if got := np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"]; got != "spawnerd" {
		t.Errorf("the policy selects pods %v, not spawnerd's", np.Spec.PodSelector.MatchLabels)
	}
	if len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
		t.Errorf("policy types %v, want [Ingress]", np.Spec.PolicyTypes)
	}
	port := func(r networkingv1.NetworkPolicyIngressRule) string {
		if len(r.Ports) != 1 || r.Ports[0].Port == nil {
			return "?"
		}
		return r.Ports[0].Port.String()
	}
	rules := np.Spec.Ingress
	if len(rules) != 4 {
		t.Fatalf("%d ingress rules, want 4 (hub, proxy, scraper, API server): %+v", len(rules), rules)
	}
	// zero-to-jupyterhub's pods of the release namespace.
	z2jh := func(r networkingv1.NetworkPolicyIngressRule, component string) bool {
		return port(r) == "http" && len(r.From) == 1 && r.From[0].PodSelector != nil && r.From[0].NamespaceSelector == nil &&
			r.From[0].PodSelector.MatchLabels["component"] == component && r.From[0].PodSelector.MatchLabels["app"] == "jupyterhub"
	}
	if hub := rules[0]; !z2jh(hub, "hub") {
		t.Errorf("hub rule %+v: want zero-to-jupyterhub's hub pod in the release namespace, port http", hub)
	}
	// The hub's proxy forwards the console's requests.
	if proxy := rules[1]; !z2jh(proxy, "proxy") {
		t.Errorf("proxy rule %+v: want zero-to-jupyterhub's proxy pod in the release namespace, port http", proxy)
	}
	scraper := rules[2]
	if port(scraper) != "http" || len(scraper.From) != 1 || scraper.From[0].NamespaceSelector == nil ||
		scraper.From[0].PodSelector == nil || scraper.From[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != "prometheus" {
		t.Errorf("scraper rule %+v: want prometheus pods of any namespace, port http", scraper)
	}
	api := rules[3]
	if port(api) != "webhook" || len(api.From) != 1 || api.From[0].IPBlock == nil || api.From[0].IPBlock.CIDR != "10.0.0.1/32" {
		t.Errorf("API server rule %+v: want ipBlock 10.0.0.1/32, port webhook", api)
	}

	// Without the GPU engine there is no webhook port to open.
	plain := env.Namespace(t)
	apply(t, mustRender(t, plain))
	np, err = env.Client.NetworkingV1().NetworkPolicies(plain).Get(context.Background(), release, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("network policy: %v", err)
	}
	for _, r := range np.Spec.Ingress {
		if port(r) != "http" {
			t.Errorf("without reservation, a rule opens port %s", port(r))
		}
	}
}
