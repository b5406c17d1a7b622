// Package spawnerd_test drives the real spawnerd binary over HTTP against
// the dev cluster (real API server, scheduler, kwok nodes) and a real
// configurable-http-proxy.
package spawnerd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

const configTemplate = `
kubespawner:
  namespace: %s
  cmd: [jupyterhub-singleuser]
  start_timeout: %d
  course: DSC10
  delete_grace_period: 1
  extra_labels:
    hub.jupyter.org/network-access-hub: "true"
  profile_list:
  - display_name: CPU notebook
    slug: cpu
    default: true
    profile_options:
      image:
        display_name: Image
        choices:
          scipy:
            display_name: SciPy
            default: true
            kubespawner_override: {image: "quay.io/jupyter/scipy-notebook:2026-11-30"}
          r:
            display_name: R
            kubespawner_override: {image: "quay.io/jupyter/r-notebook:2026-11-30"}
        unlisted_choice:
          enabled: true
          display_name: Custom image
          validation_regex: "^quay\\.io/"
          validation_message: Images must come from quay.io
          kubespawner_override: {image: "{value}"}
  - display_name: Stuck
    slug: stuck
    kubespawner_override:
      node_selector: {no-such-label: "nowhere"}
`

type fixture struct {
	ns    string
	proxy *harness.Proxy
	api   *harness.Spawnerd
}

func setup(t *testing.T, startTimeout int) *fixture {
	t.Helper()
	ns := env.Namespace(t)
	proxy := harness.StartProxy(t)
	api := env.StartSpawnerd(t, bin, harness.SpawnerdOptions{
		Config: fmt.Sprintf(configTemplate, ns, startTimeout),
		// The hub cannot be reached here (nothing listens on its port), so the
		// service falls back to removing the proxy route itself.
		Args: []string{"--proxy-api-url", proxy.APIURL, "--hub-api-url", fmt.Sprintf("http://127.0.0.1:%d/hub/api", harness.FreePort(t))},
		Env:  []string{"CONFIGPROXY_AUTH_TOKEN=" + proxy.Token, "SPAWNERD_HUB_TOKEN=unused"},
	})
	return &fixture{ns: ns, proxy: proxy, api: api}
}

func startBody(user, server string, opts map[string]any) map[string]any {
	prefix := "/user/" + user + "/"
	if server != "" {
		prefix += server + "/"
	}
	return map[string]any{
		"env": map[string]string{
			"JUPYTERHUB_API_TOKEN":      "tok-" + user,
			"JUPYTERHUB_USER":           user,
			"JUPYTERHUB_SERVER_NAME":    server,
			"JUPYTERHUB_SERVICE_PREFIX": prefix,
			"JUPYTERHUB_API_URL":        "http://127.0.0.1:8081/hub/api",
		},
		"user_options": opts,
		"api_token":    "tok-" + user,
	}
}

func (f *fixture) start(t *testing.T, user, server string, opts map[string]any) harness.ServerModel {
	t.Helper()
	var m harness.ServerModel
	code := f.api.Do(http.MethodPost, harness.ServerPath(user, server), user, false, startBody(user, server, opts), &m)
	if code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("start %s/%s: status %d, %+v", user, server, code, m)
	}
	return f.api.WaitStatus(user, server, "running")
}

// begin starts a user's default server, expecting 202 (a spawn under way).
func (f *fixture) begin(t *testing.T, user string, opts map[string]any) harness.ServerModel {
	t.Helper()
	var m harness.ServerModel
	if code := f.api.Do(http.MethodPost, harness.ServerPath(user, ""), user, false, startBody(user, "", opts), &m); code != http.StatusAccepted {
		t.Fatalf("start %s: status %d, %+v", user, code, m)
	}
	return m
}

// startProgress begins a spawn and returns its whole progress stream.
func (f *fixture) startProgress(t *testing.T, user string, opts map[string]any) []harness.ProgressEvent {
	t.Helper()
	f.begin(t, user, opts)
	return f.api.Progress(user, "")
}

// addRoute adds the user's route to the proxy as the hub does after a spawn.
func (f *fixture) addRoute(t *testing.T, user, target string) string {
	t.Helper()
	path := "/user/" + user
	body, _ := json.Marshal(map[string]any{"target": target, "user": user, "server_name": "", "jupyterhub": true})
	req, _ := http.NewRequest(http.MethodPost, f.proxy.APIURL+"/api/routes"+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "token "+f.proxy.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("adding proxy route: %v %v", err, resp)
	}
	resp.Body.Close()
	return path
}

func (f *fixture) routeExists(t *testing.T, path string) bool {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.proxy.APIURL+"/api/routes", nil)
	req.Header.Set("Authorization", "token "+f.proxy.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var routes map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&routes); err != nil {
		t.Fatal(err)
	}
	_, ok := routes[path]
	return ok
}

func (f *fixture) pods(t *testing.T) []corev1.Pod {
	t.Helper()
	list, err := env.Client.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func TestSpawnPollStop(t *testing.T) {
	f := setup(t, 30)
	m := f.start(t, "alice", "", nil)
	if m.Pod != "jupyter-alice" || m.URL == nil || !strings.HasSuffix(*m.URL, ":8888") {
		t.Fatalf("running server = %+v, want pod jupyter-alice with a :8888 URL", m)
	}
	pod, err := env.Client.CoreV1().Pods(f.ns).Get(context.Background(), "jupyter-alice", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"component": "singleuser-server", "app": "jupyterhub", "hub.jupyter.org/username": "alice",
		"hub.jupyter.org/servername": "", "dsmlp/user": "alice", "dsmlp/course": "DSC10",
	} {
		if got, ok := pod.Labels[k]; !ok || got != want {
			t.Errorf("label %s = %q (present %v), want %q", k, got, ok, want)
		}
	}
	if img := pod.Spec.Containers[0].Image; img != "quay.io/jupyter/scipy-notebook:2026-11-30" {
		t.Errorf("image = %s, want the default choice's", img)
	}
	if m.State["pod_name"] != "jupyter-alice" || m.State["namespace"] != f.ns {
		t.Errorf("state = %v", m.State)
	}
	if code := f.api.Do(http.MethodDelete, harness.ServerPath("alice", ""), "alice", false, nil, nil); code != http.StatusNoContent {
		t.Fatalf("stop: status %d, want 204", code)
	}
	if _, err := env.Client.CoreV1().Pods(f.ns).Get(context.Background(), "jupyter-alice", metav1.GetOptions{}); err == nil {
		t.Errorf("pod still exists after stop answered 204")
	}
	if m := f.api.Poll("alice", ""); m.Status == "running" || m.Status == "pending" {
		t.Errorf("poll after stop = %s", m.Status)
	}
}

// TestWatchesAreCounted reads spawnerd's count of the watches it opened on
// the real API server: its pod informer's and its event reflector's, the
// figure a stop benchmark compares before and after to tell a watch the
// API server closed from one that delivered late.
func TestWatchesAreCounted(t *testing.T) {
	f := setup(t, 30)
	// setup returns once spawnerd is ready: its pod informer has synced and
	// watches. The event reflector starts after that, and readiness does
	// not wait for it, so its first watch is waited for. A watch ends only
	// after minutes, so each opened one so far.
	series := func(r string) string { return `spawner_kube_watches_opened_total{resource="` + r + `"}` }
	var m map[string]float64
	err := wait.PollUntilContextTimeout(context.Background(), harness.Interval, harness.Timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if m, err = harness.Scrape(ctx, f.api.URL); err != nil {
			return false, err
		}
		_, ok := m[series("events")]
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for the event watch to be counted: %v", err)
	}
	for _, r := range []string{"pods", "events"} {
		if got, ok := m[series(r)]; !ok || got != 1 {
			t.Errorf("%s = %v (present %v), want 1", series(r), got, ok)
		}
	}
}

func TestStoppedCases(t *testing.T) {
	cases := map[string]struct {
		fault        func(ctx context.Context, ns, pod string) error
		wantExit     int
		wantReason   string
		wantMsgMatch string
	}{
		"evicted as in seed 003": {
			fault:    func(ctx context.Context, ns, pod string) error { return harness.Evict(ctx, env.Client, ns, pod) },
			wantExit: 1, wantReason: "Evicted", wantMsgMatch: "low on resource: memory",
		},
		"notebook container OOMKilled": {
			fault: func(ctx context.Context, ns, pod string) error {
				return harness.TerminateContainer(ctx, env.Client, ns, pod, "notebook", 137, "OOMKilled")
			},
			wantExit: 137, wantMsgMatch: "OOMKilled",
		},
		"pod Succeeded": {
			fault: func(ctx context.Context, ns, pod string) error {
				return harness.MarkSucceeded(ctx, env.Client, ns, pod)
			},
			wantExit: 0,
		},
		"pod deleted out of band": {
			fault: func(ctx context.Context, ns, pod string) error {
				return harness.DeletePodOutOfBand(ctx, env.Client, ns, pod)
			},
			wantExit: 1, wantReason: "Deleted",
		},
	}
	f := setup(t, 30)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			user := "u" + strings.ReplaceAll(strings.ToLower(strings.Fields(name)[1]), "-", "")
			m := f.start(t, user, "", nil)
			route := f.addRoute(t, user, *m.URL)
			start := time.Now()
			if err := tc.fault(context.Background(), f.ns, m.Pod); err != nil {
				t.Fatal(err)
			}
			err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, harness.Timeout, true, func(ctx context.Context) (bool, error) {
				_, err := env.Client.CoreV1().Pods(f.ns).Get(ctx, m.Pod, metav1.GetOptions{})
				return err != nil && !f.routeExists(t, route), nil
			})
			if err != nil {
				t.Fatalf("pod or route still there after the fault: %v", err)
			}
			t.Logf("fault → pod deleted and route gone: %s", time.Since(start).Round(time.Millisecond))
			got := f.api.Poll(user, "")
			if got.Status != "stopped" || got.ExitCode == nil || *got.ExitCode != tc.wantExit {
				t.Fatalf("poll = %+v, want stopped with exit code %d", got, tc.wantExit)
			}
			if tc.wantReason != "" && (got.Stopped == nil || got.Stopped.Reason != tc.wantReason) {
				t.Errorf("stop reason = %+v, want %s", got.Stopped, tc.wantReason)
			}
			if tc.wantMsgMatch != "" && !strings.Contains(got.Message, tc.wantMsgMatch) {
				t.Errorf("message %q does not say %q", got.Message, tc.wantMsgMatch)
			}
			// The same user starts again and gets a new running server.
			again := f.start(t, user, "", nil)
			if again.Pod != m.Pod {
				t.Errorf("respawn pod = %s, want %s", again.Pod, m.Pod)
			}
		})
	}
}

func TestStartIsIdempotentAndAdoptsAfterRestart(t *testing.T) {
	f := setup(t, 30)
	first := f.start(t, "bob", "", nil)
	var again harness.ServerModel
	if code := f.api.Do(http.MethodPost, harness.ServerPath("bob", ""), "bob", false, startBody("bob", "", nil), &again); code != http.StatusOK && code != http.StatusAccepted {
		t.Fatalf("second start: %d", code)
	}
	if pods := f.pods(t); len(pods) != 1 {
		t.Fatalf("%d pods after two starts, want 1", len(pods))
	}
	f.api.Restart(t)
	m := f.api.Poll("bob", "")
	if m.Status != "running" || m.URL == nil || *m.URL != *first.URL {
		t.Fatalf("after spawnerd restart poll = %+v, want running at %s", m, *first.URL)
	}
	// A start after the restart adopts the running pod instead of failing.
	if code := f.api.Do(http.MethodPost, harness.ServerPath("bob", ""), "bob", false, startBody("bob", "", nil), &again); code != http.StatusOK && code != http.StatusAccepted {
		t.Fatalf("start after restart: %d %+v", code, again)
	}
	f.api.WaitStatus("bob", "", "running")
	if pods := f.pods(t); len(pods) != 1 || pods[0].UID == "" {
		t.Fatalf("pods after adopt: %d", len(pods))
	}
}

func TestNamedServerBesideDefault(t *testing.T) {
	f := setup(t, 30)
	def := f.start(t, "carol", "", nil)
	named := f.start(t, "carol", "gpu work", map[string]any{"profile": "cpu", "image": "r"})
	if def.Pod == named.Pod {
		t.Fatalf("default and named server share pod %s", def.Pod)
	}
	pod, err := env.Client.CoreV1().Pods(f.ns).Get(context.Background(), named.Pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Annotations["hub.jupyter.org/servername"] != "gpu work" || pod.Spec.Containers[0].Image != "quay.io/jupyter/r-notebook:2026-11-30" {
		t.Errorf("named pod annotations %v image %s", pod.Annotations, pod.Spec.Containers[0].Image)
	}
	if code := f.api.Do(http.MethodDelete, harness.ServerPath("carol", "gpu work"), "carol", false, nil, nil); code != http.StatusNoContent {
		t.Fatalf("stop named: %d", code)
	}
	if m := f.api.Poll("carol", ""); m.Status != "running" {
		t.Errorf("default server after stopping the named one: %s", m.Status)
	}
}

func TestProgressStreamsEventsThenReady(t *testing.T) {
	f := setup(t, 30)
	evs := f.startProgress(t, "dave", nil)
	if len(evs) < 2 {
		t.Fatalf("progress events: %+v, want pod events then ready", evs)
	}
	last := evs[len(evs)-1]
	if !last.Ready || last.URL == "" || last.Progress == nil || *last.Progress != 100 {
		t.Errorf("last event %+v, want ready with url at 100%%", last)
	}
	// The pod's first event, told in a sentence, at KubeSpawner's 30 %.
	if first := evs[0].Message; (!strings.HasPrefix(first, "Found a node for the server") && first != "The server's container started.") || evs[0].Progress == nil || *evs[0].Progress != 30 {
		t.Errorf("first event %+v, want the pod's Scheduled or Started event at 30%%", evs[0])
	}
	// A second subscriber gets the same replay.
	if again := f.api.Progress("dave", ""); len(again) != len(evs) {
		t.Errorf("replay gave %d events, first subscriber %d", len(again), len(evs))
	}
}

func TestStartTimeoutFailsAndCleansUp(t *testing.T) {
	f := setup(t, 3)
	m := f.begin(t, "erin", map[string]any{"profile": "stuck"})
	evs := f.api.Progress("erin", "")
	last := evs[len(evs)-1]
	if !last.Failed || !strings.Contains(last.Message, "did not become ready within 3 seconds") {
		t.Fatalf("last event %+v, want a timeout failure", last)
	}
	if !strings.Contains(last.Message, "FailedScheduling") && !strings.Contains(last.Message, "didn't match") {
		t.Logf("timeout message does not quote the scheduler: %s", last.Message)
	}
	env.WaitForPodGone(t, f.ns, m.Pod)
	if got := f.api.Poll("erin", ""); got.Status != "stopped" {
		t.Errorf("poll after timeout = %+v", got)
	}
}

func TestAdminViews(t *testing.T) {
	f := setup(t, 30)
	f.start(t, "frank", "", nil)
	var list struct{ Servers []harness.ServerModel }
	if code := f.api.Do(http.MethodGet, "/api/v1/servers", "admin", false, nil, &list); code != http.StatusForbidden {
		t.Errorf("list without admin claim: %d, want 403", code)
	}
	if code := f.api.Do(http.MethodGet, "/api/v1/servers", "admin", true, nil, &list); code != http.StatusOK || len(list.Servers) != 1 || list.Servers[0].User != "frank" {
		t.Fatalf("admin list: %d %+v", code, list)
	}
	var one struct {
		harness.ServerModel
		Events []struct{ Reason, From string }
	}
	if code := f.api.Do(http.MethodGet, "/api/v1/servers/frank", "admin", true, nil, &one); code != http.StatusOK {
		t.Fatalf("admin get: %d", code)
	}
	if one.Node == "" || one.PodIP == "" || len(one.Events) == 0 {
		t.Errorf("admin view lacks node, IP or events: %+v", one)
	}
}

func TestBadInputIsRefusedAndCreatesNothing(t *testing.T) {
	f := setup(t, 30)
	path := harness.ServerPath("gina", "")
	cases := map[string]struct {
		body      any
		wantCode  int
		wantField string
	}{
		"malformed JSON":          {[]byte(`{"env": {`), 400, "body"},
		"wrong type":              {[]byte(`{"env": {"A": 1}}`), 400, "env"},
		"unknown field":           {[]byte(`{"envv": {}}`), 400, "envv"},
		"oversized body":          {[]byte(`{"env": {"A": "` + strings.Repeat("x", 2<<20) + `"}}`), 413, "body"},
		"unknown profile":         {startBody("gina", "", map[string]any{"profile": "nope"}), 400, "user_options.profile"},
		"unknown option value":    {startBody("gina", "", map[string]any{"profile": "cpu", "image": "fortran"}), 400, "user_options.image"},
		"unlisted choice refused": {startBody("gina", "", map[string]any{"profile": "cpu", "image--unlisted-choice": "docker.io/evil"}), 400, "user_options.image--unlisted-choice"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var e struct{ Error, Field string }
			code := f.api.Do(http.MethodPost, path, "gina", false, tc.body, &e)
			if code != tc.wantCode || e.Field != tc.wantField || e.Error == "" {
				t.Errorf("got %d %+v, want %d naming field %q", code, e, tc.wantCode, tc.wantField)
			}
		})
	}
	var e struct{ Error, Field string }
	if code := f.api.Do(http.MethodPost, path, "mallory", false, startBody("gina", "", nil), &e); code != http.StatusForbidden || e.Field != "user" {
		t.Errorf("token for another user: %d %+v, want 403 naming user", code, e)
	}
	if pods := f.pods(t); len(pods) != 0 {
		t.Errorf("bad requests created %d pods", len(pods))
	}
}
