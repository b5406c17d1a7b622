package faults_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/dsmlp/spawner/e2e/harness"
)

// Notebook pods run python3's http.server on the pod's port: the hub takes
// a server as up once its URL answers any HTTP status below 500, and the
// local runtime binds 0.0.0.0 to the pod's own 127.x address.
const spawnerConfig = `
kubespawner:
  namespace: %s
  cmd: [python3, -m, http.server, --bind, 0.0.0.0, "8888"]
  start_timeout: 60
  delete_grace_period: 1
  node_selector: {devcluster.dsmlp.io/local-runtime: "true"}
  tolerations: [{key: devcluster.dsmlp.io/local-runtime, operator: Exists}]
`

// Short Lease timings so that a takeover takes seconds, not the defaults' 15 s.
var leaseArgs = []string{"--lease-duration", "4s", "--lease-renew-deadline", "3s", "--lease-retry-period", "500ms"}

const stopLeaseName = "spawnerd-stops"

// replica is one spawnerd container and its place behind the balancer.
type replica struct {
	*harness.Container
	backend *harness.Backend
}

// stack is the system under test: replicas, balancer, hub, proxy.
type stack struct {
	ns       string
	replicas []*replica
	lb       *harness.Balancer
	hub      *harness.Hub
	hubFront *harness.Front // spawnerd → hub API, counted
	proxy    *harness.Proxy
	api      hubAPI
	secret   []byte
	started  time.Time
}

// newStack starts n replicas and the hub in front of them, in a new namespace.
func newStack(t *testing.T, n int) *stack {
	t.Helper()
	secret := []byte("e2e-shared-secret-" + rand.Text())
	ctx := context.Background()
	st := &stack{ns: env.Namespace(t), started: time.Now()}
	st.secret = secret
	st.proxy = harness.StartProxy(t)
	hubPort := harness.FreePort(t)
	hubToken := "hub-token-" + rand.Text()

	var names sync.Map // network address → replica name
	whoIs := func(ip string) string {
		if v, ok := names.Load(ip); ok {
			return v.(string)
		}
		return ""
	}
	gw := s.net.Gateway.String()
	st.hubFront = harness.StartFront(t, gw, fmt.Sprintf("http://127.0.0.1:%d", hubPort), whoIs)
	proxyFront := harness.StartFront(t, gw, st.proxy.APIURL, whoIs)

	kubeconfig := containerKubeconfig(t)
	files := map[string][]byte{
		"/etc/spawnerd/kubeconfig":  kubeconfig,
		"/etc/spawnerd/config.yaml": fmt.Appendf(nil, spawnerConfig, st.ns),
		"/etc/spawnerd/secret":      secret,
		"/etc/spawnerd/hub-token":   []byte(hubToken),
		"/etc/spawnerd/proxy-token": []byte(st.proxy.Token),
	}
	// The replicas share one history database, as a replicated deployment
	// does: PostgreSQL on this machine, reached at the network's gateway.
	dsn := env.StartPostgresOn(t, s.net.Gateway, s.net.Subnet)
	var backends []*harness.Backend
	for i := range n {
		name := fmt.Sprintf("spawnerd-%s-%d", st.ns, i)
		args := []string{"serve", "--config", "/etc/spawnerd/config.yaml", "--listen", "0.0.0.0:8090",
			"--kubeconfig", "/etc/spawnerd/kubeconfig", "--shared-secret-file", "/etc/spawnerd/secret",
			"--hub-api-url", st.hubFront.URL + "/hub/api", "--hub-token-file", "/etc/spawnerd/hub-token",
			"--proxy-api-url", proxyFront.URL, "--proxy-token-file", "/etc/spawnerd/proxy-token",
			"--identity", name, "--history-dsn", dsn}
		if s.stopLease {
			args = append(args, "--stop-lease-name", stopLeaseName, "--stop-lease-namespace", st.ns)
			args = append(args, leaseArgs...)
		}
		c := s.docker.StartContainer(ctx, t, harness.ContainerOptions{
			Name: name, Image: s.image, Args: args, Files: files,
			Env:      map[string]string{"POD_NAMESPACE": st.ns},
			Networks: []*harness.Network{s.net},
		})
		names.Store(c.IP(s.net).String(), name)
		u, _ := url.Parse(fmt.Sprintf("http://%s:8090", c.IP(s.net)))
		be := &harness.Backend{Name: name, URL: u}
		backends = append(backends, be)
		st.replicas = append(st.replicas, &replica{Container: c, backend: be})
	}
	st.lb = harness.StartBalancer(t, backends)
	for _, r := range st.replicas {
		if err := r.backend.WaitReady(ctx, true, harness.Timeout); err != nil {
			t.Fatalf("%v\n%s", err, r.Log())
		}
	}
	st.hub = env.StartHub(t, harness.HubOptions{
		Proxy: st.proxy, Spawnerd: st.lb.URL, Secret: secret, HubToken: hubToken, Port: hubPort,
		// The hub polls rarely: every stop reaction the tests see is spawnerd's.
		ExtraEnv: []string{"HUB_POLL_INTERVAL=600", "HUB_START_TIMEOUT=90", "HUB_LOG_LEVEL=INFO"},
	})
	st.api = hubAPI{base: st.hub.APIURL, token: st.hub.Token, client: &http.Client{Timeout: 2 * time.Minute}}
	t.Cleanup(func() { st.logBalancer(t) })
	return st
}

// containerKubeconfig is the admin kubeconfig with its CA and client
// certificate inline, pointing at the API server's gateway address.
func containerKubeconfig(t *testing.T) []byte {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(env.Cluster.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := clientcmdapi.FlattenConfig(cfg); err != nil {
		t.Fatal(err)
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(s.net.Gateway.String())) {
		t.Fatalf("kubeconfig does not point at the gateway %s", s.net.Gateway)
	}
	return data
}

func (st *stack) logBalancer(t *testing.T) {
	var b strings.Builder
	for _, r := range st.replicas {
		fmt.Fprintf(&b, "  %s: %d requests answered, %d retried elsewhere\n", r.Name, r.backend.Requests(), r.backend.Retried())
	}
	t.Logf("balancer, per replica:\n%s  failed (no replica answered): %d", b.String(), st.lb.Failed())
}

// leader is the replica holding the stop Lease.
func (st *stack) leader(t *testing.T) *replica {
	t.Helper()
	var holder string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, harness.Timeout, true, func(ctx context.Context) (bool, error) {
		l, err := env.Client.CoordinationV1().Leases(st.ns).Get(ctx, stopLeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		holder = *l.Spec.HolderIdentity
		return holder != "", nil
	})
	if err != nil {
		t.Fatalf("no holder of Lease %s/%s: %v", st.ns, stopLeaseName, err)
	}
	for _, r := range st.replicas {
		if r.Name == holder {
			return r
		}
	}
	t.Fatalf("Lease holder %q is none of the replicas", holder)
	return nil
}

// hubAPI is the hub's REST API with the admin token, safe to use from many goroutines.
type hubAPI struct {
	base, token string
	client      *http.Client
}

func (h hubAPI) do(ctx context.Context, method, path string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "token "+h.token)
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decoding %q: %w", method, path, data, err)
		}
	}
	return resp.StatusCode, nil
}

type hubServer struct {
	Ready   bool    `json:"ready"`
	Pending *string `json:"pending"`
}

// servers is the user's servers as the hub lists them.
func (h hubAPI) servers(ctx context.Context, user string) (map[string]hubServer, error) {
	var u struct{ Servers map[string]hubServer }
	code, err := h.do(ctx, http.MethodGet, "/users/"+url.PathEscape(user), nil, &u)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET user %s: %d", user, code)
	}
	return u.Servers, nil
}

// spawnResult is what one spawn through the hub came to.
type spawnResult struct {
	user     string
	err      error  // the spawn failed (hub refused, progress failed, never ready)
	last     string // the progress stream's last message
	reason   string // a failed progress stream's reason
	ready    bool   // the progress stream ended ready
	took     time.Duration
	progress int // events read
}

// spawn starts the user's default server through the hub and follows its
// progress stream (/hub/api/users/NAME/server/progress) to its end.
func (h hubAPI) spawn(ctx context.Context, user string) spawnResult {
	r := spawnResult{user: user}
	begin := time.Now()
	defer func() { r.took = time.Since(begin) }()
	if code, err := h.do(ctx, http.MethodPost, "/users/"+url.PathEscape(user), nil, nil); err != nil || (code != http.StatusCreated && code != http.StatusConflict) {
		r.err = fmt.Errorf("creating user: %d %v", code, err)
		return r
	}
	var refusal struct{ Message string }
	code, err := h.do(ctx, http.MethodPost, "/users/"+url.PathEscape(user)+"/server", nil, &refusal)
	if err != nil || (code != http.StatusCreated && code != http.StatusAccepted) {
		r.err = fmt.Errorf("hub start: %d %q %v", code, refusal.Message, err)
		return r
	}
	events, err := h.progress(ctx, user)
	r.progress = len(events)
	if err != nil {
		r.err = err
		return r
	}
	if len(events) == 0 {
		r.err = errors.New("progress stream ended with no event")
		return r
	}
	last := events[len(events)-1]
	r.last, _ = last["message"].(string)
	r.ready, _ = last["ready"].(bool)
	failed, _ := last["failed"].(bool)
	switch {
	case r.ready:
	case failed && strings.TrimSpace(r.last) != "":
		r.reason = r.last
		r.err = fmt.Errorf("spawn failed: %s", r.last)
		return r
	default:
		r.err = fmt.Errorf("progress stream ended neither ready nor failed with a reason: %v", last)
		return r
	}
	// The stream says ready; the hub's record must agree.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, harness.Timeout, true, func(ctx context.Context) (bool, error) {
		srv, err := h.servers(ctx, user)
		return err == nil && srv[""].Ready, nil
	})
	if err != nil {
		r.err = fmt.Errorf("progress said ready, the hub never did: %w", err)
	}
	return r
}

// progress reads the hub's server-sent events until the stream ends.
func (h hubAPI) progress(ctx context.Context, user string) ([]map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.base+"/users/"+url.PathEscape(user)+"/server/progress", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "token "+h.token)
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("progress: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("progress: status %d", resp.StatusCode)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("progress: reading: %w", err)
	}
	return harness.ParseSSE(data), nil
}

// stop stops the user's server through the hub and waits until the hub no longer lists it.
func (h hubAPI) stop(ctx context.Context, user string) error {
	code, err := h.do(ctx, http.MethodDelete, "/users/"+url.PathEscape(user)+"/server", nil, nil)
	if err != nil {
		return err
	}
	if code != http.StatusNoContent && code != http.StatusAccepted {
		return fmt.Errorf("hub stop %s: %d", user, code)
	}
	return h.waitGone(ctx, user, 2*harness.Timeout)
}

// waitGone waits until the hub lists no default server for user.
func (h hubAPI) waitGone(ctx context.Context, user string, timeout time.Duration) error {
	var last map[string]hubServer
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		srv, err := h.servers(ctx, user)
		if err != nil {
			return false, nil
		}
		last = srv
		_, ok := srv[""]
		return !ok, nil
	})
	if err != nil {
		return fmt.Errorf("hub still lists %s's server: %+v", user, last)
	}
	return nil
}

// spawnAll spawns users with workers at a time and returns every result.
func (h hubAPI) spawnAll(ctx context.Context, users []string, workers int, each func(spawnResult)) []spawnResult {
	out := make([]spawnResult, len(users))
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = h.spawn(ctx, users[i])
				if each != nil {
					each(out[i])
				}
			}
		}()
	}
	for i := range users {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

func userNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return out
}

// deletesByUser counts spawnerd's DELETE calls for a user's server at the
// hub, answered by the hub or not.
func (st *stack) deletesByUser() (answered, unanswered map[string][]harness.Call) {
	answered, unanswered = map[string][]harness.Call{}, map[string][]harness.Call{}
	for _, c := range st.hubFront.Calls(nil) {
		u := harness.ServerDeleteUser(c)
		if u == "" {
			continue
		}
		if c.Answered() {
			answered[u] = append(answered[u], c)
		} else {
			unanswered[u] = append(unanswered[u], c)
		}
	}
	return answered, unanswered
}
