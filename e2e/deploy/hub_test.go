package deploy_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// hubValues is the part of zero-to-jupyterhub's values the hub side of spawnerd sets.
type hubValues struct {
	Hub struct {
		// Config is hub.config: traitlets configuration, class → trait → value.
		Config      map[string]map[string]any `json:"config"`
		ExtraConfig map[string]string         `json:"extraConfig"`
		Services    map[string]map[string]any `json:"services"`
		LoadRoles   map[string]struct {
			Name     string   `json:"name"`
			Services []string `json:"services"`
			Scopes   []string `json:"scopes"`
		} `json:"loadRoles"`
		ExtraVolumes      []corev1.Volume      `json:"extraVolumes"`
		ExtraVolumeMounts []corev1.VolumeMount `json:"extraVolumeMounts"`
	} `json:"hub"`
}

// TestZ2JHValues checks deploy/helm/z2jh-values.yaml against the plain
// manifests, which are the chart's defaults in zero-to-jupyterhub's namespace.
func TestZ2JHValues(t *testing.T) {
	values, err := os.ReadFile(filepath.Join(env.RepoDir, "deploy", "helm", "z2jh-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	manifests, err := os.ReadFile(filepath.Join(env.RepoDir, "deploy", "manifests", "spawnerd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	checkHubValues(t, values, decode(t, manifests))
}

// TestHelmInstall installs the chart for real: its NOTES must hold hub values
// that fit the release, and an upgrade must keep the generated secret values
// (else the hub and spawnerd would stop agreeing) while taking given ones.
func TestHelmInstall(t *testing.T) {
	ns := env.Namespace(t)
	out, err := helm(t, "install", release, chartDir(), "--namespace", ns)
	if err != nil {
		t.Fatal(err)
	}
	_, notes, ok := strings.Cut(out, "\nNOTES:\n")
	if !ok {
		t.Fatalf("no NOTES in the install output:\n%s", out)
	}
	manifestText, err := helm(t, "get", "manifest", release, "--namespace", ns)
	if err != nil {
		t.Fatal(err)
	}
	installed := decode(t, []byte(manifestText))

	checkHubValues(t, notesValues(t, notes), installed)
	for _, want := range []string{
		"kubectl -n " + ns + " rollout status deployment/" + release,
		"--set-file hub.services.spawnerd.apiToken=<(kubectl -n " + ns + " get secret " + release + " -o jsonpath='{.data.hub-token}' | base64 -d)",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}

	current, err := env.Client.CoreV1().Secrets(ns).Get(context.Background(), release, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(current.Data["shared-secret"]) == 0 || len(current.Data["hub-token"]) == 0 {
		t.Fatalf("installed secret holds %v", slices.Sorted(maps.Keys(current.Data)))
	}
	upgraded := func(flags ...string) *corev1.Secret {
		t.Helper()
		out, err := helm(t, append([]string{"upgrade", release, chartDir(), "--namespace", ns, "--dry-run=server"}, flags...)...)
		if err != nil {
			t.Fatal(err)
		}
		_, text, ok := strings.Cut(out, "\nMANIFEST:\n")
		if !ok {
			t.Fatalf("no MANIFEST in the upgrade output:\n%s", out)
		}
		text, _, _ = strings.Cut(text, "\nNOTES:\n")
		return get[corev1.Secret](t, decode(t, []byte(text)), "Secret", release)
	}
	if s := upgraded(); !reflect.DeepEqual(s.Data, current.Data) {
		t.Errorf("an upgrade would change the generated secret values")
	}
	s := upgraded("--set", "secret.sharedSecret=rotated")
	if string(s.Data["shared-secret"]) != "rotated" || !bytes.Equal(s.Data["hub-token"], current.Data["hub-token"]) {
		t.Errorf("upgrade with a new shared secret: shared-secret %q, hub-token kept %v", s.Data["shared-secret"], bytes.Equal(s.Data["hub-token"], current.Data["hub-token"]))
	}

	// Without the console, the NOTES' values make spawnerd a token-only
	// service again (a dry run into a namespace of its own).
	out, err = helm(t, "install", release, chartDir(), "--namespace", "console-off", "--dry-run=client", "--set", "console.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	manifestText, notes, ok = strings.Cut(out, "\nNOTES:\n")
	if !ok {
		t.Fatalf("no NOTES in the dry run's output:\n%s", out)
	}
	_, manifestText, _ = strings.Cut(manifestText, "\nMANIFEST:\n")
	checkHubValues(t, notesValues(t, notes), decode(t, []byte(manifestText)))
}

// notesValues is the zero-to-jupyterhub values block of the chart's NOTES.
func notesValues(t *testing.T, notes string) []byte {
	t.Helper()
	const begin, end = "# zero-to-jupyterhub values: begin\n", "# zero-to-jupyterhub values: end\n"
	_, block, ok := strings.Cut(notes, begin)
	if ok {
		block, _, ok = strings.Cut(block, end)
	}
	if !ok {
		t.Fatalf("NOTES lack the values between %q and %q:\n%s", begin, end, notes)
	}
	return []byte(block)
}

// checkHubValues proves that zero-to-jupyterhub values make the hub use
// spawnerd as rendered in m: the extraConfig, run as the hub runs it, sets
// the spawner class, spawnerd's Service URL and a secret file that the extra
// volumes mount from spawnerd's Secret; the service and its role are
// declared with exactly the scopes spawnerd needs; with spawnerd's console
// the hub proxies the service's prefix to spawnerd's Service, lets the
// console's OAuth client ask for the console scope, which it defines, and
// lets every user log in to it.
func checkHubValues(t *testing.T, data []byte, m manifest) {
	t.Helper()
	var v hubValues
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("parsing hub values: %v", err)
	}
	svc := get[corev1.Service](t, m, "Service", release)
	wantURL := fmt.Sprintf("http://%s.%s.svc:%d", svc.Name, svc.Namespace, svc.Spec.Ports[0].Port)
	dep := get[appsv1.Deployment](t, m, "Deployment", release)
	var secretName string
	for _, vol := range dep.Spec.Template.Spec.Volumes {
		if vol.Secret != nil {
			secretName = vol.Secret.SecretName
		}
	}

	cfg := runHubConfig(t, v.Hub.ExtraConfig)
	if got := cfg.Config["JupyterHub"]["spawner_class"]; got != "dsmlp_spawner.RemoteKubeSpawner" {
		t.Errorf("spawner_class = %v", got)
	}
	rks := cfg.Config["RemoteKubeSpawner"]
	if got := rks["service_url"]; got != wantURL {
		t.Errorf("service_url = %v, want spawnerd's Service %s", got, wantURL)
	}
	if cfg.TraitsChecked {
		if len(cfg.UnknownTraits) > 0 {
			t.Errorf("RemoteKubeSpawner has no traits %v", cfg.UnknownTraits)
		}
	} else {
		t.Log("dsmlp_spawner is not importable here (needs jupyterhub): trait names not checked")
	}
	file, _ := rks["shared_secret_file"].(string)
	if key := mountedSecretKey(v, file, secretName); key != "shared-secret" {
		t.Errorf("shared_secret_file %q is not the shared-secret key of Secret %q mounted by extraVolumes (got key %q)", file, secretName, key)
	}

	svcDef, ok := v.Hub.Services["spawnerd"]
	if !ok {
		t.Fatalf("hub.services has no spawnerd: %v", v.Hub.Services)
	}
	// The hub never starts spawnerd.
	if _, ok := svcDef["command"]; ok {
		t.Errorf("hub.services.spawnerd.command is set: spawnerd is an external service")
	}
	if _, ok := svcDef["apiToken"]; !ok {
		t.Errorf("hub.services.spawnerd has no apiToken (its value is given with --set-file)")
	}
	args := map[string]string{}
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if flag, value, ok := strings.Cut(a, "="); ok {
			args[flag] = value
		}
	}
	if args["--console-prefix"] == "" {
		for _, k := range []string{"url", "display", "oauth_no_confirm", "oauth_client_allowed_scopes"} {
			if _, ok := svcDef[k]; ok {
				t.Errorf("hub.services.spawnerd.%s is set without spawnerd's console: a token-only service has none", k)
			}
		}
	} else {
		checkConsoleValues(t, v, svcDef, args, wantURL)
	}
	// spawnerd's one hub call with its own token is stopping a server
	// (e2e/hub/hubscope_test.go); the console acts with users' tokens.
	wantScopes := []string{"delete:servers"}
	var granted []string
	for _, r := range v.Hub.LoadRoles {
		if slices.Contains(r.Services, "spawnerd") {
			granted = append(granted, r.Scopes...)
		}
	}
	slices.Sort(granted)
	if !reflect.DeepEqual(granted, wantScopes) {
		t.Errorf("roles grant spawnerd %v, want %v", granted, wantScopes)
	}
}

// checkConsoleValues checks the hub side of spawnerd's console against the
// flags spawnerd runs with.
func checkConsoleValues(t *testing.T, v hubValues, svcDef map[string]any, args map[string]string, wantURL string) {
	t.Helper()
	// The proxy forwards the service's prefix, path unchanged, to its url.
	if got := svcDef["url"]; got != wantURL {
		t.Errorf("hub.services.spawnerd.url = %v, want spawnerd's Service %s", got, wantURL)
	}
	for _, k := range []string{"display", "oauth_no_confirm"} {
		if got := svcDef[k]; got != true {
			t.Errorf("hub.services.spawnerd.%s = %v, want true", k, got)
		}
	}
	// The hub names the service's prefix and OAuth client after it.
	base := args["--hub-base-url"]
	if want := base + "services/spawnerd/"; args["--console-prefix"] != want {
		t.Errorf("spawnerd's --console-prefix is %q, the hub serves service spawnerd at %q", args["--console-prefix"], want)
	}
	if want := base + "hub/"; args["--hub-public-prefix"] != want {
		t.Errorf("spawnerd's --hub-public-prefix is %q, the hub's is %q", args["--hub-public-prefix"], want)
	}
	if got := args["--oauth-client-id"]; got != "service-spawnerd" {
		t.Errorf("spawnerd's --oauth-client-id is %q, the hub's client of service spawnerd is service-spawnerd", got)
	}
	// The OAuth login needs the hub and spawnerd's token (the client secret).
	if args["--hub-api-url"] == "" || args["--hub-token-file"] == "" {
		t.Errorf("spawnerd runs its console without the hub's API or its token: %v", args)
	}
	scope := args["--console-scope"]
	var allowed []string
	if list, ok := svcDef["oauth_client_allowed_scopes"].([]any); ok {
		for _, s := range list {
			allowed = append(allowed, fmt.Sprint(s))
		}
	}
	slices.Sort(allowed)
	if want := []string{"admin:servers", scope}; !reflect.DeepEqual(allowed, want) {
		t.Errorf("hub.services.spawnerd.oauth_client_allowed_scopes = %v, want %v", allowed, want)
	}
	// The hub refuses a custom scope it does not define.
	scopes, _ := v.Hub.Config["JupyterHub"]["custom_scopes"].(map[string]any)
	def, _ := scopes[scope].(map[string]any)
	if desc, _ := def["description"].(string); desc == "" {
		t.Errorf("hub.config.JupyterHub.custom_scopes = %v: want %s with a description", scopes, scope)
	}
	// Every user may log in to the console (the status page), and keeps
	// the default role's own scope.
	var user []string
	for key, r := range v.Hub.LoadRoles {
		if cmp.Or(r.Name, key) == "user" {
			user = r.Scopes
		}
	}
	for _, want := range []string{"self", "access:services!service=spawnerd"} {
		if !slices.Contains(user, want) {
			t.Errorf("the user role's scopes %v lack %s", user, want)
		}
	}
}

// mountedSecretKey is the key of Secret secretName that the hub's extra
// volumes put at path, or "".
func mountedSecretKey(v hubValues, path, secretName string) string {
	for _, vm := range v.Hub.ExtraVolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, vol := range v.Hub.ExtraVolumes {
			if vol.Name != vm.Name || vol.Secret == nil || vol.Secret.SecretName != secretName {
				continue
			}
			if len(vol.Secret.Items) == 0 {
				return rel
			}
			for _, it := range vol.Secret.Items {
				if it.Path == rel {
					return it.Key
				}
			}
		}
	}
	return ""
}

// hubConfig is what extraConfig set on the hub's config object.
type hubConfig struct {
	Config        map[string]map[string]any `json:"config"`
	TraitsChecked bool                      `json:"traits_checked"`
	UnknownTraits []string                  `json:"unknown_traits"`
}

// hubConfigScript runs extraConfig snippets in key order, as
// zero-to-jupyterhub does, against a config object that records what is set,
// and, where dsmlp_spawner imports, checks the RemoteKubeSpawner trait names.
const hubConfigScript = `
import json, sys

class Section(dict):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self.setdefault(name, Section())

    def __setattr__(self, name, value):
        self[name] = value

c = Section()
snippets = json.load(sys.stdin)
for key in sorted(snippets):
    exec(compile(snippets[key], "hub.extraConfig." + key, "exec"), {"c": c, "get_config": lambda: c})
result = {"config": c, "traits_checked": False, "unknown_traits": []}
try:
    from dsmlp_spawner import RemoteKubeSpawner
except ImportError:
    pass
else:
    traits = set(RemoteKubeSpawner.class_trait_names())
    result["traits_checked"] = True
    result["unknown_traits"] = sorted(k for k in c.get("RemoteKubeSpawner", {}) if k not in traits)
json.dump(result, sys.stdout)
`

func runHubConfig(t *testing.T, snippets map[string]string) hubConfig {
	t.Helper()
	// Debian's python3 is the one with jupyterhub (make deps), as for the Python tests.
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		if python, err = exec.LookPath("python3"); err != nil {
			t.Fatalf("python3 runs the hub's extraConfig: %v", err)
		}
	}
	in, err := json.Marshal(snippets)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", hubConfigScript)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(env.RepoDir, "deploy", "python"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("running hub.extraConfig: %v\n%s", err, stderr.String())
	}
	var cfg hubConfig
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("decoding %q: %v", out, err)
	}
	return cfg
}
