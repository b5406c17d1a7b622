package spawner

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Every trait in Settings has a default, and every default is a trait.
func TestDefaultTraitsCoverSettings(t *testing.T) {
	defaults := defaultTraits()
	for name := range traits {
		if _, ok := defaults[name]; !ok {
			t.Errorf("trait %q has no default in defaultTraits", name)
		}
	}
	for name := range defaults {
		if _, ok := traits[name]; !ok {
			t.Errorf("defaultTraits has %q, which is not a Settings field", name)
		}
	}
}

func TestParseDefaults(t *testing.T) {
	for name, text := range map[string]string{
		"empty section": "kubespawner: {}\n",
		"no section":    "spark: {}\n",
		"empty file":    "",
	} {
		t.Run(name, func(t *testing.T) {
			s := mustParse(t, text).KubeSpawner
			f, no := false, false
			checks := map[string][2]any{
				"image":                      {s.Image, DefaultImage},
				"port":                       {s.Port, 8888},
				"ip":                         {s.IP, "0.0.0.0"},
				"namespace":                  {s.Namespace, "default"},
				"pod_name_template":          {s.PodNameTemplate, "jupyter-{user_server}"},
				"pvc_name_template":          {s.PVCNameTemplate, "claim-{user_server}"},
				"user_namespace_template":    {s.UserNamespaceTemplate, "{hubnamespace}-{username}"},
				"slug_scheme":                {s.SlugScheme, "safe"},
				"component_label":            {s.ComponentLabel, "singleuser-server"},
				"start_timeout":              {s.StartTimeout, 60},
				"hub_namespace":              {s.HubNamespace, ""},
				"delete_grace_period":        {s.DeleteGracePeriod, int64(1)},
				"delete_stopped_pods":        {s.DeleteStoppedPods, true},
				"delete_pvc":                 {s.DeletePVC, true},
				"remember_pvc_name":          {s.RememberPVCName, true},
				"events_enabled":             {s.EventsEnabled, true},
				"services_enabled":           {s.ServicesEnabled, false},
				"storage_pvc_ensure":         {s.StoragePVCEnsure, false},
				"enable_user_namespaces":     {s.EnableUserNamespaces, false},
				"k8s_api_request_timeout":    {s.K8sAPIRequestTimeout, 3},
				"k8s_retry_timeout":          {s.K8sAPIRequestRetryTimeout, 30},
				"slow_spawn_threshold":       {s.SlowSpawnMessageThreshold, 60},
				"slow_spawn_frequency":       {s.SlowSpawnMessageFrequency, 5},
				"dns_name_template":          {s.DNSNameTemplate, "{name}.{namespace}.svc.cluster.local"},
				"allow_privilege_escalation": {s.AllowPrivilegeEscalation, &f},
				"privileged":                 {s.Privileged, no},
				"storage_access_modes":       {s.StorageAccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
				"common_labels": {s.CommonLabels, map[string]string{
					"app.kubernetes.io/name": "jupyterhub", "app.kubernetes.io/managed-by": "kubespawner",
					"app": "jupyterhub", "heritage": "jupyterhub",
				}},
			}
			for key, c := range checks {
				if !reflect.DeepEqual(c[0], c[1]) {
					t.Errorf("%s = %#v, want %#v", key, c[0], c[1])
				}
			}
			for key, v := range map[string]any{
				"cmd": s.Cmd, "image_pull_policy": s.ImagePullPolicy, "storage_class": s.StorageClass,
				"cpu_limit": s.CPULimit, "uid": s.UID, "service_account": s.ServiceAccount,
				"automount_service_account_token": s.AutomountServiceAccountToken,
				"notebook_dir":                    s.NotebookDir,
				"default_url":                     s.DefaultURL,
				"debug":                           s.Debug,
				"disable_user_config":             s.DisableUserConfig,
			} {
				if !reflect.ValueOf(v).IsNil() {
					t.Errorf("%s = %#v, want unset", key, v)
				}
			}
			if s.MemLimit != 0 || len(s.ProfileList) != 0 {
				t.Errorf("mem_limit = %d, profiles = %d; want none", s.MemLimit, len(s.ProfileList))
			}
		})
	}
}

// Config errors are reported all at once, each under the path of its key.
func TestParseErrors(t *testing.T) {
	tests := map[string]struct {
		config     string
		wantFields []string
	}{
		"unknown trait": {
			config:     "kubespawner:\n  imagee: x\n",
			wantFields: []string{"kubespawner.imagee"},
		},
		"trait names are case sensitive": {
			config:     "kubespawner:\n  Image: x\n",
			wantFields: []string{"kubespawner.Image"},
		},
		"unknown top-level key": {
			config:     "kubespawnr: {}\n",
			wantFields: []string{"kubespawnr"},
		},
		"ports": {
			config:     "kubespawner:\n  port: 70000\n",
			wantFields: []string{"kubespawner.port"},
		},
		"negative port": {
			config:     "kubespawner:\n  port: -1\n",
			wantFields: []string{"kubespawner.port"},
		},
		"wrong type": {
			config:     "kubespawner:\n  port: eighty\n  delete_pvc: maybe\n",
			wantFields: []string{"kubespawner.delete_pvc", "kubespawner.port"},
		},
		"guarantees above limits": {
			config:     "kubespawner:\n  cpu_limit: 1\n  cpu_guarantee: 2\n  mem_limit: 1G\n  mem_guarantee: 2G\n",
			wantFields: []string{"kubespawner.cpu_guarantee", "kubespawner.mem_guarantee"},
		},
		"bad byte strings": {
			config:     "kubespawner:\n  mem_limit: 2Q\n  mem_guarantee: 2Gi\n",
			wantFields: []string{"kubespawner.mem_guarantee", "kubespawner.mem_limit"},
		},
		"negative bytes": {
			config:     "kubespawner:\n  mem_limit: -5\n",
			wantFields: []string{"kubespawner.mem_limit"},
		},
		"slug scheme": {
			config:     "kubespawner:\n  slug_scheme: fancy\n",
			wantFields: []string{"kubespawner.slug_scheme"},
		},
		"unknown template key": {
			config: "kubespawner:\n  pod_name_template: jupyter-{user}\n  pvc_name_template: claim-{0}\n" +
				"  extra_labels: {who: '{nobody}'}\n  environment: {A: 'x{oops}'}\n  dns_name_template: '{name}.{cluster}'\n",
			wantFields: []string{
				"kubespawner.dns_name_template", "kubespawner.environment.A",
				"kubespawner.extra_labels.who", "kubespawner.pod_name_template", "kubespawner.pvc_name_template",
			},
		},
		"unbalanced braces": {
			config:     "kubespawner:\n  pod_name_template: 'jupyter-{username'\n  working_dir: '/home/}'\n",
			wantFields: []string{"kubespawner.pod_name_template", "kubespawner.working_dir"},
		},
		"invalid labels": {
			config: "kubespawner:\n  extra_labels: {'bad key!': x, ok: -bad}\n  common_labels: {a: '" +
				strings.Repeat("x", 64) + "'}\n  node_selector: {k: 'a b'}\n",
			wantFields: []string{
				"kubespawner.common_labels[a]", "kubespawner.extra_labels[bad key!]",
				"kubespawner.extra_labels[ok]", "kubespawner.node_selector[k]",
			},
		},
		"invalid annotation key": {
			config:     "kubespawner:\n  extra_annotations: {'no spaces': x}\n",
			wantFields: []string{"kubespawner.extra_annotations[no spaces]"},
		},
		"typo inside a toleration": {
			config:     "kubespawner:\n  tolerations:\n    - key: a\n      effectt: NoSchedule\n",
			wantFields: []string{"kubespawner.tolerations[0].effectt"},
		},
		"typo inside a dict volume": {
			config:     "kubespawner:\n  volumes:\n    home: {name: home, emptyDirr: {}}\n",
			wantFields: []string{"kubespawner.volumes[home].emptyDirr"},
		},
		"typo nested in an init container": {
			config:     "kubespawner:\n  init_containers:\n    - name: i\n      image: busybox\n      securityContext: {runAsUserr: 0}\n",
			wantFields: []string{"kubespawner.init_containers[0].securityContext.runAsUserr"},
		},
		"extra pod config typo": {
			config:     "kubespawner:\n  extra_pod_config: {nodeNamee: x}\n  extra_container_config: {imagee: y}\n",
			wantFields: []string{"kubespawner.extra_container_config.imagee", "kubespawner.extra_pod_config.nodeNamee"},
		},
		"snake case in security context": {
			config:     "kubespawner:\n  container_security_context: {run_as_user: 1}\n  pod_security_context: {fs_group: 1}\n",
			wantFields: []string{"kubespawner.container_security_context.run_as_user", "kubespawner.pod_security_context.fs_group"},
		},
		"environment value types": {
			config:     "kubespawner:\n  environment: {A: 1, B: {valueFromm: {}}}\n",
			wantFields: []string{"kubespawner.environment[A]", "kubespawner.environment[B].valueFromm"},
		},
		"empty cmd": {
			config:     "kubespawner:\n  cmd: []\n",
			wantFields: []string{"kubespawner.cmd"},
		},
		"pull policy and access mode": {
			config:     "kubespawner:\n  image_pull_policy: Sometimes\n  storage_access_modes: [ReadWriteSometimes]\n",
			wantFields: []string{"kubespawner.image_pull_policy", "kubespawner.storage_access_modes[0]"},
		},
		"pvc without capacity": {
			config:     "kubespawner:\n  storage_pvc_ensure: true\n",
			wantFields: []string{"kubespawner.storage_capacity"},
		},
		"request above limit": {
			config:     "kubespawner:\n  extra_resource_guarantees: {nvidia.com/gpu: '2'}\n  extra_resource_limits: {nvidia.com/gpu: '1'}\n",
			wantFields: []string{"kubespawner.extra_resource_guarantees[nvidia.com/gpu]"},
		},
		"namespace and timeouts": {
			config:     "kubespawner:\n  namespace: Not_A_Namespace\n  start_timeout: 0\n  delete_grace_period: -1\n",
			wantFields: []string{"kubespawner.delete_grace_period", "kubespawner.namespace", "kubespawner.start_timeout"},
		},
		"platform labels": {
			config:     "kubespawner:\n  course: 'DSC 10'\n  gpu_class: '-a30'\n",
			wantFields: []string{"kubespawner.course", "kubespawner.gpu_class"},
		},
		"negative ids": {
			config:     "kubespawner:\n  uid: -1\n  supplemental_gids: [5, -2]\n",
			wantFields: []string{"kubespawner.supplemental_gids[1]", "kubespawner.uid"},
		},
		"pull secret without name": {
			config:     "kubespawner:\n  image_pull_secrets: [{}]\n",
			wantFields: []string{"kubespawner.image_pull_secrets[0].name"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.config))
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			got := errorFields(t, err)
			sort.Strings(got)
			if !reflect.DeepEqual(got, tc.wantFields) {
				t.Errorf("error fields = %q, want %q\nerror: %v", got, tc.wantFields, err)
			}
		})
	}
}

func TestParseQuantityErrors(t *testing.T) {
	_, err := Parse([]byte("kubespawner:\n  storage_capacity: lots\n  extra_resource_limits: {nvidia.com/gpu: one, 'bad name!': '1'}\n"))
	got := errorFields(t, err)
	want := []string{
		"kubespawner.extra_resource_limits[bad name!]",
		"kubespawner.extra_resource_limits[nvidia.com/gpu]",
		"kubespawner.storage_capacity",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("error fields = %q, want %q", got, want)
	}
}

func TestParseByteSize(t *testing.T) {
	tests := map[string]struct {
		value string
		want  ByteSize
	}{
		"gigabytes are 1024-based": {`"2G"`, 2 << 30},
		"fraction":                 {`"1.5M"`, 1572864},
		"kilobytes":                {`"512K"`, 512 << 10},
		"terabytes":                {`"1T"`, 1 << 40},
		"plain int is bytes":       {`1024`, 1024},
		"digit string is bytes":    {`"4096"`, 4096},
		"float truncated":          {`1536.9`, 1536},
		"null":                     {`null`, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := mustParse(t, "kubespawner:\n  mem_limit: "+tc.value+"\n").KubeSpawner
			if s.MemLimit != tc.want {
				t.Errorf("mem_limit %s = %d, want %d", tc.value, s.MemLimit, tc.want)
			}
		})
	}
	for _, bad := range []string{`"2g"`, `"2Gi"`, `"G"`, `"1.5"`, `"-1G"`, `true`, `[1]`} {
		if _, err := Parse([]byte("kubespawner:\n  mem_limit: " + bad + "\n")); err == nil {
			t.Errorf("mem_limit %s: want an error", bad)
		}
	}
}

func TestParseTraitShapes(t *testing.T) {
	cfg := mustParse(t, `
kubespawner:
  cmd: jupyterhub-singleuser
  image_pull_secrets: [regcred, {name: ecr}]
  allow_privilege_escalation: null
  storage_class: ""
  volumes:
    zz-last: {name: z, emptyDir: {}}
    aa-first: {name: a, emptyDir: {}}
  tolerations:
    - key: k
      toleration_seconds: 30
      operator: Exists
  init_containers:
    - name: init
      image: busybox
      image_pull_policy: Never
  extra_container_config:
    image_pull_policy: Always
  extra_pod_config:
    restart_policy: Never
    hostIPC: false
  lifecycle_hooks:
    pre_stop: {exec: {command: [stop]}}
  environment:
    PLAIN: value
    FROM_SECRET: {value_from: {secretKeyRef: {name: s, key: k}}}
    RENAMED: {name: OTHER, value: v}
`)
	s := cfg.KubeSpawner
	if !reflect.DeepEqual(s.Cmd, Command{"jupyterhub-singleuser"}) {
		t.Errorf("cmd = %q, want one-element list", s.Cmd)
	}
	if want := (PullSecrets{{Name: "regcred"}, {Name: "ecr"}}); !reflect.DeepEqual(s.ImagePullSecrets, want) {
		t.Errorf("image_pull_secrets = %v, want %v", s.ImagePullSecrets, want)
	}
	if s.AllowPrivilegeEscalation != nil {
		t.Errorf("allow_privilege_escalation = %v, want nil (null omits it)", *s.AllowPrivilegeEscalation)
	}
	if s.StorageClass == nil || *s.StorageClass != "" {
		t.Errorf("storage_class = %v, want explicit empty string", s.StorageClass)
	}
	if len(s.Volumes) != 2 || s.Volumes[0].Name != "a" || s.Volumes[1].Name != "z" {
		t.Errorf("volumes = %+v, want dict values sorted by key (a, z)", s.Volumes)
	}
	if len(s.Tolerations) != 1 || s.Tolerations[0].TolerationSeconds == nil || *s.Tolerations[0].TolerationSeconds != 30 {
		t.Errorf("tolerations = %+v, want snake_case toleration_seconds read", s.Tolerations)
	}
	if s.InitContainers[0].ImagePullPolicy != corev1.PullNever {
		t.Errorf("init container pull policy = %q, want Never", s.InitContainers[0].ImagePullPolicy)
	}
	if s.ExtraContainerConfig["imagePullPolicy"] != "Always" {
		t.Errorf("extra_container_config = %v, want camelCase key", s.ExtraContainerConfig)
	}
	if s.ExtraPodConfig["restartPolicy"] != "Never" || s.ExtraPodConfig["hostIPC"] != false {
		t.Errorf("extra_pod_config = %v, want camelCase keys", s.ExtraPodConfig)
	}
	if s.LifecycleHooks == nil || s.LifecycleHooks.PreStop == nil {
		t.Errorf("lifecycle_hooks = %+v, want preStop from pre_stop", s.LifecycleHooks)
	}
	env := s.Environment
	if env["PLAIN"].Value != "value" || env["PLAIN"].Name != "PLAIN" {
		t.Errorf("PLAIN = %+v", env["PLAIN"])
	}
	if env["FROM_SECRET"].ValueFrom == nil || env["FROM_SECRET"].ValueFrom.SecretKeyRef.Name != "s" || env["FROM_SECRET"].Name != "FROM_SECRET" {
		t.Errorf("FROM_SECRET = %+v, want valueFrom with the key as name", env["FROM_SECRET"])
	}
	if env["RENAMED"].Name != "OTHER" {
		t.Errorf("RENAMED = %+v, want the configured name kept", env["RENAMED"])
	}
}

func TestParseReservedSections(t *testing.T) {
	cfg := mustParse(t, "spark:\n  workers: 2\nreservation: {anything: [1, 2]}\n")
	if string(cfg.Spark) != `{"workers":2}` {
		t.Errorf("spark = %s", cfg.Spark)
	}
	if string(cfg.Reservation) != `{"anything":[1,2]}` {
		t.Errorf("reservation = %s", cfg.Reservation)
	}
	if cfg = mustParse(t, "kubespawner: {}\n"); cfg.Spark != nil || cfg.Reservation != nil {
		t.Errorf("absent sections = %s, %s; want nil", cfg.Spark, cfg.Reservation)
	}
}

func TestParseDuplicateKey(t *testing.T) {
	if _, err := Parse([]byte("kubespawner:\n  image: a\n  image: b\n")); err == nil {
		t.Error("duplicate key: want an error")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "spawner.yaml")
	if err := os.WriteFile(path, []byte("kubespawner:\n  image: example/notebook:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.KubeSpawner.Image != "example/notebook:1" {
		t.Errorf("image = %q", cfg.KubeSpawner.Image)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want a not-exist error", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("kubespawner:\n  port: 0.5.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "kubespawner.port") {
		t.Errorf("Load(bad) = %v, want an error naming kubespawner.port", err)
	}
}
