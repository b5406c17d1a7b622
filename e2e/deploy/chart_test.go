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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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
		"NetworkPolicy/jhub/spawnerd",
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
				if *dep.Spec.Replicas != 1 || dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
					t.Errorf("replicas %d, strategy %q; want 1, Recreate", *dep.Spec.Replicas, dep.Spec.Strategy.Type)
				}
				pod := dep.Spec.Template.Spec
				c := pod.Containers[0]
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
