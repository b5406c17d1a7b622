// Package hub_test runs the real JupyterHub (Debian's 3.0) and
// configurable-http-proxy against spawnerd and the dev cluster. Notebook
// pods run a real jupyterhub-singleuser on the local-runtime node.
package hub_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/e2e/harness"
)

var (
	env *harness.Env
	bin string
)

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, &env, nil, harness.BuildSpawnerd(&bin)))
}

const spawnerConfig = `
kubespawner:
  namespace: %s
  cmd: [jupyterhub-singleuser]
  args: [--allow-root]
  start_timeout: 60
  delete_grace_period: 1
  course: DSC10
  node_selector: {devcluster.dsmlp.io/local-runtime: "true"}
  tolerations: [{key: devcluster.dsmlp.io/local-runtime, operator: Exists}]
  profile_list:
  - display_name: CPU notebook
    slug: cpu
    default: true
  - display_name: Never ready
    slug: stuck
    kubespawner_override:
      start_timeout: 4
      node_selector: {no-such-label: nowhere}
`

type stack struct {
	ns    string
	proxy *harness.Proxy
	api   *harness.Spawnerd
	hub   *harness.Hub
}

// newStack starts a proxy, spawnerd and a hub for one test. The hub polls
// rarely (600 s), so every reaction the test sees is spawnerd's own.
func newStack(t *testing.T, hubEnv ...string) *stack {
	t.Helper()
	return newStackWith(t, nil, hubEnv...)
}

// newStackWith is newStack with more spawnerd flags.
func newStackWith(t *testing.T, spawnerdArgs []string, hubEnv ...string) *stack {
	t.Helper()
	return newStackConfig(t, func(ns string) string { return fmt.Sprintf(spawnerConfig, ns) }, spawnerdArgs, hubEnv...)
}

// newStackConfig is newStackWith with spawnerd's configuration made from
// the test's namespace.
func newStackConfig(t *testing.T, config func(ns string) string, spawnerdArgs []string, hubEnv ...string) *stack {
	t.Helper()
	ns := env.Namespace(t)
	proxy := harness.StartProxy(t)
	hubPort := harness.FreePort(t)
	hubToken := fmt.Sprintf("hub-token-%d", time.Now().UnixNano())
	api := env.StartSpawnerd(t, bin, harness.SpawnerdOptions{
		Config: config(ns),
		Args: append([]string{"--hub-api-url", fmt.Sprintf("http://127.0.0.1:%d/hub/api", hubPort),
			"--proxy-api-url", proxy.APIURL}, spawnerdArgs...),
		Env: []string{"SPAWNERD_HUB_TOKEN=" + hubToken, "CONFIGPROXY_AUTH_TOKEN=" + proxy.Token},
	})
	hub := env.StartHub(t, harness.HubOptions{
		Proxy: proxy, Spawnerd: api.URL, Secret: api.Secret, HubToken: hubToken, Port: hubPort,
		ExtraEnv: append([]string{"HUB_POLL_INTERVAL=600", "HUB_START_TIMEOUT=90"}, hubEnv...),
	})
	return &stack{ns: ns, proxy: proxy, api: api, hub: hub}
}

func (s *stack) start(t *testing.T, user, server string, opts map[string]any) time.Duration {
	t.Helper()
	s.hub.EnsureUser(user)
	begin := time.Now()
	if code := s.hub.Do(http.MethodPost, harness.ServerAPIPath(user, server), opts, nil); code != http.StatusCreated && code != http.StatusAccepted {
		t.Fatalf("hub start %s/%s: %d", user, server, code)
	}
	s.hub.WaitReady(user, server)
	took := time.Since(begin)
	s.waitReachable(t, user, server)
	return took
}

func userPrefix(user, server string) string {
	p := "/user/" + user + "/"
	if server != "" {
		p += server + "/"
	}
	return p
}

// waitReachable checks the notebook answers through the proxy.
func (s *stack) waitReachable(t *testing.T, user, server string) {
	t.Helper()
	var code int
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, harness.Timeout, true, func(context.Context) (bool, error) {
		c, err := s.hub.GetThroughProxy(userPrefix(user, server) + "api/status")
		code = c
		return err == nil && c == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("notebook of %s/%s not reachable through the proxy (last status %d)", user, server, code)
	}
}

func (s *stack) routeExists(t *testing.T, user, server string) bool {
	_, ok := s.proxy.Routes(t)[strings.TrimSuffix(userPrefix(user, server), "/")]
	return ok
}

func (s *stack) podGone(ns, pod string) bool {
	_, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	return err != nil
}

func TestStartReachStop(t *testing.T) {
	s := newStack(t)
	took := s.start(t, "alice", "", nil)
	t.Logf("spawn → ready (hub): %s", took.Round(time.Millisecond))
	if !s.routeExists(t, "alice", "") {
		t.Fatal("no proxy route for a ready server")
	}
	if code := s.hub.Do(http.MethodDelete, harness.ServerAPIPath("alice", ""), nil, nil); code != http.StatusNoContent && code != http.StatusAccepted {
		t.Fatalf("hub stop: %d", code)
	}
	s.hub.WaitGone("alice", "")
	env.WaitForPodGone(t, s.ns, "jupyter-alice")
	if s.routeExists(t, "alice", "") {
		t.Error("route still there after stop")
	}
}

// TestStoppedPodsNeedNoHubRestart is seed 003 and its relatives: the pod
// stops under the hub; the route and the hub's record go at once, the pod is
// deleted, and the user starts again with no hub restart.
func TestStoppedPodsNeedNoHubRestart(t *testing.T) {
	s := newStack(t)
	cases := []struct {
		name  string
		fault func(ctx context.Context, ns, pod string) error
	}{
		{"evicted", func(ctx context.Context, ns, pod string) error { return harness.Evict(ctx, env.Client, ns, pod) }},
		{"oomkilled", func(ctx context.Context, ns, pod string) error {
			return harness.TerminateContainer(ctx, env.Client, ns, pod, "notebook", 137, "OOMKilled")
		}},
		{"succeeded", func(ctx context.Context, ns, pod string) error {
			return harness.MarkSucceeded(ctx, env.Client, ns, pod)
		}},
		{"deleted", func(ctx context.Context, ns, pod string) error {
			return harness.DeletePodOutOfBand(ctx, env.Client, ns, pod)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			user := "u-" + tc.name
			s.start(t, user, "", nil)
			pod := "jupyter-" + user
			begin := time.Now()
			if err := tc.fault(context.Background(), s.ns, pod); err != nil {
				t.Fatal(err)
			}
			var routeGone, podGone, hubGone time.Duration
			err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, harness.Timeout, true, func(context.Context) (bool, error) {
				el := time.Since(begin)
				if routeGone == 0 && !s.routeExists(t, user, "") {
					routeGone = el
				}
				if podGone == 0 && s.podGone(s.ns, pod) {
					podGone = el
				}
				if _, ok := s.hub.Servers(user)[""]; hubGone == 0 && !ok {
					hubGone = el
				}
				return routeGone > 0 && podGone > 0 && hubGone > 0, nil
			})
			if err != nil {
				t.Fatalf("after the fault: route gone %v, pod gone %v, hub record gone %v", routeGone, podGone, hubGone)
			}
			t.Logf("%s → route gone %s, pod deleted %s, hub record gone %s", tc.name,
				routeGone.Round(time.Millisecond), podGone.Round(time.Millisecond), hubGone.Round(time.Millisecond))
			took := s.start(t, user, "", nil)
			t.Logf("%s → respawn ready in %s", tc.name, took.Round(time.Millisecond))
		})
	}
}

func TestSpawnerdRestartKeepsSession(t *testing.T) {
	s := newStack(t)
	s.start(t, "bob", "", nil)
	s.api.Restart(t)
	s.waitReachable(t, "bob", "")
	if m := s.api.Poll("bob", ""); m.Status != "running" {
		t.Fatalf("spawnerd poll after its restart: %+v", m)
	}
	// The restarted service still reacts to a stop of the pod.
	if err := harness.Evict(context.Background(), env.Client, s.ns, "jupyter-bob"); err != nil {
		t.Fatal(err)
	}
	s.hub.WaitGone("bob", "")
}

func TestHubRestartLoadsState(t *testing.T) {
	s := newStack(t)
	s.start(t, "carol", "", nil)
	before := s.hub.Servers("carol")[""]
	if before.State["pod_name"] != "jupyter-carol" || before.State["namespace"] != s.ns {
		t.Fatalf("hub state %v, want KubeSpawner keys", before.State)
	}
	s.hub.Restart(t)
	// At start-up the hub polls every server it has; running ones stay.
	s.hub.WaitReady("carol", "")
	s.waitReachable(t, "carol", "")
	if !strings.Contains(s.hub.Log(), "carol still running") {
		t.Errorf("the hub did not report carol's server as still running after its restart")
	}
}

func TestStartTimeoutFailsClearly(t *testing.T) {
	s := newStack(t)
	s.hub.EnsureUser("dave")
	code := s.hub.Do(http.MethodPost, harness.ServerAPIPath("dave", ""), map[string]any{"profile": "stuck"}, nil)
	if code != http.StatusAccepted && code != http.StatusInternalServerError {
		t.Fatalf("start of a never-ready server: %d", code)
	}
	evs := s.hub.ProgressMessages("dave", "")
	if len(evs) == 0 {
		t.Fatal("no progress events")
	}
	last := evs[len(evs)-1]
	if last["failed"] != true || !strings.Contains(fmt.Sprint(last["message"]), "did not become ready within 4 seconds") {
		t.Fatalf("last progress event %v, want a clear failure", last)
	}
	s.hub.WaitGone("dave", "")
	env.WaitForPodGone(t, s.ns, "jupyter-dave")
}

func TestNamedServerBesideDefault(t *testing.T) {
	s := newStack(t)
	s.start(t, "erin", "", nil)
	s.start(t, "erin", "second", nil)
	if !s.routeExists(t, "erin", "") || !s.routeExists(t, "erin", "second") {
		t.Fatalf("routes: %v", s.proxy.Routes(t))
	}
	if code := s.hub.Do(http.MethodDelete, harness.ServerAPIPath("erin", "second"), nil, nil); code != http.StatusNoContent && code != http.StatusAccepted {
		t.Fatalf("stop named: %d", code)
	}
	s.hub.WaitGone("erin", "second")
	s.waitReachable(t, "erin", "")
}

func TestShimRefusesMissingOrWrongSecret(t *testing.T) {
	for name, tc := range map[string]struct {
		secret string
		want   string
	}{
		"missing": {"", "missing: set shared_secret_file or $SPAWNERD_SHARED_SECRET"},
		"wrong":   {"not-the-shared-secret-at-all", "wrong shared secret: spawnerd refused the token (401)"},
	} {
		t.Run(name, func(t *testing.T) {
			s := newStack(t, "SPAWNERD_SHARED_SECRET="+tc.secret)
			s.hub.EnsureUser("frank")
			s.hub.Do(http.MethodPost, harness.ServerAPIPath("frank", ""), nil, nil)
			evs := s.hub.ProgressMessages("frank", "")
			if len(evs) == 0 || !strings.Contains(fmt.Sprint(evs[len(evs)-1]["message"]), tc.want) {
				t.Fatalf("progress %v, want a failure saying %q", evs, tc.want)
			}
			if pods, _ := env.Client.CoreV1().Pods(s.ns).List(context.Background(), metav1.ListOptions{}); len(pods.Items) != 0 {
				t.Errorf("a refused spawn created %d pods", len(pods.Items))
			}
		})
	}
}

// TestPlacementSurvivesRestarts: servers whose profile put the pod in
// another namespace or gave it another name stay running for the hub
// after spawnerd and then the hub restart, and the hub's stop removes each
// pod.
func TestPlacementSurvivesRestarts(t *testing.T) {
	course := env.Namespace(t)
	s := newStackConfig(t, func(ns string) string {
		return fmt.Sprintf(spawnerConfig, ns) + fmt.Sprintf(`  - display_name: Course namespace
    slug: course
    kubespawner_override: {namespace: %s}
  - display_name: Renamed pod
    slug: renamed
    kubespawner_override: {pod_name_template: "nb-{username}"}
`, course)
	}, nil)
	servers := []struct{ user, profile, ns, pod string }{
		{"alice", "course", course, "jupyter-alice"},
		{"bob", "renamed", s.ns, "nb-bob"},
	}
	for _, sv := range servers {
		s.start(t, sv.user, "", map[string]any{"profile": sv.profile})
		if st := s.hub.Servers(sv.user)[""].State; st["pod_name"] != sv.pod || st["namespace"] != sv.ns {
			t.Fatalf("%s's hub state %v, want pod %s/%s", sv.user, st, sv.ns, sv.pod)
		}
	}
	s.api.Restart(t)
	s.hub.Restart(t)
	for _, sv := range servers {
		s.hub.WaitReady(sv.user, "")
		s.waitReachable(t, sv.user, "")
		if !strings.Contains(s.hub.Log(), sv.user+" still running") {
			t.Errorf("the hub did not find %s's server still running after the restarts", sv.user)
		}
	}
	for _, sv := range servers {
		if code := s.hub.Do(http.MethodDelete, harness.ServerAPIPath(sv.user, ""), nil, nil); code != http.StatusNoContent && code != http.StatusAccepted {
			t.Fatalf("hub stop %s: %d", sv.user, code)
		}
		s.hub.WaitGone(sv.user, "")
		env.WaitForPodGone(t, sv.ns, sv.pod)
	}
}
