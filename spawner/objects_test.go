package spawner

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dsmlp/spawner/serverid"
)

func build(t *testing.T, config string, req Request) (*Objects, *Settings) {
	t.Helper()
	objs, s, err := Build(mustParse(t, config), req)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return objs, s
}

func notebook(t *testing.T, pod *corev1.Pod) corev1.Container {
	t.Helper()
	if len(pod.Spec.Containers) == 0 || pod.Spec.Containers[0].Name != ContainerName {
		t.Fatalf("first container is not %q: %+v", ContainerName, pod.Spec.Containers)
	}
	return pod.Spec.Containers[0]
}

// The default pod, field by field, against kubespawner.md §2 and
// test_objects.py's simplest pod.
func TestBuildDefaultPod(t *testing.T) {
	objs, _ := build(t, "kubespawner: {}\n", Request{User: "alice", Env: map[string]string{"JUPYTERHUB_SERVICE_PREFIX": "/user/alice/"}})
	if objs.PVC != nil || objs.Service != nil || objs.Namespace != nil {
		t.Errorf("default config built %+v, want only a pod", objs)
	}
	pod := objs.Pod
	if pod.Name != "jupyter-alice" || pod.Namespace != "default" || pod.Kind != "Pod" || pod.APIVersion != "v1" {
		t.Errorf("pod = %s/%s %s %s", pod.Namespace, pod.Name, pod.APIVersion, pod.Kind)
	}
	spec := pod.Spec
	if spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		t.Errorf("restartPolicy = %q", spec.RestartPolicy)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken is not false")
	}
	if spec.Volumes == nil || len(spec.Volumes) != 0 {
		t.Errorf("volumes = %#v, want an empty list", spec.Volumes)
	}
	if spec.Affinity != nil || len(spec.Tolerations) != 0 || len(spec.NodeSelector) != 0 || spec.SecurityContext != nil ||
		len(spec.InitContainers) != 0 || len(spec.ImagePullSecrets) != 0 || len(spec.Containers) != 1 {
		t.Errorf("unexpected scheduling, security or container fields: %+v", spec)
	}
	c := notebook(t, pod)
	if c.Image != DefaultImage || c.Args != nil || c.Command != nil || c.ImagePullPolicy != "" {
		t.Errorf("container image %q args %q command %q policy %q", c.Image, c.Args, c.Command, c.ImagePullPolicy)
	}
	if want := []corev1.ContainerPort{{Name: PortName, ContainerPort: 8888}}; !reflect.DeepEqual(c.Ports, want) {
		t.Errorf("ports = %+v, want %+v", c.Ports, want)
	}
	f := false
	if want := (&corev1.SecurityContext{AllowPrivilegeEscalation: &f}); !reflect.DeepEqual(c.SecurityContext, want) {
		t.Errorf("securityContext = %+v, want only allowPrivilegeEscalation false", c.SecurityContext)
	}
	if c.Resources.Limits != nil || c.Resources.Requests != nil {
		t.Errorf("resources = %+v, want none", c.Resources)
	}
	if c.VolumeMounts == nil || len(c.VolumeMounts) != 0 {
		t.Errorf("volumeMounts = %#v, want an empty list", c.VolumeMounts)
	}
	env := envValues(c.Env)
	if env[EnvServiceURL] != "http://0.0.0.0:8888/user/alice/" || env[EnvImage] != DefaultImage || env[EnvImageSpec] != DefaultImage {
		t.Errorf("env = %v", env)
	}
	wantLabels := map[string]string{
		"app": "jupyterhub", "heritage": "jupyterhub", "app.kubernetes.io/name": "jupyterhub",
		"app.kubernetes.io/managed-by": "kubespawner", "component": "singleuser-server",
		"app.kubernetes.io/component": "singleuser-server", "hub.jupyter.org/username": "alice",
		"hub.jupyter.org/servername": "", LabelUser: "alice", serverid.LabelKey: serverid.Key("alice", ""),
	}
	if !reflect.DeepEqual(pod.Labels, wantLabels) {
		t.Errorf("labels = %v, want %v", pod.Labels, wantLabels)
	}
	wantAnn := map[string]string{AnnotationUser: "alice", AnnotationSpawnerUser: "alice", AnnotationSpawnerServer: ""}
	if !reflect.DeepEqual(pod.Annotations, wantAnn) {
		t.Errorf("annotations = %v, want %v", pod.Annotations, wantAnn)
	}
}

func envValues(env []corev1.EnvVar) map[string]string {
	m := map[string]string{}
	for _, e := range env {
		m[e.Name] = e.Value
	}
	return m
}

func envNames(env []corev1.EnvVar, skip ...string) []string {
	var out []string
	for _, e := range env {
		keep := true
		for _, s := range skip {
			keep = keep && e.Name != s
		}
		if keep {
			out = append(out, e.Name)
		}
	}
	return out
}

// test_objects.py's test_make_pod_with_env_dependency_sorted.
func TestBuildEnvDependencyOrder(t *testing.T) {
	objs, _ := build(t, `
kubespawner:
  environment:
    NAME_SELF_REF: $(NAME_SELF_REF)
    NAME_1B: $(NAME_2)
    NAME_1A: $(NAME_2)
    NAME_1C: {name: NAME_0, value: $(NAME_2)}
    NAME_2: $(NAME_3A)
    NAME_3B: NAME_3B_VALUE
    NAME_3A: NAME_3A_VALUE
    NAME_CIRCLE_B: $(NAME_CIRCLE_A)
    NAME_CIRCLE_A: $(NAME_CIRCLE_B)
`, Request{User: "u"})
	got := envNames(notebook(t, objs.Pod).Env, EnvServiceURL, EnvImage, EnvImageSpec)
	want := []string{
		"NAME_3A", "NAME_3B", "NAME_SELF_REF", "NAME_2", "NAME_1A", "NAME_1B", "NAME_0",
		"NAME_CIRCLE_A", "NAME_CIRCLE_B",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("env order = %q, want %q", got, want)
	}
}

func TestBuildEnv(t *testing.T) {
	objs, _ := build(t, `
kubespawner:
  ip: "::"
  port: 9999
  cpu_limit: 2
  cpu_guarantee: 0.25
  mem_limit: 1G
  environment:
    EXPANDED: "{username} (expanded)"
    ESCAPED: "{{username}}"
    RAW: "It's {unescaped_username}"
    FROM_SECRET: {valueFrom: {secretKeyRef: {name: "s-{username}", key: "k"}}}
    JUPYTER_IMAGE: overridden
`, Request{User: "mock@name", Env: map[string]string{
		"JUPYTERHUB_COOKIE_OPTIONS": `{"samesite": "None", "secure": true}`,
		"JUPYTERHUB_SERVICE_PREFIX": "/user/mock@name/",
		"JUPYTERHUB_SERVICE_URL":    "http://127.0.0.1:1234/user/mock@name/",
		"MEM_LIMIT":                 "1",
		"MEM_GUARANTEE":             "1",
	}})
	c := notebook(t, objs.Pod)
	env := envValues(c.Env)
	slug := "mock-name---6241db84"
	want := map[string]string{
		"EXPANDED":                  slug + " (expanded)",
		"ESCAPED":                   "{username}",
		"RAW":                       "It's mock@name",
		"JUPYTERHUB_COOKIE_OPTIONS": `{"samesite": "None", "secure": true}`, // hub values are not templates
		EnvServiceURL:               "http://[::]:9999/user/mock@name/",
		EnvCPULimit:                 "2.0",
		EnvCPUGuarantee:             "0.25",
		EnvMemLimit:                 "1073741824",
		EnvImage:                    "overridden",
		EnvImageSpec:                DefaultImage,
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if _, ok := env[EnvMemGuarantee]; ok {
		t.Error("MEM_GUARANTEE from the hub kept, want it dropped (mem_guarantee unset)")
	}
	for _, e := range c.Env {
		if e.Name == "FROM_SECRET" && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != "s-"+slug) {
			t.Errorf("FROM_SECRET = %+v, want an expanded secretKeyRef", e)
		}
	}
}

func TestBuildCmdAndArgs(t *testing.T) {
	tests := map[string]struct {
		config string
		want   []string
	}{
		"no cmd: args ignored": {"kubespawner: {args: [--debug]}\n", nil},
		"cmd string":           {"kubespawner: {cmd: jupyterhub-singleuser}\n", []string{"jupyterhub-singleuser"}},
		"cmd and args":         {"kubespawner: {cmd: [start.sh, jupyterhub-singleuser], args: [--debug]}\n", []string{"start.sh", "jupyterhub-singleuser", "--debug"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			objs, _ := build(t, tc.config, Request{User: "u"})
			c := notebook(t, objs.Pod)
			if !reflect.DeepEqual(c.Args, tc.want) || c.Command != nil {
				t.Errorf("args = %q command = %q, want args %q", c.Args, c.Command, tc.want)
			}
		})
	}
}

func TestBuildResources(t *testing.T) {
	objs, _ := build(t, `
kubespawner:
  cpu_limit: 1.5
  cpu_guarantee: 0.1
  mem_limit: 2G
  mem_guarantee: 512M
  extra_resource_limits: {nvidia.com/gpu: "2", example.com/fpga: 1}
  extra_resource_guarantees: {nvidia.com/gpu: "1", ephemeral-storage: 1Gi}
`, Request{User: "u"})
	r := notebook(t, objs.Pod).Resources
	check := func(list corev1.ResourceList, name corev1.ResourceName, want string) {
		t.Helper()
		q, ok := list[name]
		if !ok || q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("%s = %v, want %s", name, q.String(), want)
		}
	}
	check(r.Limits, corev1.ResourceCPU, "1500m")
	check(r.Requests, corev1.ResourceCPU, "100m")
	check(r.Limits, corev1.ResourceMemory, "2147483648")
	check(r.Requests, corev1.ResourceMemory, "536870912")
	check(r.Limits, "nvidia.com/gpu", "2")
	check(r.Limits, "example.com/fpga", "1") // an unquoted number
	check(r.Requests, "nvidia.com/gpu", "1")
	check(r.Requests, corev1.ResourceEphemeralStorage, "1Gi")
	if q := r.Limits[corev1.ResourceMemory]; q.String() != "2147483648" {
		t.Errorf("memory limit written as %q, want plain bytes", q.String())
	}
}

// Label precedence: username label < extra_labels < common_labels <
// component/servername < platform labels.
func TestBuildLabelPrecedence(t *testing.T) {
	objs, _ := build(t, `
kubespawner:
  course: dsc10
  gpu_class: a100
  extra_labels:
    hub.jupyter.org/username: from-extra
    app: from-extra
    component: from-extra
    hub.jupyter.org/servername: from-extra
    dsmlp/user: from-extra
    own: "{username}"
  extra_annotations:
    hub.jupyter.org/username: from-extra
    spawner.dsmlp.io/user: from-extra
`, Request{User: "Eve", Server: "s1"})
	l := objs.Pod.Labels
	want := map[string]string{
		"hub.jupyter.org/username":   "from-extra", // extra_labels win over the username label
		"app":                        "jupyterhub", // common_labels win over extra_labels
		"component":                  "singleuser-server",
		"hub.jupyter.org/servername": "s1",
		LabelUser:                    "Eve",
		LabelCourse:                  "dsc10",
		LabelGPUClass:                "a100",
		"own":                        "eve---b9bae658",
	}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("label %s = %q, want %q", k, l[k], v)
		}
	}
	a := objs.Pod.Annotations
	if a[AnnotationUser] != "from-extra" || a[AnnotationSpawnerUser] != "Eve" || a[AnnotationServer] != "s1" || a[AnnotationSpawnerServer] != "s1" {
		t.Errorf("annotations = %v", a)
	}
}

// test_objects.py's service account / automount combinations.
func TestBuildServiceAccount(t *testing.T) {
	tests := map[string]struct {
		config        string
		wantSA        string
		wantAutomount *bool
	}{
		"neither":             {"kubespawner: {}\n", "", ptr(false)},
		"service account":     {"kubespawner: {service_account: 'sa-{username}'}\n", "sa-u", nil},
		"sa and automount":    {"kubespawner: {service_account: sa, automount_service_account_token: true}\n", "sa", ptr(true)},
		"sa and no automount": {"kubespawner: {service_account: sa, automount_service_account_token: false}\n", "sa", ptr(false)},
		"automount only":      {"kubespawner: {automount_service_account_token: true}\n", "", ptr(true)},
		"no automount only":   {"kubespawner: {automount_service_account_token: false}\n", "", ptr(false)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			objs, _ := build(t, tc.config, Request{User: "u"})
			spec := objs.Pod.Spec
			if spec.ServiceAccountName != tc.wantSA || !reflect.DeepEqual(spec.AutomountServiceAccountToken, tc.wantAutomount) {
				t.Errorf("sa = %q automount = %v, want %q %v", spec.ServiceAccountName, spec.AutomountServiceAccountToken, tc.wantSA, tc.wantAutomount)
			}
		})
	}
}

func TestBuildSecurityContexts(t *testing.T) {
	tests := map[string]struct {
		config  string
		wantCSC *corev1.SecurityContext
		wantPSC *corev1.PodSecurityContext
	}{
		"uid gid fs_gid": {
			config:  "kubespawner: {uid: 1000, gid: 100, fs_gid: 100, supplemental_gids: [5]}\n",
			wantCSC: &corev1.SecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(100)), AllowPrivilegeEscalation: ptr(false)},
			wantPSC: &corev1.PodSecurityContext{FSGroup: ptr(int64(100)), SupplementalGroups: []int64{5}},
		},
		"privileged, escalation omitted": {
			config:  "kubespawner: {privileged: true, allow_privilege_escalation: null}\n",
			wantCSC: &corev1.SecurityContext{Privileged: ptr(true)},
		},
		"nothing at all": {
			config: "kubespawner: {allow_privilege_escalation: null}\n",
		},
		"dicts win": {
			config:  "kubespawner: {uid: 1000, fs_gid: 100, container_security_context: {runAsUser: 0, allowPrivilegeEscalation: true}, pod_security_context: {fsGroup: 5, runAsNonRoot: true}}\n",
			wantCSC: &corev1.SecurityContext{RunAsUser: ptr(int64(0)), AllowPrivilegeEscalation: ptr(true)},
			wantPSC: &corev1.PodSecurityContext{FSGroup: ptr(int64(5)), RunAsNonRoot: ptr(true)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			objs, _ := build(t, tc.config, Request{User: "u"})
			if got := notebook(t, objs.Pod).SecurityContext; !reflect.DeepEqual(got, tc.wantCSC) {
				t.Errorf("container securityContext = %+v, want %+v", got, tc.wantCSC)
			}
			if got := objs.Pod.Spec.SecurityContext; !reflect.DeepEqual(got, tc.wantPSC) {
				t.Errorf("pod securityContext = %+v, want %+v", got, tc.wantPSC)
			}
		})
	}
}

// extra_container_config and extra_pod_config replace top-level fields,
// after everything else.
func TestBuildExtraConfig(t *testing.T) {
	objs, _ := build(t, `
kubespawner:
  volumes: [{name: v, emptyDir: {}}]
  extra_container_config:
    env: [{name: ONLY, value: this}]
    working_dir: /srv
  extra_pod_config:
    restartPolicy: Never
    dns_policy: None
    subdomain: "{username}"
`, Request{User: "u"})
	c := notebook(t, objs.Pod)
	if len(c.Env) != 1 || c.Env[0].Name != "ONLY" || c.WorkingDir != "/srv" {
		t.Errorf("container env %+v workingDir %q, want replaced", c.Env, c.WorkingDir)
	}
	spec := objs.Pod.Spec
	if spec.RestartPolicy != corev1.RestartPolicyNever || spec.DNSPolicy != corev1.DNSNone || spec.Subdomain != "u" {
		t.Errorf("spec restartPolicy %q dnsPolicy %q subdomain %q", spec.RestartPolicy, spec.DNSPolicy, spec.Subdomain)
	}
	if len(spec.Volumes) != 1 {
		t.Errorf("volumes = %+v, want the configured one kept", spec.Volumes)
	}
}

func TestBuildAffinity(t *testing.T) {
	objs, _ := build(t, `
kubespawner:
  node_affinity_required:
    - matchExpressions: [{key: zone, operator: In, values: [a]}]
  pod_anti_affinity_preferred:
    b: {weight: 2, podAffinityTerm: {topologyKey: kubernetes.io/hostname}}
    a: {weight: 1, podAffinityTerm: {topologyKey: zone}}
`, Request{User: "u"})
	a := objs.Pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
		len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 0 || a.PodAffinity != nil {
		t.Fatalf("affinity = %+v", a)
	}
	pref := a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(pref) != 2 || pref[0].Weight != 1 || pref[1].Weight != 2 {
		t.Errorf("anti-affinity = %+v, want dict values sorted by key", pref)
	}
}

// test_spawner.py's test_get_pvc_manifest and test_objects.py's PVC cases.
func TestBuildPVC(t *testing.T) {
	base := "kubespawner:\n  storage_pvc_ensure: true\n  storage_capacity: 1Gi\n"
	tests := map[string]struct {
		extra         string
		wantClass     *string
		wantSelector  bool
		wantName      string
		wantLabelUser string
	}{
		"no class": {wantName: "claim-mock-name---6241db84"},
		"empty class": {
			extra: "  storage_class: ''\n", wantClass: ptr(""), wantName: "claim-mock-name---6241db84",
		},
		"templates": {
			extra: "  storage_class: gp3\n  pvc_name_template: user-{username}\n" +
				"  storage_extra_labels: {user: '{username}'}\n  storage_extra_annotations: {user: '{username}'}\n" +
				"  storage_selector: {matchLabels: {user: '{username}'}}\n",
			wantClass: ptr("gp3"), wantSelector: true, wantName: "user-mock-name---6241db84", wantLabelUser: "mock-name---6241db84",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			objs, _ := build(t, base+tc.extra, Request{User: "mock@name"})
			pvc := objs.PVC
			if pvc == nil {
				t.Fatal("no PVC with storage_pvc_ensure")
			}
			if pvc.Name != tc.wantName {
				t.Errorf("name = %q, want %q", pvc.Name, tc.wantName)
			}
			if !reflect.DeepEqual(pvc.Spec.StorageClassName, tc.wantClass) {
				t.Errorf("storageClassName = %v, want %v", pvc.Spec.StorageClassName, tc.wantClass)
			}
			ann, hasAnn := pvc.Annotations[AnnotationStorageClass]
			if hasAnn != (tc.wantClass != nil) || (hasAnn && ann != *tc.wantClass) {
				t.Errorf("storage class annotation = %q (%v), want %v", ann, hasAnn, tc.wantClass)
			}
			if (pvc.Spec.Selector != nil) != tc.wantSelector {
				t.Errorf("selector = %+v, want set: %v", pvc.Spec.Selector, tc.wantSelector)
			}
			if tc.wantSelector && pvc.Spec.Selector.MatchLabels["user"] != tc.wantLabelUser {
				t.Errorf("selector = %+v", pvc.Spec.Selector)
			}
			l := pvc.Labels
			if l["component"] != StorageComponent || l["app.kubernetes.io/component"] != "singleuser-server" ||
				l["hub.jupyter.org/username"] != "mock-name---6241db84" || l[LabelUser] != "mock-name---6241db84" {
				t.Errorf("labels = %v", l)
			}
			if _, ok := l[LabelServername]; ok {
				t.Error("PVC has the servername label; KubeSpawner gives it only to pods")
			}
			if tc.wantLabelUser != "" && (l["user"] != tc.wantLabelUser || pvc.Annotations["user"] != tc.wantLabelUser) {
				t.Errorf("storage extra labels/annotations not expanded: %v %v", l, pvc.Annotations)
			}
			if pvc.Annotations[AnnotationUser] != "mock@name" {
				t.Errorf("annotations = %v", pvc.Annotations)
			}
			q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
			if q.String() != "1Gi" || !reflect.DeepEqual(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
				t.Errorf("spec = %+v", pvc.Spec)
			}
		})
	}
}

func TestBuildServiceAndNamespace(t *testing.T) {
	objs, _ := build(t, `
kubespawner:
  services_enabled: true
  enable_user_namespaces: true
  port: 9000
  extra_labels: {x: "1"}
  user_namespace_labels: {owner: "{username}"}
`, Request{User: "ann", Server: "two", HubNamespace: "jhub"})
	svc := objs.Service
	if svc == nil || svc.Name != objs.Pod.Name || svc.Namespace != "jhub-ann" || objs.Pod.Namespace != "jhub-ann" {
		t.Fatalf("service %+v, pod namespace %q", svc, objs.Pod.Namespace)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "http" ||
		svc.Spec.Ports[0].Port != 9000 || svc.Spec.Ports[0].TargetPort.IntValue() != 9000 {
		t.Errorf("service spec = %+v", svc.Spec)
	}
	for k, v := range svc.Spec.Selector {
		if objs.Pod.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod (%q)", k, v, objs.Pod.Labels[k])
		}
	}
	if svc.Spec.Selector["component"] != "singleuser-server" || svc.Spec.Selector["hub.jupyter.org/servername"] != "two" {
		t.Errorf("selector = %v", svc.Spec.Selector)
	}
	if _, ok := svc.Labels["component"]; ok || svc.Labels["x"] != "1" || svc.Labels[LabelUser] != "ann" {
		t.Errorf("service labels = %v", svc.Labels)
	}
	ns := objs.Namespace
	if ns == nil || ns.Name != "jhub-ann" || ns.Labels["owner"] != "ann" || ns.Labels[LabelUser] != "ann" || ns.Annotations[AnnotationSpawnerUser] != "ann" {
		t.Errorf("namespace = %+v", ns)
	}
}

func TestBuildErrors(t *testing.T) {
	cfg := mustParse(t, "kubespawner:\n  extra_labels: {who: '{unescaped_username}'}\n  profile_list: [{display_name: A}]\n")
	if _, _, err := Build(cfg, Request{User: "a@b", UserOptions: map[string]any{"profile": "zzz"}}); !errors.As(err, new(*FieldError)) {
		t.Errorf("unknown profile: Build = %v, want a *FieldError", err)
	}
	_, _, err := Build(cfg, Request{User: "a@b"})
	if err == nil || !strings.Contains(err.Error(), "extra_labels[who]") {
		t.Errorf("Build = %v, want an error naming extra_labels[who] (a@b is not a label value)", err)
	}
	if _, _, err := Build(cfg, Request{User: "ab"}); err != nil {
		t.Errorf("Build for a label-safe user: %v", err)
	}
}

func TestBuildDeterministic(t *testing.T) {
	cfg, err := Load("testdata/profiles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	req := Request{User: "bob", Server: "x", Env: hubEnv("bob", "x"), UserOptions: map[string]any{"profile": "datascience", "size": "large"}}
	a, _, err := Build(cfg, req)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := Build(cfg, req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Error("two Builds of the same request differ")
	}
}

func TestPodURL(t *testing.T) {
	pod := func(ip, user, server string, port int32) *corev1.Pod {
		p := &corev1.Pod{}
		p.Name, p.Namespace = "jupyter-x", "ns"
		p.Annotations = map[string]string{AnnotationSpawnerUser: user, AnnotationSpawnerServer: server}
		p.Spec.Containers = []corev1.Container{{Name: ContainerName, Ports: []corev1.ContainerPort{{Name: PortName, ContainerPort: port}}}}
		p.Status.PodIP = ip
		return p
	}
	tests := map[string]struct {
		config string
		pod    *corev1.Pod
		want   string
	}{
		"ipv4":             {"kubespawner: {}\n", pod("10.0.0.7", "u", "", 8888), "http://10.0.0.7:8888"},
		"ipv6 bracketed":   {"kubespawner: {}\n", pod("cafe:f00d::", "u", "", 8888), "http://[cafe:f00d::]:8888"},
		"port from pod":    {"kubespawner: {port: 1234}\n", pod("10.0.0.7", "u", "", 8888), "http://10.0.0.7:8888"},
		"service dns name": {"kubespawner: {services_enabled: true}\n", pod("10.0.0.7", "u", "", 8888), "http://jupyter-x.ns.svc.cluster.local:8888"},
		"connect ip default server": {
			"kubespawner: {pod_connect_ip: 'jupyter-{username}--{servername}.foo.example.com'}\n",
			pod("10.0.0.7", "connectip", "", 8888), "http://jupyter-connectip.foo.example.com:8888",
		},
		"connect ip named server": {
			"kubespawner: {pod_connect_ip: 'jupyter-{username}--{servername}.foo.example.com'}\n",
			pod("10.0.0.7", "connectip", "server", 8888), "http://jupyter-connectip--server.foo.example.com:8888",
		},
		"connect ip pod name": {
			"kubespawner: {pod_connect_ip: '{pod_name}.{namespace}.svc'}\n",
			pod("10.0.0.7", "u", "", 8888), "http://jupyter-x.ns.svc:8888",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := mustParse(t, tc.config).KubeSpawner
			if got := PodURL(tc.pod, &s); got != tc.want {
				t.Errorf("PodURL = %q, want %q", got, tc.want)
			}
		})
	}
}

func BenchmarkBuild(b *testing.B) {
	cfg, err := Load("testdata/profiles.yaml")
	if err != nil {
		b.Fatal(err)
	}
	req := Request{User: "bob@ucsd.edu", Server: "lab", Env: hubEnv("bob@ucsd.edu", "lab"),
		UserOptions: map[string]any{"profile": "datascience", "size": "large", "image--unlisted-choice": "ucsdets/x:1"}}
	for b.Loop() {
		if _, _, err := Build(cfg, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	cfg, err := Load("testdata/profiles.yaml")
	if err != nil || cfg == nil {
		b.Fatal(err)
	}
	data := []byte(profilesConfig)
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// DefaultPod names the pod Build makes for a plain spawn, whatever the
// naming traits: the default profile's namespace and template, user
// namespaces, the escape slug scheme, long names and named servers.
func TestDefaultPodIsBuildsPod(t *testing.T) {
	configs := map[string]string{
		"profiles":    profilesConfig,
		"plain":       "kubespawner: {namespace: jhub}\n",
		"user ns":     "kubespawner:\n  enable_user_namespaces: true\n  user_namespace_template: 'u-{username}'\n",
		"escape":      "kubespawner:\n  slug_scheme: escape\n  pod_name_template: 'nb-{user_server}'\n",
		"moved":       "kubespawner:\n  namespace: base\n  profile_list:\n  - {display_name: A, default: true, kubespawner_override: {namespace: course-a, pod_name_template: 'a-{username}--{servername}'}}\n",
		"non-default": "kubespawner:\n  namespace: base\n  profile_list:\n  - {display_name: A, kubespawner_override: {namespace: course-a}}\n  - {display_name: B, default: true}\n",
	}
	users := []struct{ user, server string }{
		{"alice", ""}, {"bob@ucsd.edu", "lab"}, {"Ünïcode.Name", "gpu-1"},
		{strings.Repeat("averyveryverylongusername", 3), strings.Repeat("s", 40)},
	}
	for name, text := range configs {
		cfg := mustParse(t, text)
		for _, u := range users {
			objs, _, err := Build(cfg, Request{User: u.user, Server: u.server})
			if err != nil {
				t.Fatalf("%s: Build(%q, %q): %v", name, u.user, u.server, err)
			}
			ns, pod, err := DefaultPod(cfg, u.user, u.server)
			if err != nil {
				t.Fatalf("%s: DefaultPod(%q, %q): %v", name, u.user, u.server, err)
			}
			if ns != objs.Pod.Namespace || pod != objs.Pod.Name {
				t.Errorf("%s: DefaultPod(%q, %q) = %s/%s, Build made %s/%s", name, u.user, u.server, ns, pod, objs.Pod.Namespace, objs.Pod.Name)
			}
		}
	}
}
