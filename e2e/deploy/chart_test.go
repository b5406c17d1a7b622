package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/dsmlp/spawner/spawner"
)

// TestManifestsMatchChart renders the plain manifests the way
// hack/update-manifests.sh does and compares them with the committed file.
func TestManifestsMatchChart(t *testing.T) {
	out := filepath.Join(t.TempDir(), "spawnerd.yaml")
	cmd := exec.Command("bash", filepath.Join(env.RepoDir, "hack", "update-manifests.sh"), out)
	cmd.Env = append(os.Environ(), "HELM="+helmBin, "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/update-manifests.sh: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(env.RepoDir, "deploy", "manifests", "spawnerd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
			i++
		}
		t.Fatalf("deploy/manifests/spawnerd.yaml differs from the chart from line %d (run hack/update-manifests.sh):\ncommitted: %q\nrendered:  %q",
			i+1, lineAt(gl, i), lineAt(wl, i))
	}
	// The committed file must be the operator's whole install but the Secret.
	m := decode(t, got)
	wantIDs := []string{
		"NetworkPolicy/jhub/spawnerd", "PodDisruptionBudget/jhub/spawnerd",
		"ServiceAccount/jhub/spawnerd", "ConfigMap/jhub/spawnerd",
		"Role/jhub/spawnerd", "Role/jhub/spawnerd-leader-election",
		"RoleBinding/jhub/spawnerd", "RoleBinding/jhub/spawnerd-leader-election",
		"Service/jhub/spawnerd", "Deployment/jhub/spawnerd",
		"ValidatingAdmissionPolicy//jhub-spawnerd-pod-writes", "ValidatingAdmissionPolicyBinding//jhub-spawnerd-pod-writes",
	}
	if ids := m.ids(); !reflect.DeepEqual(ids, wantIDs) {
		t.Errorf("plain manifests hold %v, want %v", ids, wantIDs)
	}
}

func lineAt(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "<end of file>"
}

func TestChartLints(t *testing.T) {
	for name, flags := range map[string][]string{
		"defaults":        nil,
		"user namespaces": {"--set", "userNamespaces.enabled=true"},
		"proxy":           {"--set", "proxy.apiURL=http://proxy-api:8001", "--set", "secret.proxyToken=p"},
	} {
		t.Run(name, func(t *testing.T) {
			if out, err := helm(t, append([]string{"lint", "--strict", chartDir()}, flags...)...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// TestChartRender checks what each setting renders to, and that settings
// which cannot work are refused at render time.
func TestChartRender(t *testing.T) {
	const ns = "hub-ns"
	cases := []struct {
		name    string
		flags   []string
		wantErr string
		check   func(t *testing.T, m manifest)
	}{
		{
			name: "defaults",
			check: func(t *testing.T, m manifest) {
				dep := get[appsv1.Deployment](t, m, "Deployment", release)
				if *dep.Spec.Replicas != 3 || dep.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
					t.Errorf("replicas %d, strategy %q; want 3, RollingUpdate", *dep.Spec.Replicas, dep.Spec.Strategy.Type)
				}
				// A rollout never drops below the replica count.
				if ru := dep.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge.IntValue() != 1 {
					t.Errorf("rolling update %+v: want maxSurge 1, maxUnavailable 0", ru)
				}
				pdb := get[policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", release)
				if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil ||
					!reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, dep.Spec.Selector.MatchLabels) {
					t.Errorf("pod disruption budget %+v: want maxUnavailable 1 over the Deployment's pods", pdb.Spec)
				}
				pod := dep.Spec.Template.Spec
				c := pod.Containers[0]
				anti := pod.Affinity.PodAntiAffinity
				if anti == nil || len(anti.PreferredDuringSchedulingIgnoredDuringExecution) != 1 || len(anti.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
					t.Errorf("anti-affinity %+v: want one preferred term", anti)
				} else if term := anti.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm; term.TopologyKey != "kubernetes.io/hostname" ||
					!reflect.DeepEqual(term.LabelSelector.MatchLabels, dep.Spec.Selector.MatchLabels) {
					t.Errorf("anti-affinity term %+v: want the Deployment's pods, across nodes", term)
				}
				if len(c.Env) != 1 || c.Env[0].Name != "POD_NAMESPACE" || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
					t.Errorf("env %+v: want POD_NAMESPACE from the downward API", c.Env)
				}
				for _, a := range c.Args {
					if strings.HasPrefix(a, "--webhook") {
						t.Errorf("arg %q without reservation.enabled", a)
					}
				}
				leases := get[rbacv1.Role](t, m, "Role", release+"-leader-election")
				if !slices.ContainsFunc(leases.Rules, func(r rbacv1.PolicyRule) bool {
					return slices.Contains(r.APIGroups, "coordination.k8s.io") && slices.Contains(r.Resources, "leases") &&
						len(r.ResourceNames) == 0 && !slices.Contains(r.Verbs, "delete") &&
						!slices.ContainsFunc([]string{"get", "list", "watch", "create", "update"}, func(v string) bool { return !slices.Contains(r.Verbs, v) })
				}) || leases.Namespace != ns {
					t.Errorf("lease role %s/%s rules %+v: want get, list, watch, create, update (no delete) in %s", leases.Namespace, leases.Name, leases.Rules, ns)
				}
				if pod.ServiceAccountName != release {
					t.Errorf("service account %q", pod.ServiceAccountName)
				}
				if sc := pod.SecurityContext; sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
					t.Errorf("pod security context %+v: want non-root", sc)
				}
				if sc := c.SecurityContext; sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
					sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !slices.Contains(sc.Capabilities.Drop, "ALL") {
					t.Errorf("container security context %+v: want read-only root, no escalation, no capabilities", sc)
				}
				if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
					t.Errorf("probes %s, %s; want /healthz, /readyz", c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path)
				}
				if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
					t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
				}
				if pod.Volumes[1].Secret.SecretName != release || m.find("Secret", release) == nil {
					t.Errorf("the chart's own Secret is not rendered and mounted")
				}
				if dep.Spec.Template.Labels["hub.jupyter.org/network-access-hub"] != "true" {
					t.Errorf("pod labels %v: want zero-to-jupyterhub's hub access label", dep.Spec.Template.Labels)
				}
				svc := get[corev1.Service](t, m, "Service", release)
				if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.Ports[0].Port != 8090 {
					t.Errorf("service %+v", svc.Spec)
				}
				role := get[rbacv1.Role](t, m, "Role", release)
				if role.Namespace != ns {
					t.Errorf("role in %q, want %q", role.Namespace, ns)
				}
				if m.find("ClusterRole", ns+"-"+release) != nil {
					t.Errorf("a ClusterRole without user namespaces")
				}
				cfg := spawnerConfig(t, m)
				if cfg.Namespace != ns || cfg.EnableUserNamespaces {
					t.Errorf("config namespace %q, user namespaces %v; want %q, false", cfg.Namespace, cfg.EnableUserNamespaces, ns)
				}
			},
		},
		{
			name:  "user namespaces",
			flags: []string{"--set", "userNamespaces.enabled=true"},
			check: func(t *testing.T, m manifest) {
				cr := get[rbacv1.ClusterRole](t, m, "ClusterRole", ns+"-"+release)
				if !grants(cr.Rules, "namespaces", "create") || grants(cr.Rules, "namespaces", "delete") {
					t.Errorf("cluster role rules %+v: want namespaces create, not delete", cr.Rules)
				}
				crb := get[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", ns+"-"+release)
				if s := crb.Subjects[0]; s.Name != release || s.Namespace != ns || crb.RoleRef.Name != cr.Name {
					t.Errorf("cluster role binding %+v", crb)
				}
				if m.find("Role", release) != nil {
					t.Errorf("a namespaced notebook Role beside the ClusterRole")
				}
				// Leader election stays namespaced.
				if r := get[rbacv1.Role](t, m, "Role", release+"-leader-election"); r.Namespace != ns {
					t.Errorf("leases role in %q", r.Namespace)
				}
				if cfg := spawnerConfig(t, m); !cfg.EnableUserNamespaces || cfg.Namespace != ns {
					t.Errorf("config: user namespaces %v, namespace %q", cfg.EnableUserNamespaces, cfg.Namespace)
				}
			},
		},
		{
			name:  "notebooks in another namespace",
			flags: []string{"--set", "spawnerConfig.kubespawner.namespace=notebooks"},
			check: func(t *testing.T, m manifest) {
				role := get[rbacv1.Role](t, m, "Role", release)
				rb := get[rbacv1.RoleBinding](t, m, "RoleBinding", release)
				if role.Namespace != "notebooks" || rb.Namespace != "notebooks" || rb.Subjects[0].Namespace != ns {
					t.Errorf("role in %q, binding in %q for %s/%s", role.Namespace, rb.Namespace, rb.Subjects[0].Namespace, rb.Subjects[0].Name)
				}
				if r := get[rbacv1.Role](t, m, "Role", release+"-leader-election"); r.Namespace != ns {
					t.Errorf("leases role in %q, want spawnerd's own %q", r.Namespace, ns)
				}
			},
		},
		{
			name:  "existing secret",
			flags: []string{"--set", "secret.existingSecret=mine"},
			check: func(t *testing.T, m manifest) {
				if m.find("Secret", release) != nil {
					t.Errorf("the chart renders a Secret although one exists")
				}
				dep := get[appsv1.Deployment](t, m, "Deployment", release)
				if got := dep.Spec.Template.Spec.Volumes[1].Secret.SecretName; got != "mine" {
					t.Errorf("mounted secret %q, want mine", got)
				}
			},
		},
		{
			name:  "given secret values",
			flags: []string{"--set", "secret.sharedSecret=s3cret", "--set", "secret.hubToken=t0ken"},
			check: func(t *testing.T, m manifest) {
				s := get[corev1.Secret](t, m, "Secret", release)
				if string(s.Data["shared-secret"]) != "s3cret" || string(s.Data["hub-token"]) != "t0ken" {
					t.Errorf("secret data %q", s.Data)
				}
			},
		},
		{
			name: "generated secret values",
			check: func(t *testing.T, m manifest) {
				s := get[corev1.Secret](t, m, "Secret", release)
				if len(s.Data["shared-secret"]) < 32 || len(s.Data["hub-token"]) < 32 || bytes.Equal(s.Data["shared-secret"], s.Data["hub-token"]) {
					t.Errorf("generated secret data %q: want two distinct long values", s.Data)
				}
			},
		},
		{
			name:  "proxy and no hub",
			flags: []string{"--set", "proxy.apiURL=http://proxy-api:8001", "--set", "secret.proxyToken=p", "--set", "hub.apiURL=", "--set", "debug=true"},
			check: func(t *testing.T, m manifest) {
				dep := get[appsv1.Deployment](t, m, "Deployment", release)
				args := dep.Spec.Template.Spec.Containers[0].Args
				for _, want := range []string{"--proxy-api-url=http://proxy-api:8001", "--proxy-token-file=/etc/spawnerd/secret/proxy-token", "--debug"} {
					if !slices.Contains(args, want) {
						t.Errorf("args %q lack %q", args, want)
					}
				}
				for _, a := range args {
					if strings.HasPrefix(a, "--hub-api-url") || strings.HasPrefix(a, "--hub-token-file") {
						t.Errorf("arg %q without hub.apiURL", a)
					}
				}
				labels := dep.Spec.Template.Labels
				if labels["hub.jupyter.org/network-access-proxy-api"] != "true" || labels["hub.jupyter.org/network-access-hub"] != "" {
					t.Errorf("pod labels %v", labels)
				}
				if s := get[corev1.Secret](t, m, "Secret", release); string(s.Data["proxy-token"]) != "p" {
					t.Errorf("proxy token %q", s.Data["proxy-token"])
				}
			},
		},
		{
			name:  "one replica",
			flags: []string{"--set", "replicaCount=1", "--set", "podAntiAffinity.type="},
			check: func(t *testing.T, m manifest) {
				if m.find("PodDisruptionBudget", release) != nil {
					t.Errorf("a PodDisruptionBudget for one replica would block every drain")
				}
				if dep := get[appsv1.Deployment](t, m, "Deployment", release); dep.Spec.Template.Spec.Affinity != nil {
					t.Errorf("affinity %+v with podAntiAffinity.type empty", dep.Spec.Template.Spec.Affinity)
				}
			},
		},
		{
			name:  "budget by minAvailable, required anti-affinity",
			flags: []string{"--set", "podDisruptionBudget.minAvailable=2", "--set", "podAntiAffinity.type=required"},
			check: func(t *testing.T, m manifest) {
				pdb := get[policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", release)
				if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 2 || pdb.Spec.MaxUnavailable != nil {
					t.Errorf("pod disruption budget %+v: want minAvailable 2 alone", pdb.Spec)
				}
				anti := get[appsv1.Deployment](t, m, "Deployment", release).Spec.Template.Spec.Affinity.PodAntiAffinity
				if len(anti.RequiredDuringSchedulingIgnoredDuringExecution) != 1 || len(anti.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
					t.Errorf("anti-affinity %+v: want one required term", anti)
				}
			},
		},
		{
			name:  "own affinity",
			flags: []string{"--set-json", `affinity={"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"topologyKey":"zone","labelSelector":{"matchLabels":{"x":"y"}}}]}}`},
			check: func(t *testing.T, m manifest) {
				anti := get[appsv1.Deployment](t, m, "Deployment", release).Spec.Template.Spec.Affinity.PodAntiAffinity
				if len(anti.RequiredDuringSchedulingIgnoredDuringExecution) != 1 || anti.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != "zone" ||
					len(anti.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
					t.Errorf("anti-affinity %+v: want the values' own, alone", anti)
				}
			},
		},
		{
			name:  "webhook certificate in a shared Secret",
			flags: []string{"--set", "reservation.enabled=true"},
			check: func(t *testing.T, m manifest) {
				c := get[appsv1.Deployment](t, m, "Deployment", release).Spec.Template.Spec.Containers[0]
				for _, want := range []string{"--webhook-cert-secret=" + release + "-webhook-cert", "--webhook-config-name=" + release + "-gpu", "--webhook-cert-resync=30s"} {
					if !slices.Contains(c.Args, want) {
						t.Errorf("args %q lack %q", c.Args, want)
					}
				}
				if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--webhook-cert-file") }) {
					t.Errorf("args %q: a certificate file beside the shared Secret", c.Args)
				}
				role := get[rbacv1.Role](t, m, "Role", release+"-gpu")
				named := func(verb string) bool {
					return slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
						return slices.Contains(r.Resources, "secrets") && slices.Contains(r.Verbs, verb) && slices.Equal(r.ResourceNames, []string{release + "-webhook-cert"})
					})
				}
				if !named("get") || !named("update") || !grants(role.Rules, "secrets", "create") || grants(role.Rules, "secrets", "list") || grants(role.Rules, "secrets", "delete") {
					t.Errorf("role rules %+v: want get and update of the named Secret, create, and nothing else of secrets", role.Rules)
				}
				if m.find("ValidatingAdmissionPolicy", ns+"-"+release+"-secret-writes") == nil || m.find("ValidatingAdmissionPolicyBinding", ns+"-"+release+"-secret-writes") == nil {
					t.Errorf("no policy narrowing the service account's Secret writes among %v", m.ids())
				}
				if m.find("Secret", release+"-webhook-cert") != nil {
					t.Errorf("the chart renders the certificate Secret: spawnerd makes it, and an upgrade would replace it")
				}
			},
		},
		{
			name: "webhook certificate from an existing Secret",
			flags: []string{"--set", "reservation.enabled=true", "--set", "webhook.existingCertSecret=webhook-tls", "--set", "webhook.caBundle=PEM",
				"--set", "webhook.annotations.cert-manager\\.io/inject-ca-from=hub-ns/webhook"},
			check: func(t *testing.T, m manifest) {
				dep := get[appsv1.Deployment](t, m, "Deployment", release)
				c := dep.Spec.Template.Spec.Containers[0]
				for _, want := range []string{"--webhook-cert-file=/etc/spawnerd/webhook/tls.crt", "--webhook-key-file=/etc/spawnerd/webhook/tls.key"} {
					if !slices.Contains(c.Args, want) {
						t.Errorf("args %q lack %q", c.Args, want)
					}
				}
				if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--webhook-cert-secret") }) {
					t.Errorf("args %q: the shared Secret beside the mounted one", c.Args)
				}
				if !slices.ContainsFunc(dep.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "webhook-tls" }) ||
					!slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == "/etc/spawnerd/webhook" }) {
					t.Errorf("the existing Secret is not mounted at /etc/spawnerd/webhook")
				}
				if m.find("ValidatingAdmissionPolicy", ns+"-"+release+"-secret-writes") != nil {
					t.Errorf("a Secret write policy although spawnerd writes no Secret")
				}
				if grants(get[rbacv1.Role](t, m, "Role", release+"-gpu").Rules, "secrets", "create") {
					t.Errorf("secrets create granted although spawnerd keeps no Secret")
				}
				whc := get[admissionregv1.MutatingWebhookConfiguration](t, m, "MutatingWebhookConfiguration", release+"-gpu")
				if string(whc.Webhooks[0].ClientConfig.CABundle) != "PEM" || whc.Annotations["cert-manager.io/inject-ca-from"] != "hub-ns/webhook" {
					t.Errorf("webhook configuration caBundle %q, annotations %v", whc.Webhooks[0].ClientConfig.CABundle, whc.Annotations)
				}
			},
		},
		{
			name:    "budget by both",
			flags:   []string{"--set", "podDisruptionBudget.minAvailable=1", "--set", "podDisruptionBudget.maxUnavailable=1"},
			wantErr: "set minAvailable or maxUnavailable, not both",
		},
		{
			name:    "unknown anti-affinity",
			flags:   []string{"--set", "podAntiAffinity.type=sometimes"},
			wantErr: "podAntiAffinity.type",
		},
		{
			name:    "proxy without its token",
			flags:   []string{"--set", "proxy.apiURL=http://proxy-api:8001"},
			wantErr: "secret.proxyToken is required",
		},
		{
			name:    "user namespaces set in the spawner config only",
			flags:   []string{"--set", "spawnerConfig.kubespawner.enable_user_namespaces=true"},
			wantErr: "disagrees with userNamespaces.enabled",
		},
		{
			name:    "no service account to use",
			flags:   []string{"--set", "serviceAccount.create=false"},
			wantErr: "serviceAccount.name is required",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := render(t, ns, tc.flags...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("render error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, m)
		})
	}
}

// spawnerConfig loads the rendered ConfigMap's file as spawnerd does.
func spawnerConfig(t *testing.T, m manifest) *spawner.Settings {
	t.Helper()
	cm := get[corev1.ConfigMap](t, m, "ConfigMap", release)
	cfg, err := spawner.Parse([]byte(cm.Data["spawner.yaml"]))
	if err != nil {
		t.Fatalf("spawnerd would refuse the rendered config: %v\n%s", err, cm.Data["spawner.yaml"])
	}
	s, err := cfg.Resolve(nil)
	if err != nil {
		t.Fatalf("resolving the rendered config: %v", err)
	}
	return s
}

// grants reports whether a rule allows verb on the core resource.
func grants(rules []rbacv1.PolicyRule, resource, verb string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}
