package spawnerd_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/dsmlp/spawner/e2e/harness"
)

// A KubeSpawner configuration with JupyterHub's own Spawner traits and a
// profile whose environment override removes a variable with null.
const jupyterhubTraitsConfig = `
kubespawner:
  namespace: %s
  hub_namespace: jhub-e2e
  cmd: jupyterhub-singleuser
  args: [--ServerApp.terminals_enabled=False]
  notebook_dir: /home/jovyan
  default_url: /lab
  debug: true
  environment:
    COURSE_DATA: /data/dsc10
    HTTPS_PROXY: http://proxy.ucsd.edu:3128
    HUB_USER_ID: "{userid}"
    HUB_NAMESPACE: "{hubnamespace}"
  profile_list:
  - display_name: Offline exam
    slug: exam
    kubespawner_override:
      default_url: /tree/{username}
      debug: false
      disable_user_config: true
      environment: {HTTPS_PROXY: null, EXAM_MODE: "1"}
`

// The pod a start creates carries the traits as JupyterHub 3.0's get_env
// would set them (the hub sends no arguments for them), with the profile's
// values replacing the hub's own, and without the variable the override
// removed.
func TestSpawnCarriesJupyterHubTraits(t *testing.T) {
	ns := env.Namespace(t)
	api := env.StartSpawnerd(t, bin, harness.SpawnerdOptions{Config: fmt.Sprintf(jupyterhubTraitsConfig, ns)})
	body := startBody("ann", "", map[string]any{"profile": "exam"})
	body["user_id"] = 1042
	hubEnv := body["env"].(map[string]string)
	// What the hub's get_env adds from its own c.Spawner.debug and
	// default_url; spawnerd's settings replace both.
	hubEnv["JUPYTERHUB_DEBUG"] = "1"
	hubEnv["JUPYTERHUB_DEFAULT_URL"] = "/hub-side"
	var m harness.ServerModel
	if code := api.Do(http.MethodPost, harness.ServerPath("ann", ""), "ann", false, body, &m); code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("start: status %d, %+v", code, m)
	}
	m = api.WaitStatus("ann", "", "running")
	pod, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), m.Pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if want := []string{"jupyterhub-singleuser", "--ServerApp.terminals_enabled=False"}; !reflect.DeepEqual(c.Args, want) {
		t.Errorf("args = %q, want %q (cmd + args only)", c.Args, want)
	}
	got := envOf(c)
	for k, want := range map[string]string{
		"JUPYTERHUB_DEFAULT_URL":         "/tree/ann",
		"JUPYTERHUB_ROOT_DIR":            "/home/jovyan",
		"JUPYTERHUB_DISABLE_USER_CONFIG": "1",
		"JUPYTERHUB_SERVICE_URL":         "http://0.0.0.0:8888/user/ann/",
		"COURSE_DATA":                    "/data/dsc10",
		"EXAM_MODE":                      "1",
		"HUB_USER_ID":                    "1042",
		"HUB_NAMESPACE":                  "jhub-e2e",
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("env %s = %q (present %v), want %q", k, v, ok, want)
		}
	}
	for _, k := range []string{"HTTPS_PROXY", "JUPYTERHUB_DEBUG"} {
		if v, ok := got[k]; ok {
			t.Errorf("env %s = %q, want it absent", k, v)
		}
	}
}

func envOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

// spawnerd render takes the hub's user id and namespace, and the real
// binary refuses a hub-side trait at startup with where to set it.
func TestRenderUserIDAndRefusals(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(fmt.Sprintf(jupyterhubTraitsConfig, "jhub")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "render", "--config", good, "--user", "ann", "--user-id", "77",
		"--hub-namespace", "other-hub", "--profile", "exam").Output()
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(out, &pod); err != nil {
		t.Fatalf("render output is not one pod: %v\n%s", err, out)
	}
	got := envOf(pod.Spec.Containers[0])
	if got["HUB_USER_ID"] != "77" || got["HUB_NAMESPACE"] != "other-hub" || got["JUPYTERHUB_DEFAULT_URL"] != "/tree/ann" {
		t.Errorf("render env = %v, want HUB_USER_ID 77, HUB_NAMESPACE other-hub, JUPYTERHUB_DEFAULT_URL /tree/ann", got)
	}

	bad := filepath.Join(dir, "bad.yaml")
	text := "kubespawner:\n  pre_spawn_hook: my_hook\n  profile_list:\n  - display_name: A\n    kubespawner_override: {http_timeout: 60}\n"
	if err := os.WriteFile(bad, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"render", "--config", bad, "--user", "ann"},
		{"serve", "--config", bad, "--kubeconfig", env.Cluster.Kubeconfig(), "--listen", fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "SPAWNERD_SHARED_SECRET=e2e-shared-secret-0123456789")
		msg, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("%s with pre_spawn_hook: no error, output:\n%s", args[0], msg)
		}
		for _, want := range []string{
			"kubespawner.pre_spawn_hook: Forbidden: spawnerd cannot honour it: it is a Python hook the hub runs before start; set c.Spawner.pre_spawn_hook in jupyterhub_config.py",
			"kubespawner.profile_list[0].kubespawner_override.http_timeout: Forbidden: spawnerd cannot honour it:",
			"set c.Spawner.http_timeout in jupyterhub_config.py",
		} {
			if !strings.Contains(string(msg), want) {
				t.Errorf("%s output does not say %q:\n%s", args[0], want, msg)
			}
		}
	}
}
