package hubclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/poll"
)

const chpToken = "chp-test-token"

// chp is a real configurable-http-proxy started for one test.
type chp struct {
	apiURL string
}

// freePort asks the kernel for a free loopback port.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCHP starts configurable-http-proxy on free loopback ports. The binary
// is $CONFIGURABLE_HTTP_PROXY or configurable-http-proxy on PATH; without it
// the test is skipped, except in CI (CI=true), where it must run.
func startCHP(t *testing.T) *chp {
	t.Helper()
	bin := os.Getenv("CONFIGURABLE_HTTP_PROXY")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("configurable-http-proxy"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("configurable-http-proxy not found and CI=true: %v", err)
			}
			t.Skipf("configurable-http-proxy not installed: %v", err)
		}
	}
	port, apiPort := freePort(t), freePort(t)
	cmd := exec.Command(bin, "--ip", "127.0.0.1", "--port", fmt.Sprint(port),
		"--api-ip", "127.0.0.1", "--api-port", fmt.Sprint(apiPort), "--log-level", "warn")
	cmd.Env = append(os.Environ(), "CONFIGPROXY_AUTH_TOKEN="+chpToken)
	if dir := nodeModulesDir(bin); dir != "" {
		// Distribution packages install CHP's modules beside it, where a
		// node built elsewhere does not look.
		cmd.Env = append(cmd.Env, "NODE_PATH="+strings.Trim(os.Getenv("NODE_PATH")+string(os.PathListSeparator)+dir, string(os.PathListSeparator)))
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("configurable-http-proxy output:\n%s", out.String())
		}
	})

	p := &chp{apiURL: fmt.Sprintf("http://127.0.0.1:%d", apiPort)}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			select {
			case <-exited:
				return false, errors.New("configurable-http-proxy exited: " + out.String())
			default:
			}
			_, err := NewProxy(p.apiURL, chpToken, nil).Routes(ctx)
			return err == nil, nil
		})
	if err != nil {
		t.Fatalf("waiting for configurable-http-proxy: %v", err)
	}
	return p
}

// nodeModulesDir returns the folder holding CHP's node modules when the
// binary is a link into a node_modules-style tree (…/<dir>/configurable-http-proxy/bin/…).
func nodeModulesDir(bin string) string {
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return ""
	}
	dir := filepath.Dir(filepath.Dir(filepath.Dir(real)))
	if _, err := os.Stat(filepath.Join(dir, "configurable-http-proxy")); err != nil {
		return ""
	}
	return dir
}

// addRoute posts a route the way the hub's ConfigurableHTTPProxy.add_route does.
func (p *chp) addRoute(t *testing.T, routespec, user, server string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"target": "http://127.0.0.1:9", "user": user, "server_name": server, "jupyterhub": true})
	req, err := http.NewRequest(http.MethodPost, p.apiURL+"/api/routes"+chpPath(routespec), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+chpToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST route %s: %d", routespec, resp.StatusCode)
	}
}

func routeKeys(t *testing.T, p *Proxy) map[string]Route {
	t.Helper()
	routes, err := p.Routes(context.Background())
	if err != nil {
		t.Fatalf("Routes: %v", err)
	}
	return routes
}

func TestProxyAgainstCHP(t *testing.T) {
	srv := startCHP(t)
	p := NewProxy(srv.apiURL, chpToken, nil)
	ctx := context.Background()

	srv.addRoute(t, UserRoutePath("/", "alice", "")+"/", "alice", "")
	srv.addRoute(t, UserRoutePath("/", "al ice@x", "srv 1")+"/", "al ice@x", "srv 1")
	srv.addRoute(t, UserRoutePath("/", "bob", "")+"/", "bob", "")

	routes := routeKeys(t, p)
	alice, ok := routes["/user/alice"]
	if !ok {
		t.Fatalf("routes = %v, want /user/alice", routes)
	}
	if alice.User != "alice" || alice.ServerName != "" || !alice.JupyterHub || alice.Target != "http://127.0.0.1:9" || alice.Data["jupyterhub"] != true {
		t.Errorf("route = %+v", alice)
	}
	// CHP stores and reports paths unescaped.
	if _, ok := routes["/user/al ice@x/srv 1"]; !ok {
		t.Errorf("routes = %v, want the unescaped awkward route", routes)
	}

	if err := p.DeleteRoute(ctx, UserRoutePath("/", "alice", "")); err != nil {
		t.Fatalf("DeleteRoute: %v", err)
	}
	if err := p.DeleteRoute(ctx, UserRoutePath("/", "al ice@x", "srv 1")); err != nil {
		t.Fatalf("DeleteRoute awkward: %v", err)
	}
	routes = routeKeys(t, p)
	for _, gone := range []string{"/user/alice", "/user/al ice@x/srv 1"} {
		if _, ok := routes[gone]; ok {
			t.Errorf("route %s still there: %v", gone, routes)
		}
	}
	if _, ok := routes["/user/bob"]; !ok {
		t.Errorf("unrelated route deleted: %v", routes)
	}
	// Deleting a missing route (CHP answers 404) is fine.
	if err := p.DeleteRoute(ctx, "/user/alice"); err != nil {
		t.Errorf("DeleteRoute of a missing route: %v", err)
	}
}

func TestProxyAgainstCHPWrongToken(t *testing.T) {
	srv := startCHP(t)
	_, err := NewProxy(srv.apiURL, "wrong", nil).Routes(context.Background())
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusForbidden {
		t.Fatalf("Routes with a wrong token: %v, want 403", err)
	}
}

// TestNotifierFallbackAgainstCHP: the hub is down, so the notifier removes
// the route from a real CHP and still reports the failure for a retry.
func TestNotifierFallbackAgainstCHP(t *testing.T) {
	srv := startCHP(t)
	proxy := NewProxy(srv.apiURL, chpToken, nil)
	srv.addRoute(t, "/jhub/user/alice/gpu/", "alice", "gpu")
	srv.addRoute(t, "/jhub/user/alice/", "alice", "")

	down := httptest.NewServer(http.NotFoundHandler())
	hubURL := down.URL + "/jhub/hub/api"
	down.Close()
	hub := NewHub(hubURL, "hub-token", nil)
	hub.Retry = fastRetry

	n := &Notifier{Hub: hub, Proxy: proxy, BaseURL: "/jhub/", Logger: zaptest.NewLogger(t)}
	err := n.ServerStopped(context.Background(),
		poll.ServerRef{User: "alice", Server: "gpu", Namespace: "jhub", Pod: "jupyter-alice--gpu"},
		poll.StopInfo{Phase: "Failed", Reason: "Evicted", ExitCode: 1})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ServerStopped = %v, want an error wrapping ErrUnavailable", err)
	}
	routes := routeKeys(t, proxy)
	if _, ok := routes["/jhub/user/alice/gpu"]; ok {
		t.Errorf("route of the stopped server still there: %v", routes)
	}
	if _, ok := routes["/jhub/user/alice"]; !ok {
		t.Errorf("route of the user's other server deleted: %v", routes)
	}
}

// fakeCHP records DELETE route requests.
type fakeCHP struct {
	mu      sync.Mutex
	deletes []string
}

func (f *fakeCHP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.deletes = append(f.deletes, r.Method+" "+r.URL.EscapedPath())
	f.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeCHP) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.deletes...)
}

func TestNotifierServerStopped(t *testing.T) {
	ref := poll.ServerRef{User: "al ice", Server: "", Namespace: "jhub", Pod: "jupyter-al-ice"}
	cases := map[string]struct {
		hubStatuses   []int
		hubBody       string
		wantErr       func(error) bool
		wantProxyCall []string
	}{
		"hub stops it": {
			hubStatuses: []int{204},
		},
		"hub briefly failing is retried, no fallback": {
			hubStatuses: []int{503, 204},
		},
		"hub pending spawn: no fallback, error for a later retry": {
			hubStatuses: []int{400}, hubBody: `{"status": 400, "message": "al ice is pending spawn, please wait"}`,
			wantErr: func(err error) bool { var pe *PendingError; return errors.As(err, &pe) },
		},
		"hub down: route deleted as a stop-gap": {
			hubStatuses:   []int{502},
			wantErr:       func(err error) bool { return errors.Is(err, ErrUnavailable) },
			wantProxyCall: []string{"DELETE /api/routes/user/al%20ice"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, hub := startFakeHub(t, tc.hubBody, tc.hubStatuses...)
			fc := &fakeCHP{}
			chpSrv := httptest.NewServer(fc)
			t.Cleanup(chpSrv.Close)
			n := &Notifier{Hub: hub, Proxy: NewProxy(chpSrv.URL, chpToken, nil), BaseURL: "/", Logger: zaptest.NewLogger(t)}
			err := n.ServerStopped(context.Background(), ref, poll.StopInfo{Reason: "Evicted", ExitCode: 1})
			if tc.wantErr == nil && err != nil {
				t.Fatalf("ServerStopped: %v", err)
			}
			if tc.wantErr != nil && !tc.wantErr(err) {
				t.Fatalf("ServerStopped = %v, not the expected kind", err)
			}
			got := fc.seen()
			if len(got) != len(tc.wantProxyCall) {
				t.Fatalf("proxy calls = %v, want %v", got, tc.wantProxyCall)
			}
			for i := range got {
				if got[i] != tc.wantProxyCall[i] {
					t.Errorf("proxy call %d = %q, want %q", i, got[i], tc.wantProxyCall[i])
				}
			}
		})
	}
}

func TestUserRoutePath(t *testing.T) {
	cases := []struct {
		base, user, server, want string
	}{
		{"/", "alice", "", "/user/alice"},
		{"", "alice", "", "/user/alice"},
		{"/", "alice", "srv", "/user/alice/srv"},
		{"/jhub/", "alice", "srv", "/jhub/user/alice/srv"},
		{"/a/b", "bob", "", "/a/b/user/bob"},
		{"/", "user@email.com", "Some Name", "/user/user@email.com/Some%20Name"},
		{"/", "a/b", "x?y", "/user/a%2Fb/x%3Fy"},
	}
	for _, tc := range cases {
		if got := UserRoutePath(tc.base, tc.user, tc.server); got != tc.want {
			t.Errorf("UserRoutePath(%q, %q, %q) = %q, want %q", tc.base, tc.user, tc.server, got, tc.want)
		}
	}
}

func TestChpPath(t *testing.T) {
	for in, want := range map[string]string{"/user/a/": "/user/a", "user/a": "/user/a", "/": "/", "": "/", "//": "/"} {
		if got := chpPath(in); got != want {
			t.Errorf("chpPath(%q) = %q, want %q", in, got, want)
		}
	}
}
