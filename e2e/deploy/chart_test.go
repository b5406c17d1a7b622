package deploy_test

import (
	"bytes"
	"encoding/json"
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
	networkingv1 "k8s.io/api/networking/v1"
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
		"NetworkPolicy/jhub/spawnerd",
		"ServiceAccount/jhub/spawnerd", "ConfigMap/jhub/spawnerd", "PersistentVolumeClaim/jhub/spawnerd-history",
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

// renderDSN is a PostgreSQL DSN for renders whose spawnerd never runs.
const renderDSN = "postgres://spawnerd:render-only@db.example.org:5432/spawnerd?sslmode=require"

// replicated are the values of a replicated deployment: three replicas,
// which need the history in PostgreSQL (the chart refuses SQLite for them).
func replicated(dsn string) []string {
	return []string{"--set", "replicaCount=3", "--set", "history.store=postgres", "--set", "history.postgres.dsn=" + dsn}
}

func TestChartLints(t *testing.T) {
	for name, flags := range map[string][]string{
		"defaults":        nil,
		"user namespaces": {"--set", "userNamespaces.enabled=true"},
		"proxy":           {"--set", "proxy.apiURL=http://proxy-api:8001", "--set", "secret.proxyToken=p"},
		"replicated":      replicated(renderDSN),
		"no console":      {"--set", "console.enabled=false"},
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
			// One replica with its session history in SQLite on a volume
			// the chart creates, and the console.
			name: "defaults",
			check: func(t *testing.T, m manifest) {
				dep := get[appsv1.Deployment](t, m, "Deployment", release)
				// The RWO volume is released by the old pod before the new one mounts it.
				if *dep.Spec.Replicas != 1 || dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || dep.Spec.Strategy.RollingUpdate != nil {
					t.Errorf("replicas %d, strategy %+v; want 1, Recreate", *dep.Spec.Replicas, dep.Spec.Strategy)
				}
				if m.find("PodDisruptionBudget", release) != nil {
					t.Errorf("a PodDisruptionBudget for one replica would block every drain")
				}
				pod := dep.Spec.Template.Spec
				c := pod.Containers[0]
				checkSQLite(t, m, release+"-history")
				pvc := get[corev1.PersistentVolumeClaim](t, m, "PersistentVolumeClaim", release+"-history")
				if pvc.Namespace != ns || !reflect.DeepEqual(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) ||
					pvc.Spec.Resources.Requests.Storage().String() != "1Gi" || pvc.Spec.StorageClassName != nil {
					t.Errorf("history claim %s/%s %+v: want 1Gi, ReadWriteOnce, the default storage class", pvc.Namespace, pvc.Name, pvc.Spec)
				}
				// An uninstall, or a switch to PostgreSQL, leaves the history.
				if pvc.Annotations["helm.sh/resource-policy"] != "keep" {
					t.Errorf("history claim annotations %v: want helm.sh/resource-policy: keep", pvc.Annotations)
				}
				// The volume is writable by the container's group.
				if sc := pod.SecurityContext; sc.FSGroup == nil || sc.RunAsGroup == nil || *sc.FSGroup != *sc.RunAsGroup {
					t.Errorf("pod security context %+v: want fsGroup, the container's group", sc)
				}
				for _, want := range []string{"--history-retention=90d", "--recent-stops=1h"} {
					if !slices.Contains(c.Args, want) {
						t.Errorf("args %q lack %q", c.Args, want)
					}
				}
				checkConsoleArgs(t, c.Args, "/services/spawnerd/", "/hub/", "custom:spawnerd:console", "service-spawnerd")
				// Browsers reach the console through zero-to-jupyterhub's proxy.
				if peers := proxyPeers(t, m); len(peers) != 1 || peers[0].NamespaceSelector != nil || peers[0].PodSelector.MatchLabels["app"] != "jupyterhub" {
					t.Errorf("proxy peers %+v: want zero-to-jupyterhub's proxy pod in the release namespace", peers)
				}
				if c.Env[0].Name != "POD_NAMESPACE" || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
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
			// Three replicas sharing the history in PostgreSQL, whose DSN
			// reaches them from the chart's Secret.
			name:  "replicated",
			flags: append(replicated(renderDSN), "--set", "history.retention=30d", "--set", "history.recentStops=2h"),
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
				anti := dep.Spec.Template.Spec.Affinity.PodAntiAffinity
				if anti == nil || len(anti.PreferredDuringSchedulingIgnoredDuringExecution) != 1 || len(anti.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
					t.Errorf("anti-affinity %+v: want one preferred term", anti)
				} else if term := anti.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm; term.TopologyKey != "kubernetes.io/hostname" ||
					!reflect.DeepEqual(term.LabelSelector.MatchLabels, dep.Spec.Selector.MatchLabels) {
					t.Errorf("anti-affinity term %+v: want the Deployment's pods, across nodes", term)
				}
				checkPostgres(t, m, release, "history-dsn")
				if s := get[corev1.Secret](t, m, "Secret", release); string(s.Data["history-dsn"]) != renderDSN {
					t.Errorf("the Secret's history-dsn is %q, want %q", s.Data["history-dsn"], renderDSN)
				}
				c := dep.Spec.Template.Spec.Containers[0]
				for _, want := range []string{"--history-retention=30d", "--recent-stops=2h"} {
					if !slices.Contains(c.Args, want) {
						t.Errorf("args %q lack %q", c.Args, want)
					}
				}
			},
		},
		{
			name:  "history in PostgreSQL from an existing Secret",
			flags: []string{"--set", "history.store=postgres", "--set", "history.postgres.existingSecret=pg", "--set", "history.postgres.dsnKey=url"},
			check: func(t *testing.T, m manifest) {
				checkPostgres(t, m, "pg", "url")
				if s := get[corev1.Secret](t, m, "Secret", release); s.Data["history-dsn"] != nil {
					t.Errorf("the chart's Secret holds a history-dsn beside history.postgres.existingSecret")
				}
			},
		},
		{
			name:  "history in PostgreSQL from the Secret that replaces the chart's",
			flags: []string{"--set", "history.store=postgres", "--set", "secret.existingSecret=mine"},
			check: func(t *testing.T, m manifest) { checkPostgres(t, m, "mine", "history-dsn") },
		},
		{
			name:  "history in SQLite on an existing claim",
			flags: []string{"--set", "history.sqlite.persistence.existingClaim=history-by-hand"},
			check: func(t *testing.T, m manifest) {
				checkSQLite(t, m, "history-by-hand")
				if m.find("PersistentVolumeClaim", release+"-history") != nil {
					t.Errorf("the chart creates a history claim beside the existing one")
				}
			},
		},
		{
			name: "history volume settings",
			flags: []string{"--set", "history.sqlite.persistence.size=5Gi", "--set", "history.sqlite.persistence.storageClassName=fast",
				"--set", "history.sqlite.persistence.accessModes={ReadWriteOncePod}", "--set", "history.sqlite.persistence.annotations.backup=daily"},
			check: func(t *testing.T, m manifest) {
				pvc := get[corev1.PersistentVolumeClaim](t, m, "PersistentVolumeClaim", release+"-history")
				if pvc.Spec.Resources.Requests.Storage().String() != "5Gi" || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "fast" ||
					!reflect.DeepEqual(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}) ||
					pvc.Annotations["backup"] != "daily" || pvc.Annotations["helm.sh/resource-policy"] != "keep" {
					t.Errorf("history claim %+v %+v", pvc.Annotations, pvc.Spec)
				}
			},
		},
		{
			name:  "history volume of no storage class",
			flags: []string{"--set", "history.sqlite.persistence.storageClassName=-"},
			check: func(t *testing.T, m manifest) {
				if pvc := get[corev1.PersistentVolumeClaim](t, m, "PersistentVolumeClaim", release+"-history"); pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "" {
					t.Errorf("storage class %v, want \"\" (a volume bound by hand)", pvc.Spec.StorageClassName)
				}
			},
		},
		{
			name:  "no console",
			flags: []string{"--set", "console.enabled=false"},
			check: func(t *testing.T, m manifest) {
				args := get[appsv1.Deployment](t, m, "Deployment", release).Spec.Template.Spec.Containers[0].Args
				// spawnerd's own default would serve the console.
				if !slices.Contains(args, "--console-prefix=") {
					t.Errorf("args %q lack an empty --console-prefix", args)
				}
				for _, a := range args {
					for _, f := range []string{"--hub-public-prefix", "--console-scope", "--oauth-client-id"} {
						if strings.HasPrefix(a, f) {
							t.Errorf("arg %q without the console", a)
						}
					}
				}
				if peers := proxyPeers(t, m); peers != nil {
					t.Errorf("the NetworkPolicy admits the proxy %+v without the console", peers)
				}
			},
		},
		{
			name: "console under the hub's base URL",
			flags: []string{"--set", "hub.baseURL=/jhub/", "--set", "console.prefix=/jhub/services/ops/", "--set", "console.hubPublicPrefix=/jhub/hub/",
				"--set", "console.scope=custom:ops:console", "--set", "console.oauthClientID=service-ops",
				"--set-json", `networkPolicy.proxy.from=[{"namespaceSelector":{"matchLabels":{"name":"hub"}},"podSelector":{"matchLabels":{"component":"proxy"}}}]`},
			check: func(t *testing.T, m manifest) {
				args := get[appsv1.Deployment](t, m, "Deployment", release).Spec.Template.Spec.Containers[0].Args
				checkConsoleArgs(t, args, "/jhub/services/ops/", "/jhub/hub/", "custom:ops:console", "service-ops")
				if peers := proxyPeers(t, m); len(peers) != 1 || peers[0].NamespaceSelector == nil || peers[0].NamespaceSelector.MatchLabels["name"] != "hub" {
					t.Errorf("proxy peers %+v: want the values' own", peers)
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
			name: "proxy and no hub",
			flags: []string{"--set", "proxy.apiURL=http://proxy-api:8001", "--set", "secret.proxyToken=p", "--set", "hub.apiURL=", "--set", "debug=true",
				"--set", "console.enabled=false"},
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
			name:  "one replica, no anti-affinity",
			flags: []string{"--set", "podAntiAffinity.type="},
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
			flags: append(replicated(renderDSN), "--set", "podDisruptionBudget.minAvailable=2", "--set", "podAntiAffinity.type=required"),
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
			flags:   append(replicated(renderDSN), "--set", "podDisruptionBudget.minAvailable=1", "--set", "podDisruptionBudget.maxUnavailable=1"),
			wantErr: "set minAvailable or maxUnavailable, not both",
		},
		{
			// A file on a shared volume is not a replicated store.
			name:    "SQLite for replicas",
			flags:   []string{"--set", "replicaCount=3"},
			wantErr: "history.store=sqlite keeps the session history in a file for ONE replica, but replicaCount is 3: set history.store=postgres with history.postgres.dsn (or history.postgres.existingSecret) for replicas, or replicaCount=1",
		},
		{
			name:    "PostgreSQL without a database",
			flags:   []string{"--set", "replicaCount=3", "--set", "history.store=postgres"},
			wantErr: "history.store=postgres needs",
		},
		{
			name:    "PostgreSQL DSN with the chart's Secret replaced",
			flags:   append(replicated(renderDSN), "--set", "secret.existingSecret=mine"),
			wantErr: `put the DSN into Secret "mine" under the key history-dsn`,
		},
		{
			name:    "PostgreSQL DSN and existing Secret",
			flags:   append(replicated(renderDSN), "--set", "history.postgres.existingSecret=pg"),
			wantErr: "history.postgres: set dsn or existingSecret, not both",
		},
		{
			name:    "PostgreSQL settings without the store",
			flags:   []string{"--set", "history.postgres.dsn=" + renderDSN},
			wantErr: "history.postgres is set but history.store is sqlite",
		},
		{
			name:    "unknown history store",
			flags:   []string{"--set", "history.store=mysql"},
			wantErr: `history.store is "mysql"`,
		},
		{
			name:    "console without the hub",
			flags:   []string{"--set", "hub.apiURL="},
			wantErr: "console.enabled needs hub.apiURL",
		},
		{
			name:    "console outside the hub's base URL",
			flags:   []string{"--set", "hub.baseURL=/jhub/", "--set", "console.hubPublicPrefix=/jhub/hub/"},
			wantErr: `console.prefix is "/services/spawnerd/": it must start with hub.baseURL "/jhub/"`,
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

// checkSQLite checks the history in SQLite on claim: the volume mounted
// where --history-dsn puts the file, SQLite's temporary files beside it, and
// no PostgreSQL DSN.
func checkSQLite(t *testing.T, m manifest, claim string) {
	t.Helper()
	dep := get[appsv1.Deployment](t, m, "Deployment", release)
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	if dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q with SQLite, want Recreate", dep.Spec.Strategy.Type)
	}
	if !slices.Contains(c.Args, "--history-dsn=sqlite:///var/lib/spawnerd/history.db") {
		t.Errorf("args %q lack the SQLite file on the history volume", c.Args)
	}
	vol := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool {
		return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim
	})
	if vol < 0 {
		t.Fatalf("volumes %+v: no claim %s", pod.Volumes, claim)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return vm.Name == pod.Volumes[vol].Name && vm.MountPath == "/var/lib/spawnerd" && !vm.ReadOnly
	}) {
		t.Errorf("mounts %+v: want claim %s writable at /var/lib/spawnerd", c.VolumeMounts, claim)
	}
	for _, e := range c.Env {
		switch e.Name {
		case "SPAWNERD_HISTORY_DSN":
			t.Errorf("env %s with SQLite", e.Name)
		case "SQLITE_TMPDIR":
			if e.Value != "/var/lib/spawnerd" {
				t.Errorf("SQLITE_TMPDIR=%q, want the history volume (the root filesystem is read-only)", e.Value)
			}
		}
	}
}

// checkPostgres checks the history in PostgreSQL: the DSN from key of
// Secret secret, only in the environment, and no history volume.
func checkPostgres(t *testing.T, m manifest, secret, key string) {
	t.Helper()
	dep := get[appsv1.Deployment](t, m, "Deployment", release)
	c := dep.Spec.Template.Spec.Containers[0]
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "SPAWNERD_HISTORY_DSN" })
	if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil ||
		c.Env[i].ValueFrom.SecretKeyRef.Name != secret || c.Env[i].ValueFrom.SecretKeyRef.Key != key {
		t.Errorf("env %+v: want SPAWNERD_HISTORY_DSN from key %s of Secret %s", c.Env, key, secret)
	}
	// The DSN holds a password: never an argument.
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--history-dsn") {
			t.Errorf("arg %q: the DSN on the command line", a)
		}
	}
	if dep.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy Recreate without a volume to release")
	}
	if m.find("PersistentVolumeClaim", release+"-history") != nil || slices.ContainsFunc(dep.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.PersistentVolumeClaim != nil }) {
		t.Errorf("a history volume with PostgreSQL")
	}
	if raw, err := json.Marshal(dep); err != nil || bytes.Contains(raw, []byte("render-only")) {
		t.Errorf("the DSN's password is in the Deployment (%v)", err)
	}
}

// checkConsoleArgs checks the console's flags.
func checkConsoleArgs(t *testing.T, args []string, prefix, hubPrefix, scope, clientID string) {
	t.Helper()
	for _, want := range []string{"--console-prefix=" + prefix, "--hub-public-prefix=" + hubPrefix, "--console-scope=" + scope, "--oauth-client-id=" + clientID} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	// Its OAuth login needs the hub and spawnerd's hub token (the client secret).
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--hub-api-url=http") }) ||
		!slices.Contains(args, "--hub-token-file=/etc/spawnerd/secret/hub-token") {
		t.Errorf("args %q: the console without the hub's API or token", args)
	}
}

// proxyPeers are the peers of the NetworkPolicy's ingress rule that admits
// zero-to-jupyterhub's proxy, or nil.
func proxyPeers(t *testing.T, m manifest) []networkingv1.NetworkPolicyPeer {
	t.Helper()
	np := get[networkingv1.NetworkPolicy](t, m, "NetworkPolicy", release)
	for _, r := range np.Spec.Ingress {
		for _, p := range r.From {
			if p.PodSelector != nil && p.PodSelector.MatchLabels["component"] == "proxy" {
				if len(r.Ports) != 1 || r.Ports[0].Port.String() != "http" {
					t.Errorf("proxy rule %+v: want port http alone", r)
				}
				return r.From
			}
		}
	}
	return nil
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
