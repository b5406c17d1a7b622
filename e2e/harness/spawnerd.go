package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Spawnerd is a running spawnerd binary and a client for its API.
type Spawnerd struct {
	*Process
	URL    string
	Secret []byte
	// ConfigPath is the configuration file; a test may rewrite it before
	// Restart.
	ConfigPath string
	bin        string
	args       []string
	env        []string
	t          testing.TB
}

// SpawnerdOptions are the flags a test passes to spawnerd serve.
type SpawnerdOptions struct {
	Config string // YAML text of the spawner configuration
	Args   []string
	Env    []string
}

// StartSpawnerd writes the config, starts bin serve on a free port with the
// cluster's kubeconfig, and waits for /readyz.
func (e *Env) StartSpawnerd(t testing.TB, bin string, opts SpawnerdOptions) *Spawnerd {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "spawner.yaml")
	if err := os.WriteFile(cfgPath, []byte(opts.Config), 0o644); err != nil {
		t.Fatal(err)
	}
	// 44 bytes: spawnerd wants at least 32 (hubapi.MinSecretBytes).
	secret := []byte("e2e-shared-secret-" + rand.Text())
	secretPath := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretPath, append(secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	port := FreePort(t)
	args := append([]string{"serve", "--config", cfgPath, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--kubeconfig", e.Cluster.Kubeconfig(), "--shared-secret-file", secretPath}, opts.Args...)
	s := &Spawnerd{URL: fmt.Sprintf("http://127.0.0.1:%d", port), Secret: secret, ConfigPath: cfgPath, bin: bin, args: args, env: opts.Env, t: t}
	s.start(t)
	return s
}

// Replica starts another spawnerd with s's configuration, secret and
// flags on its own port: a second replica of the same deployment.
func (s *Spawnerd) Replica(t testing.TB) *Spawnerd {
	t.Helper()
	port := FreePort(t)
	args := append([]string(nil), s.args...)
	for i := range args {
		if args[i] == "--listen" && i+1 < len(args) {
			args[i+1] = fmt.Sprintf("127.0.0.1:%d", port)
		}
	}
	r := &Spawnerd{URL: fmt.Sprintf("http://127.0.0.1:%d", port), Secret: s.Secret, ConfigPath: s.ConfigPath, bin: s.bin, args: args, env: s.env, t: t}
	r.start(t)
	return r
}

func (s *Spawnerd) start(t testing.TB) {
	s.Process = StartProcess(t, "spawnerd", s.env, s.bin, s.args...)
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, Timeout, true, func(context.Context) (bool, error) {
		if s.Exited() {
			return false, fmt.Errorf("spawnerd exited:\n%s", s.Log())
		}
		resp, err := http.Get(s.URL + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("spawnerd not ready: %v", err)
	}
}

// Restart stops spawnerd and starts it again with the same flags.
func (s *Spawnerd) Restart(t testing.TB) {
	s.Stop()
	s.start(t)
}

// ServerPath is the API path of a user's server ("" = default server).
func ServerPath(user, server string) string {
	p := "/api/v1/users/" + url.PathEscape(user)
	if server == "" {
		return p + "/server"
	}
	return p + "/servers/" + url.PathEscape(server)
}

// Do sends a request signed for user and decodes a JSON answer into out (if not nil).
func (s *Spawnerd) Do(method, path, user string, admin bool, body any, out any) int {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+Token(s.t, s.Secret, user, admin))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			s.t.Fatalf("%s %s: decoding %q: %v", method, path, data, err)
		}
	}
	return resp.StatusCode
}

// ServerModel is the part of the API's server model the tests read.
type ServerModel struct {
	User, Server, Status, Message, Pod, Namespace, Node string
	URL                                                 *string
	ExitCode                                            *int              `json:"exit_code"`
	PodIP                                               string            `json:"pod_ip"`
	State                                               map[string]string `json:"state"`
	Stopped                                             *struct {
		Phase, Reason, Message string
		ContainerReason        string `json:"container_reason"`
		ExitCode               int    `json:"exit_code"`
	}
}

// Poll reads a server's status.
func (s *Spawnerd) Poll(user, server string) ServerModel {
	s.t.Helper()
	var m ServerModel
	if code := s.Do(http.MethodGet, ServerPath(user, server), user, false, nil, &m); code != http.StatusOK {
		s.t.Fatalf("poll %s/%s: status %d", user, server, code)
	}
	return m
}

// WaitStatus polls until the server reaches status and returns its model.
func (s *Spawnerd) WaitStatus(user, server, status string) ServerModel {
	s.t.Helper()
	var m ServerModel
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, Timeout, true, func(context.Context) (bool, error) {
		m = s.Poll(user, server)
		return m.Status == status, nil
	})
	if err != nil {
		s.t.Fatalf("server %s/%s never became %s; last: %+v", user, server, status, m)
	}
	return m
}

// ProgressEvent is one message of the progress stream.
type ProgressEvent struct {
	Progress *int   `json:"progress"`
	Message  string `json:"message"`
	Ready    bool   `json:"ready"`
	Failed   bool   `json:"failed"`
	URL      string `json:"url"`
}

// Progress reads the progress WebSocket until the server closes it.
func (s *Spawnerd) Progress(user, server string) []ProgressEvent {
	s.t.Helper()
	u := "ws" + strings.TrimPrefix(s.URL, "http") + ServerPath(user, server) + "/progress"
	h := http.Header{"Authorization": {"Bearer " + Token(s.t, s.Secret, user, false)}}
	ws, resp, err := websocket.DefaultDialer.Dial(u, h)
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		s.t.Fatalf("progress websocket: %v (status %d)", err, code)
	}
	defer ws.Close()
	var out []ProgressEvent
	for {
		_ = ws.SetReadDeadline(time.Now().Add(Timeout))
		var ev ProgressEvent
		if err := ws.ReadJSON(&ev); err != nil {
			return out
		}
		out = append(out, ev)
	}
}

// isWrite reports whether an HTTP method changes state on the API server.
func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// Writes sums the write methods of a per-method count of Kubernetes API
// requests (spawnerd's spawner_kube_api_requests_total).
func Writes(byMethod map[string]float64) float64 {
	var n float64
	for method, v := range byMethod {
		if isWrite(method) {
			n += v
		}
	}
	return n
}

// Reads sums every other method (GET covers LIST and WATCH).
func Reads(byMethod map[string]float64) float64 {
	var n float64
	for method, v := range byMethod {
		if !isWrite(method) {
			n += v
		}
	}
	return n
}
