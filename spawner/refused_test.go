package spawner

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Every config trait of KubeSpawner 7.1's class (kubespawner/spawner.py) and
// of JupyterHub 3.0's Spawner (jupyterhub/spawner.py, the traits tagged
// config=True) is either taken or refused with a reason, never both, so a
// KubeSpawner configuration is never told "unknown key".
func TestEveryKubeSpawnerTraitTakenOrRefused(t *testing.T) {
	kubespawner71 := []string{
		"k8s_api_verify_ssl", "k8s_api_ssl_ca_cert", "k8s_api_host", "k8s_api_threadpool_workers",
		"k8s_api_request_timeout", "k8s_api_request_retry_timeout", "events_enabled",
		"enable_user_namespaces", "slug_scheme", "user_namespace_labels", "user_namespace_annotations",
		"user_namespace_template", "namespace", "services_enabled", "ip", "cmd", "working_dir",
		"service_account", "automount_service_account_token", "dns_name_template", "pod_name_template",
		"pod_connect_ip", "storage_pvc_ensure", "delete_pvc", "pvc_name_template", "remember_pvc_name",
		"component_label", "secret_name_template", "secret_mount_path", "hub_connect_ip",
		"hub_connect_port", "common_labels", "extra_labels", "extra_annotations", "image",
		"image_pull_policy", "image_pull_secrets", "node_selector", "uid", "gid", "fs_gid",
		"supplemental_gids", "privileged", "allow_privilege_escalation", "container_security_context",
		"pod_security_context", "modify_pod_hook", "after_pod_created_hook", "volumes", "volume_mounts",
		"storage_capacity", "storage_extra_annotations", "storage_extra_labels", "storage_class",
		"storage_access_modes", "storage_selector", "lifecycle_hooks", "init_containers",
		"extra_container_config", "extra_pod_config", "extra_containers", "handle_legacy_names",
		"scheduler_name", "tolerations", "node_affinity_preferred", "node_affinity_required",
		"pod_affinity_preferred", "pod_affinity_required", "pod_anti_affinity_preferred",
		"pod_anti_affinity_required", "extra_resource_guarantees", "extra_resource_limits",
		"delete_stopped_pods", "additional_profile_form_template_paths", "profile_form_template",
		"profile_list", "priority_class_name", "delete_grace_period", "slow_spawn_message_threshold",
		"slow_spawn_message_frequency", "slow_spawn_message", "get_pod_url",
	}
	jupyterhub30 := []string{
		"args", "auth_state_hook", "cmd", "consecutive_failure_limit", "cpu_guarantee", "cpu_limit",
		"debug", "default_url", "disable_user_config", "env_keep", "environment", "http_timeout",
		"hub_connect_url", "ip", "mem_guarantee", "mem_limit", "notebook_dir",
		"oauth_client_allowed_scopes", "oauth_roles", "options_form", "options_from_form",
		"poll_interval", "port", "post_stop_hook", "pre_spawn_hook", "ssl_alt_names",
		"ssl_alt_names_include_local", "start_timeout",
	}
	for _, name := range append(kubespawner71, jupyterhub30...) {
		_, taken := traits[name]
		_, refused := refusedTraits[name]
		if taken == refused {
			t.Errorf("trait %q: taken %v, refused %v; want exactly one", name, taken, refused)
		}
	}
	for name := range refusedTraits {
		if _, taken := traits[name]; taken {
			t.Errorf("refused trait %q is also a Settings field", name)
		}
	}
}

// A refused trait stops the config with a message saying that spawnerd
// cannot honour it and where it belongs, at its path: at the top level, in
// a profile, in a choice and in an unlisted choice.
func TestRefusedTraitMessages(t *testing.T) {
	tests := map[string]struct {
		config    string
		wantField string
		wantMsg   string
	}{
		"hub hook": {
			config:    "kubespawner:\n  pre_spawn_hook: my_hook\n",
			wantField: "kubespawner.pre_spawn_hook",
			wantMsg:   "spawnerd cannot honour it: it is a Python hook the hub runs before start; set c.Spawner.pre_spawn_hook in jupyterhub_config.py",
		},
		"hub timeout": {
			config:    "kubespawner:\n  http_timeout: 60\n",
			wantField: "kubespawner.http_timeout",
			wantMsg:   "set c.Spawner.http_timeout in jupyterhub_config.py",
		},
		"hub environment": {
			config:    "kubespawner:\n  env_keep: [PATH]\n",
			wantField: "kubespawner.env_keep",
			wantMsg:   "set c.Spawner.env_keep in jupyterhub_config.py",
		},
		"poll interval in a profile": {
			config:    "kubespawner:\n  profile_list:\n  - {display_name: A, kubespawner_override: {poll_interval: 10}}\n",
			wantField: "kubespawner.profile_list[0].kubespawner_override.poll_interval",
			wantMsg:   "set c.Spawner.poll_interval in jupyterhub_config.py",
		},
		"python hook in a choice": {
			config: "kubespawner:\n  profile_list:\n  - display_name: A\n    profile_options:\n      o:\n        choices:\n" +
				"          c: {kubespawner_override: {modify_pod_hook: f}}\n",
			wantField: "kubespawner.profile_list[0].profile_options.o.choices.c.kubespawner_override.modify_pod_hook",
			wantMsg:   "spawnerd cannot honour it: it is a Python hook, which spawnerd cannot run",
		},
		"unlisted choice": {
			config: "kubespawner:\n  profile_list:\n  - display_name: A\n    profile_options:\n      o:\n        unlisted_choice:\n" +
				"          enabled: true\n          kubespawner_override: {options_form: '{value}'}\n",
			wantField: "kubespawner.profile_list[0].profile_options.o.unlisted_choice.kubespawner_override.options_form",
			wantMsg:   "set c.Spawner.options_form in jupyterhub_config.py",
		},
		"own connection": {
			config:    "kubespawner:\n  k8s_api_host: https://k8s:6443\n",
			wantField: "kubespawner.k8s_api_host",
			wantMsg:   "spawnerd serve --kubeconfig",
		},
		"internal ssl": {
			config:    "kubespawner:\n  secret_mount_path: /etc/ssl\n",
			wantField: "kubespawner.secret_mount_path",
			wantMsg:   "spawnerd cannot honour it: spawnerd does not support JupyterHub's internal_ssl",
		},
		"legacy names asked for": {
			config:    "kubespawner:\n  handle_legacy_names: true\n",
			wantField: "kubespawner.handle_legacy_names",
			wantMsg:   "never looks for a PVC named by KubeSpawner's pre-7 'escape' scheme",
		},
		"deprecated alias": {
			config:    "kubespawner:\n  singleuser_image_spec: x\n",
			wantField: "kubespawner.singleuser_image_spec",
			wantMsg:   "KubeSpawner deprecated it; rename it to image",
		},
		"storage alias": {
			config:    "kubespawner:\n  user_storage_capacity: 1Gi\n",
			wantField: "kubespawner.user_storage_capacity",
			wantMsg:   "rename it to storage_capacity",
		},
		"hub namespace in a profile": {
			config:    "kubespawner:\n  profile_list:\n  - {display_name: A, kubespawner_override: {hub_namespace: x}}\n",
			wantField: "kubespawner.profile_list[0].kubespawner_override.hub_namespace",
			wantMsg:   "the hub's namespace is the same for every profile",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.config))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse error = %v, want a *ValidationError", err)
			}
			if len(ve.Errors) != 1 {
				t.Fatalf("errors = %v, want one", ve.Errors)
			}
			got := ve.Errors[0]
			if got.Field != tc.wantField || got.Type != field.ErrorTypeForbidden || !strings.Contains(got.Detail, tc.wantMsg) {
				t.Errorf("error = %v\nwant Forbidden at %s saying %q", got, tc.wantField, tc.wantMsg)
			}
		})
	}
}

// handle_legacy_names: false asks for what spawnerd does, so it is taken.
func TestRefusedTraitAcceptedValue(t *testing.T) {
	mustParse(t, "kubespawner:\n  handle_legacy_names: false\n  profile_list:\n  - {display_name: A, kubespawner_override: {handle_legacy_names: false}}\n")
}

// A null in a profile's or choice's dict override deletes that key, at any
// depth, as KubeSpawner's recursive_update does; a null elsewhere is still
// checked.
func TestOverrideNullRemovesKey(t *testing.T) {
	cfg := mustParse(t, `
kubespawner:
  environment: {KEEP: k, DROP: d, CHOICE_DROP: c}
  node_selector: {pool: general, zone: a}
  extra_pod_config: {dnsConfig: {nameservers: [10.0.0.10], searches: [ucsd.edu]}}
  profile_list:
  - display_name: A
    kubespawner_override:
      environment: {DROP: null, NEW: "n"}
      node_selector: {zone: null}
      extra_pod_config: {dnsConfig: {searches: null}}
    profile_options:
      o:
        choices:
          c: {kubespawner_override: {environment: {CHOICE_DROP: null, NOT_THERE: null}}}
`)
	s, err := cfg.Resolve(map[string]any{"profile": "a"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range sortedKeys(s.Environment) {
		names = append(names, k+"="+s.Environment[k].Value)
	}
	if got, want := strings.Join(names, " "), "KEEP=k NEW=n"; got != want {
		t.Errorf("environment = %s, want %s", got, want)
	}
	if len(s.NodeSelector) != 1 || s.NodeSelector["pool"] != "general" {
		t.Errorf("node_selector = %v, want only pool", s.NodeSelector)
	}
	dns, _ := s.ExtraPodConfig["dnsConfig"].(map[string]any)
	if _, ok := dns["searches"]; ok || dns["nameservers"] == nil {
		t.Errorf("extra_pod_config.dnsConfig = %v, want nameservers only", dns)
	}

	for name, tc := range map[string]struct{ config, wantField string }{
		"a bad value beside a null": {
			config:    "kubespawner:\n  profile_list:\n  - {display_name: A, kubespawner_override: {environment: {A: null, B: [1]}}}\n",
			wantField: "kubespawner.profile_list[0].kubespawner_override.environment[B]",
		},
		"a null in the base config": {
			config:    "kubespawner:\n  environment: {A: null}\n",
			wantField: "kubespawner.environment[A]",
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.config))
			if got := errorFields(t, err); len(got) != 1 || got[0] != tc.wantField {
				t.Errorf("error fields = %v, want [%s]", got, tc.wantField)
			}
		})
	}
}

// notebook_dir, default_url, debug and disable_user_config set in spawnerd's
// config replace what the hub's get_env sent for them (a KubeSpawner
// setting, or a profile's, wins over c.Spawner's), and a false or empty
// value removes the hub's; unset, the hub's value passes through. The
// environment trait still wins over all, as in get_env.
func TestBuildJupyterHubTraitEnv(t *testing.T) {
	hub := hubEnv("ann", "")
	hub[EnvDebug] = "1"
	hub[EnvDefaultURL] = "/hub-default"
	hub[EnvRootDir] = "/hub-root"
	hub[EnvDisableUserConfig] = "1"
	tests := map[string]struct {
		config string
		want   map[string]string // "" means absent
	}{
		"unset: the hub's values": {
			config: "kubespawner: {}\n",
			want:   map[string]string{EnvDebug: "1", EnvDefaultURL: "/hub-default", EnvRootDir: "/hub-root", EnvDisableUserConfig: "1"},
		},
		"false and empty remove them": {
			config: "kubespawner: {debug: false, disable_user_config: false, default_url: '', notebook_dir: ''}\n",
			want:   map[string]string{EnvDebug: "", EnvDefaultURL: "", EnvRootDir: "", EnvDisableUserConfig: ""},
		},
		"format_string keys": {
			config: "kubespawner: {default_url: '{base_url}lab', notebook_dir: '/home/%U/{username}'}\n",
			want:   map[string]string{EnvDefaultURL: "/user/ann/lab", EnvRootDir: "/home/ann/ann", EnvDebug: "1"},
		},
		"a profile's value": {
			config: "kubespawner:\n  default_url: /lab\n  profile_list:\n  - {display_name: A, kubespawner_override: {default_url: /tree, debug: false}}\n",
			want:   map[string]string{EnvDefaultURL: "/tree", EnvDebug: ""},
		},
		"environment wins": {
			config: "kubespawner: {default_url: /lab, environment: {JUPYTERHUB_DEFAULT_URL: /from-environment}}\n",
			want:   map[string]string{EnvDefaultURL: "/from-environment"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			objs, _, err := Build(mustParse(t, tc.config), Request{User: "ann", Env: hub})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, e := range objs.Pod.Spec.Containers[0].Env {
				got[e.Name] = e.Value
			}
			for k, want := range tc.want {
				if v, ok := got[k]; (want == "" && ok) || v != want {
					t.Errorf("%s = %q (present %v), want %q", k, v, ok, want)
				}
			}
			if len(objs.Pod.Spec.Containers[0].Args) != 0 {
				t.Errorf("args = %v; these traits add no arguments", objs.Pod.Spec.Containers[0].Args)
			}
		})
	}

	_, err := Parse([]byte("kubespawner: {default_url: '/tree/{user_server}'}\n"))
	if got := errorFields(t, err); len(got) != 1 || got[0] != "kubespawner.default_url" {
		t.Errorf("a KubeSpawner key in default_url: error fields %v, want [kubespawner.default_url] (format_string knows only username and base_url)", got)
	}
}

// {hubnamespace} is the hub's namespace: the request's, else hub_namespace,
// else the service-account file's, else "default", which reads "user". It
// is never the namespace trait.
func TestHubNamespace(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withKey := write("with-key.yaml", "kubespawner: {namespace: nb, hub_namespace: jhub}\n")
	withoutKey := write("without-key.yaml", "kubespawner: {namespace: nb}\n")
	saFile := write("namespace", "hub-ns\n")
	missing := filepath.Join(dir, "missing")
	tests := map[string]struct {
		config, nsFile, reqNamespace, want string
	}{
		"config key":                  {config: withKey, nsFile: saFile, want: "jhub"},
		"service-account file":        {config: withoutKey, nsFile: saFile, want: "hub-ns"},
		"neither: default reads user": {config: withoutKey, nsFile: missing, want: "user"},
		"request wins":                {config: withKey, nsFile: saFile, reqNamespace: "other", want: "other"},
		"request default reads user":  {config: withKey, nsFile: saFile, reqNamespace: "default", want: "user"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadWithNamespaceFile(tc.config, tc.nsFile)
			if err != nil {
				t.Fatal(err)
			}
			s, err := cfg.Resolve(nil)
			if err != nil {
				t.Fatal(err)
			}
			n, err := NewNames(s, "ann", "", 0, tc.reqNamespace)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := n.Value("hubnamespace"); got != tc.want {
				t.Errorf("{hubnamespace} = %q, want %q", got, tc.want)
			}
		})
	}

	if _, err := LoadWithNamespaceFile(withoutKey, dir); err == nil {
		t.Error("an unreadable service-account file (a directory): want an error")
	}
	_, err := Parse([]byte("kubespawner: {hub_namespace: Not_A_Namespace}\n"))
	if got := errorFields(t, err); len(got) != 1 || got[0] != "kubespawner.hub_namespace" {
		t.Errorf("bad hub_namespace: error fields %v", got)
	}
}
