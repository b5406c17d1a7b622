package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Hub is a real JupyterHub (Debian's jupyterhub package) started with the
// repository's demo configuration, using an external proxy.
type Hub struct {
	*Process
	APIURL   string // http://127.0.0.1:PORT/hub/api
	Proxy    *Proxy
	Token    string // an admin user's API token
	env      []string
	dataDir  string
	t        testing.TB
	repoDir  string
	HubToken string // spawnerd's service token at this hub
}

// HubOptions tune the hub for a test; Env adds to or overrides the demo config's variables.
type HubOptions struct {
	Proxy     *Proxy
	Spawnerd  string // spawnerd's URL
	Secret    []byte // the shared secret; nil: none given (the spawner class must refuse)
	HubToken  string // spawnerd's token at the hub
	ExtraEnv  []string
	AdminUser string
	// Port is the hub's port; 0 picks a free one.
	Port int
}

// StartHub starts JupyterHub and waits for its API; it logs in the admin user.
func (e *Env) StartHub(t testing.TB, opts HubOptions) *Hub {
	t.Helper()
	port := opts.Port
	if port == 0 {
		port = FreePort(t)
	}
	h := &Hub{APIURL: fmt.Sprintf("http://127.0.0.1:%d/hub/api", port), Proxy: opts.Proxy, dataDir: t.TempDir(), t: t, repoDir: e.RepoDir, HubToken: opts.HubToken}
	if opts.AdminUser == "" {
		opts.AdminUser = "admin"
	}
	proxyPort, apiPort := portOf(opts.Proxy.PublicURL), portOf(opts.Proxy.APIURL)
	h.env = []string{
		"HUB_PORT=" + fmt.Sprint(port), "PROXY_PORT=" + proxyPort, "PROXY_API_PORT=" + apiPort,
		"PROXY_SHOULD_START=0", "CONFIGPROXY_AUTH_TOKEN=" + opts.Proxy.Token,
		"SPAWNERD_URL=" + opts.Spawnerd, "SPAWNERD_HUB_TOKEN=" + opts.HubToken,
		"HUB_DATA_DIR=" + h.dataDir, "HUB_ADMIN_USER=" + opts.AdminUser, "HUB_DUMMY_PASSWORD=e2e-password",
		"HUB_CLEANUP_SERVERS=0", "HUB_LOG_LEVEL=DEBUG", "SPAWNERD_SHARED_SECRET=" + string(opts.Secret),
	}
	h.env = append(h.env, opts.ExtraEnv...)
	h.start(t)
	tok, err := h.login(opts.AdminUser)
	if err != nil {
		t.Fatalf("logging in to the hub: %v\n%s", err, h.Log())
	}
	h.Token = tok
	return h
}

func portOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Port()
}

func (h *Hub) start(t testing.TB) {
	cfg := filepath.Join(h.repoDir, "deploy", "demo", "jupyterhub_config.py")
	h.Process = StartProcess(t, "jupyterhub", h.env, "/usr/bin/python3", "-m", "jupyterhub", "-f", cfg)
	WaitHTTP(t, h.APIURL+"/", h.Process)
	// The API answers before the hub's start-up is done: it still checks
	// every server and adds the proxy's routes, and a request that keeps
	// its one event loop busy meanwhile (creating 5,000 users) can make
	// those proxy calls time out, which ends the hub.
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, Timeout, true, func(context.Context) (bool, error) {
		if h.Process.Exited() {
			return false, errors.New("the hub exited")
		}
		return strings.Contains(h.Process.Log(), "JupyterHub is now running"), nil
	})
	if err != nil {
		t.Fatalf("the hub never finished starting: %v\n%s", err, h.Process.Log())
	}
}

// Restart stops the hub and starts it again on the same database.
func (h *Hub) Restart(t testing.TB) {
	h.Stop()
	h.start(t)
}

// RestartWith is Restart with env added to the hub's environment (a later
// value wins), e.g. another poll interval: the hub reads its configuration
// only when it starts.
func (h *Hub) RestartWith(t testing.TB, env ...string) {
	h.Stop()
	h.env = append(h.env, env...)
	h.start(t)
}

// PID is the process's id, for reading its CPU time from /proc.
func (p *Process) PID() int { return p.cmd.Process.Pid }

func (h *Hub) login(user string) (string, error) {
	body := fmt.Sprintf(`{"auth": {"username": %q, "password": "e2e-password"}, "note": "e2e"}`, user)
	resp, err := http.Post(h.APIURL+"/users/"+url.PathEscape(user)+"/tokens", "application/json", bytes.NewBufferString(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct{ Token string }
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &out); err != nil || out.Token == "" {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, data)
	}
	return out.Token, nil
}

// UserToken creates user if needed, logs the user in and returns an API
// token of the user's own.
func (h *Hub) UserToken(user string) string {
	h.t.Helper()
	h.EnsureUser(user)
	tok, err := h.login(user)
	if err != nil {
		h.t.Fatalf("logging %s in to the hub: %v", user, err)
	}
	return tok
}

// Do calls the hub API with the admin token.
func (h *Hub) Do(method, path string, body any, out any) int {
	h.t.Helper()
	return h.DoAs(h.Token, method, path, body, out)
}

// DoAs calls the hub API with a token of the caller's: a user's own, a
// service's.
func (h *Hub) DoAs(token, method, path string, body any, out any) int {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, h.APIURL+path, rd)
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		_ = json.Unmarshal(data, out)
	}
	return resp.StatusCode
}

// HubServer is the hub's server model.
type HubServer struct {
	Name    string            `json:"name"`
	Ready   bool              `json:"ready"`
	Pending *string           `json:"pending"`
	URL     string            `json:"url"`
	State   map[string]string `json:"state"`
}

// Servers returns the user's active servers as the hub sees them.
func (h *Hub) Servers(user string) map[string]HubServer {
	h.t.Helper()
	var u struct{ Servers map[string]HubServer }
	if code := h.Do(http.MethodGet, "/users/"+url.PathEscape(user), nil, &u); code != http.StatusOK {
		h.t.Fatalf("GET user %s: %d", user, code)
	}
	return u.Servers
}

// EnsureUser creates a user (201, or 409 if it exists).
func (h *Hub) EnsureUser(user string) {
	h.t.Helper()
	if code := h.Do(http.MethodPost, "/users/"+url.PathEscape(user), nil, nil); code != http.StatusCreated && code != http.StatusConflict {
		h.t.Fatalf("creating user %s: %d", user, code)
	}
}

// ServerAPIPath is the hub API path of a user's server.
func ServerAPIPath(user, server string) string {
	if server == "" {
		return "/users/" + url.PathEscape(user) + "/server"
	}
	return "/users/" + url.PathEscape(user) + "/servers/" + url.PathEscape(server)
}

// WaitReady waits until the hub shows the server ready and returns the time it took.
func (h *Hub) WaitReady(user, server string) {
	h.t.Helper()
	h.waitFor(user, server, "ready", func(s HubServer, ok bool) bool { return ok && s.Ready })
}

// WaitGone waits until the hub no longer lists the server.
func (h *Hub) WaitGone(user, server string) {
	h.t.Helper()
	h.waitFor(user, server, "gone", func(_ HubServer, ok bool) bool { return !ok })
}

func (h *Hub) waitFor(user, server, what string, cond func(HubServer, bool) bool) {
	h.t.Helper()
	var last map[string]HubServer
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 2*Timeout, true, func(context.Context) (bool, error) {
		last = h.Servers(user)
		s, ok := last[server]
		return cond(s, ok), nil
	})
	if err != nil {
		h.t.Fatalf("hub never showed %s/%s %s; servers %+v", user, server, what, last)
	}
}

// ProgressMessages reads the hub's progress event stream (SSE) until it ends.
func (h *Hub) ProgressMessages(user, server string) []map[string]any {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.APIURL+ServerAPIPath(user, server)+"/progress", nil)
	req.Header.Set("Authorization", "token "+h.Token)
	client := &http.Client{Timeout: 2 * Timeout}
	resp, err := client.Do(req)
	if err != nil {
		h.t.Fatalf("progress: %v", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return ParseSSE(data)
}

// ParseSSE returns the JSON events of a server-sent event stream's data lines.
func ParseSSE(data []byte) []map[string]any {
	var out []map[string]any
	for _, line := range bytes.Split(data, []byte("\n")) {
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			var ev map[string]any
			if json.Unmarshal(d, &ev) == nil {
				out = append(out, ev)
			}
		}
	}
	return out
}

// ProxyRoutes returns the proxy's routing table.
func (p *Proxy) Routes(t testing.TB) map[string]map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.APIURL+"/api/routes", nil)
	req.Header.Set("Authorization", "token "+p.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var routes map[string]map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&routes); err != nil {
		t.Fatal(err)
	}
	return routes
}

// GetThroughProxy fetches path from the proxy's public side with the admin token.
func (h *Hub) GetThroughProxy(path string) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, h.Proxy.PublicURL+path, nil)
	req.Header.Set("Authorization", "token "+h.Token)
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
