package hub_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/e2e/harness"
)

// TestWrongServiceURLDropsNoServer: the hub is restarted with service_url
// pointing at something that is not spawnerd (an HTTP server answering
// 404, as an ingress's default backend does). The hub keeps polling, drops
// no server, the pod keeps running, and a stop through the hub stays
// pending instead of reporting success.
func TestWrongServiceURLDropsNoServer(t *testing.T) {
	dataDir := t.TempDir() // shared by both hubs: the second one loads the first one's servers
	s := newStack(t, "HUB_DATA_DIR="+dataDir)
	s.start(t, "grace", "", nil)
	const pod = "jupyter-grace"

	var polls atomic.Int32
	misrouted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			polls.Add(1)
		}
		http.Error(w, "404 page not found", http.StatusNotFound)
	}))
	t.Cleanup(misrouted.Close)

	s.hub.Stop()
	hub := env.StartHub(t, harness.HubOptions{
		Proxy: s.proxy, Spawnerd: misrouted.URL, Secret: s.api.Secret, HubToken: s.hub.HubToken,
		Port:     portOf(t, s.hub.APIURL),
		ExtraEnv: []string{"HUB_DATA_DIR=" + dataDir, "HUB_POLL_INTERVAL=1", "HUB_START_TIMEOUT=90"},
	})

	// The start-up check plus several periodic polls, each answered 404,
	// or the hub dropping the server, whichever comes first.
	var kept bool
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, harness.Timeout, true, func(context.Context) (bool, error) {
		srv, ok := hub.Servers("grace")[""]
		kept = ok && srv.Ready
		return !kept || polls.Load() >= 4, nil
	})
	if err != nil {
		t.Fatalf("the hub polled the wrong URL %d times in %s", polls.Load(), harness.Timeout)
	}
	if !kept {
		t.Fatalf("the hub dropped grace's server after %d misrouted polls: %+v", polls.Load(), hub.Servers("grace"))
	}
	if line, ok := hub.WaitForLogLine(10*time.Second, "spawnerd poll misrouted"); !ok || !strings.HasPrefix(line, "[E ") {
		t.Errorf("the hub logged no error for the misrouted polls (%q)", line)
	}
	if !strings.Contains(hub.Log(), "grace still running") {
		t.Errorf("the hub did not keep grace's server at start-up")
	}
	assertPodRunning(t, s.ns, pod)

	// A stop that reaches no spawnerd must not look like one that worked.
	// JupyterHub 3 drops the server once the spawner's stop() ends, raised
	// or not, so the class keeps the stop pending (retrying) until its
	// stop_timeout: the hub answers 202 after slow_stop_timeout (10 s), not 204.
	begin := time.Now()
	code := hub.Do(http.MethodDelete, harness.ServerAPIPath("grace", ""), nil, nil)
	t.Logf("hub stop through the wrong URL: %d after %s", code, time.Since(begin).Round(time.Millisecond))
	if code != http.StatusAccepted {
		t.Fatalf("hub stop through the wrong URL answered %d, want 202 (still pending)", code)
	}
	if srv, ok := hub.Servers("grace")[""]; !ok || srv.Pending == nil || *srv.Pending != "stop" {
		t.Errorf("after a misrouted stop the hub shows %+v, want the server pending stop", hub.Servers("grace"))
	}
	if _, ok := hub.WaitForLogLine(10*time.Second, "spawnerd stop misrouted"); !ok {
		t.Errorf("the hub log does not say the stop was misrouted:\n%s", hub.Log())
	}
	assertPodRunning(t, s.ns, pod)
	if m := s.api.Poll("grace", ""); m.Status != "running" {
		t.Errorf("spawnerd reports %+v after the misrouted stop, want running", m)
	}
}

func assertPodRunning(t *testing.T, ns, name string) {
	t.Helper()
	pod, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod %s is %s (deleting %v), want running", name, pod.Status.Phase, pod.DeletionTimestamp != nil)
	}
}

// portOf is the port of the hub's API URL: the second hub takes the first one's.
func portOf(t *testing.T, apiURL string) int {
	t.Helper()
	u, err := url.Parse(apiURL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("no port in %s: %v", apiURL, err)
	}
	return port
}
