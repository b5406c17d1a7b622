package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/lifecycle"
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
	client     *apiclient.Client // signs as admin unless told otherwise
}

// newClient is an admin client of the spawnerd at url.
func newClient(t testing.TB, url string, secret []byte) *apiclient.Client {
	c, err := apiclient.New(url, apiclient.User{Name: "admin", Admin: true}, apiclient.SharedSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	return c
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
	// A session history of the test's own (its replicas share the file); a
	// --history-dsn in opts.Args comes later and wins.
	args := append([]string{"serve", "--config", cfgPath, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--kubeconfig", e.Cluster.Kubeconfig(), "--shared-secret-file", secretPath,
		"--history-dsn", "sqlite://" + filepath.Join(dir, "history.db")}, opts.Args...)
	s := &Spawnerd{URL: fmt.Sprintf("http://127.0.0.1:%d", port), Secret: secret, ConfigPath: cfgPath, bin: bin, args: args, env: opts.Env, t: t}
	s.client = newClient(t, s.URL, secret)
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
	r.client = newClient(t, r.URL, s.Secret)
	r.start(t)
	return r
}

func (s *Spawnerd) start(t testing.TB) {
	s.Process = StartProcess(t, "spawnerd", s.env, s.bin, s.args...)
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, Timeout, true, func(ctx context.Context) (bool, error) {
		if s.Exited() {
			return false, fmt.Errorf("spawnerd exited:\n%s", s.Log())
		}
		return s.client.Readyz(ctx) == nil, nil
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
func ServerPath(user, server string) string { return apiclient.ServerPath(user, server) }

// Client is a client of this spawnerd's API that signs its requests as
// user with the shared secret.
func (s *Spawnerd) Client(as apiclient.User) *apiclient.Client { return s.client.As(as) }

// Do sends a request signed for user and decodes a JSON answer into out
// (if not nil), whatever its status; body is JSON-encoded unless it is
// []byte, which is sent as it is.
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
	code, data, err := s.client.Do(context.Background(), method, path, rd, apiclient.User{Name: user, Admin: admin})
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			s.t.Fatalf("%s %s: decoding %q: %v", method, path, data, err)
		}
	}
	return code
}

// ServerModel is the API's server model (lifecycle.Server) without its
// events and Spark cluster: tests that read those embed ServerModel beside
// fields of their own named events and spark, which a decode fills only
// if no embedded field has the same JSON name.
type ServerModel struct {
	User            string                `json:"user"`
	Server          string                `json:"server"`
	Status          string                `json:"status"`
	URL             *string               `json:"url"`
	ExitCode        *int                  `json:"exit_code"`
	Message         string                `json:"message"`
	Pod             string                `json:"pod"`
	Namespace       string                `json:"namespace"`
	Node            string                `json:"node"`
	PodIP           string                `json:"pod_ip"`
	Phase           string                `json:"phase"`
	UID             string                `json:"uid"`
	Profile         string                `json:"profile"`
	Image           string                `json:"image"`
	Course          string                `json:"course"`
	GPUClass        string                `json:"gpu_class"`
	Reservation     string                `json:"reservation"`
	GuaranteeStatus string                `json:"guarantee_status"`
	Stopped         *lifecycle.StopReason `json:"stopped"`
	State           map[string]string     `json:"state"`
}

// serverModel is the part of a server the tests read as ServerModel.
func serverModel(s *lifecycle.Server) ServerModel {
	return ServerModel{User: s.User, Server: s.Server, Status: s.Status, URL: s.URL, ExitCode: s.ExitCode, Message: s.Message,
		Pod: s.Pod, Namespace: s.Namespace, Node: s.Node, PodIP: s.PodIP, Phase: s.Phase, UID: s.UID, Profile: s.Profile,
		Image: s.Image, Course: s.Course, GPUClass: s.GPUClass, Reservation: s.Reservation, GuaranteeStatus: s.GuaranteeStatus,
		Stopped: s.Stopped, State: s.State}
}

// Poll reads a server's status, signed for its user.
func (s *Spawnerd) Poll(user, server string) ServerModel {
	s.t.Helper()
	m, err := s.PollServer(context.Background(), user, server)
	if err != nil {
		s.t.Fatalf("poll %s/%s: %v", user, server, err)
	}
	return serverModel(m)
}

// PollServer reads a server's whole model, signed for its user.
func (s *Spawnerd) PollServer(ctx context.Context, user, server string) (*lifecycle.Server, error) {
	return s.Client(apiclient.User{Name: user}).Poll(ctx, user, server, lifecycle.Hint{})
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
type ProgressEvent = lifecycle.Event

// Progress reads the progress WebSocket until the server closes it, or
// until no event came for Timeout.
func (s *Spawnerd) Progress(user, server string) []ProgressEvent {
	s.t.Helper()
	var out []ProgressEvent
	err := s.FollowProgress(context.Background(), user, server, func(e ProgressEvent) error {
		out = append(out, e)
		return nil
	})
	// As before this client: a stream that breaks off ends the events; a
	// stream that never opened fails the test.
	if err != nil && len(out) == 0 && !errors.Is(err, context.Canceled) {
		s.t.Fatalf("progress websocket: %v", err)
	}
	return out
}

// FollowProgress calls fn with each progress event as it comes, signed
// for user, until the server closes the stream, fn fails, ctx ends, or no
// event came for Timeout.
func (s *Spawnerd) FollowProgress(ctx context.Context, user, server string, fn func(ProgressEvent) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(Timeout, cancel)
	defer idle.Stop()
	return s.Client(apiclient.User{Name: user}).FollowProgress(ctx, user, server, func(e ProgressEvent) error {
		idle.Reset(Timeout)
		return fn(e)
	})
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
