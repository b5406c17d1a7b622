package spawner

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// hubEnv is what the hub's get_env() sends for alice's default server,
// with placeholder secrets.
func hubEnv(user, server string) map[string]string {
	prefix := "/user/" + user + "/"
	client := "jupyterhub-user-" + user
	if server != "" {
		prefix += server + "/"
		client += "-" + server
	}
	return map[string]string{
		"JUPYTERHUB_API_TOKEN":                  "<token>",
		"JPY_API_TOKEN":                         "<token>",
		"JUPYTERHUB_CLIENT_ID":                  client,
		"JUPYTERHUB_HOST":                       "",
		"JUPYTERHUB_OAUTH_CALLBACK_URL":         prefix + "oauth_callback",
		"JUPYTERHUB_OAUTH_SCOPES":               `["access:servers!server=` + user + `/"]`,
		"JUPYTERHUB_USER":                       user,
		"JUPYTERHUB_SERVER_NAME":                server,
		"JUPYTERHUB_API_URL":                    "http://hub:8081/hub/api",
		"JUPYTERHUB_ACTIVITY_URL":               "http://hub:8081/hub/api/users/" + user + "/activity",
		"JUPYTERHUB_BASE_URL":                   "/",
		"JUPYTERHUB_SERVICE_PREFIX":             prefix,
		"JUPYTERHUB_SERVICE_URL":                "http://127.0.0.1:0" + prefix,
		"JUPYTERHUB_PUBLIC_URL":                 "",
		"JUPYTERHUB_PUBLIC_HUB_URL":             "",
		"JUPYTERHUB_COOKIE_HOST_PREFIX_ENABLED": "0",
	}
}

// Golden cases: testdata/<case>.yaml rendered for the request given here.
// Each case's yaml says which KubeSpawner 7.1.0 and JupyterHub 3.0 source
// lines its expected output follows.
func TestRenderGolden(t *testing.T) {
	tests := map[string]Request{
		"default": {User: "alice", Env: hubEnv("alice", ""), HubNamespace: "jhub"},
		"z2jh":    {User: "alice", Env: hubEnv("alice", ""), HubNamespace: "jhub", UserID: 3},
		"profiles": {User: "bob@ucsd.edu", Server: "lab 2", Env: hubEnv("bob@ucsd.edu", "lab 2"), HubNamespace: "jhub",
			UserOptions: map[string]any{"profile": []any{"datascience"}, "image--unlisted-choice": []any{"ucsdets/custom:2026"}, "size": "large"}},
		"gpu": {User: "carol", Server: "gpu", Env: hubEnv("carol", "gpu"), HubNamespace: "jhub",
			UserOptions: map[string]any{"profile": "gpu-1"}},
		"user-namespaces": {User: "dave.smith", Env: hubEnv("dave.smith", ""), HubNamespace: "default"},
		"jupyterhub-traits": {User: "Jane.Doe@ucsd.edu", Env: hubEnv("Jane.Doe@ucsd.edu", ""),
			UserOptions: map[string]any{"profile": "classic"}},
		"null-override": {User: "erin", Env: hubEnv("erin", ""), UserOptions: map[string]any{"profile": "exam"}},
		"user-id":       {User: "frank", Env: hubEnv("frank", ""), UserID: 1042},
		// No HubNamespace in the request: the config's hub_namespace, or
		// the service-account file, gives {hubnamespace}.
		"hub-namespace":      {User: "gina", Env: hubEnv("gina", "")},
		"hub-namespace-file": {User: "gina", Env: hubEnv("gina", "")},
	}
	// The service-account namespace file each case reads; the others read
	// none, so no golden depends on where the test runs.
	nsFiles := map[string]string{"hub-namespace-file": filepath.Join("testdata", "serviceaccount-namespace")}
	for name, req := range tests {
		t.Run(name, func(t *testing.T) {
			nsFile, ok := nsFiles[name]
			if !ok {
				nsFile = filepath.Join("testdata", "no-such-serviceaccount-namespace")
			}
			cfg, err := LoadWithNamespaceFile(filepath.Join("testdata", name+".yaml"), nsFile)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Render(cfg, req)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./spawner -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Render differs from %s (-want +got):\n%s", golden, lineDiff(string(want), string(got)))
			}
		})
	}
}

// lineDiff is a small line-based diff for golden mismatches.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	// Longest common subsequence table.
	lcs := make([][]int, len(w)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(g)+1)
	}
	for i := len(w) - 1; i >= 0; i-- {
		for j := len(g) - 1; j >= 0; j-- {
			if w[i] == g[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var b strings.Builder
	i, j := 0, 0
	for i < len(w) || j < len(g) {
		switch {
		case i < len(w) && j < len(g) && w[i] == g[j]:
			i, j = i+1, j+1
		case j < len(g) && (i == len(w) || lcs[i][j+1] >= lcs[i+1][j]):
			b.WriteString("+ " + g[j] + "\n")
			j++
		default:
			b.WriteString("- " + w[i] + "\n")
			i++
		}
	}
	return b.String()
}
