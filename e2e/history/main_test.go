// Package history_test proves the session history against the real hub,
// proxy, API server and databases: every stopper recorded and told apart,
// the history surviving a restart and a failover on SQLite and PostgreSQL,
// and the console in a real browser.
package history_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/hubapi"
)

var (
	env *harness.Env
	bin string
)

// The cluster: one kwok CPU node, the local-runtime node for CPU notebooks,
// and a local-runtime node with two simulated a5000 GPUs (the whole class,
// so a booking can claim every GPU of it) for GPU notebooks.
func TestMain(m *testing.M) {
	nodes := &devcluster.NodeConfig{
		NodeSets:             []devcluster.NodeSet{{Name: "cpu", Count: 1, CPU: "16", Memory: "64Gi"}},
		LocalRuntimeGPUs:     2,
		LocalRuntimeGPUClass: "a5000",
	}
	os.Exit(harness.Main(m, &env, nodes, harness.BuildSpawnerd(&bin), func(e *harness.Env) error {
		return e.InstallReservationCRD(context.Background())
	}))
}

// spawnerConfig runs CPU notebooks on the local-runtime node and GPU ones
// on the GPU local-runtime node under the reservation engine. A GPU
// notebook's on-demand lease lasts two seconds (a one-second runtime and a
// one-second buffer), so a booking that needs its GPU preempts it at once.
const spawnerConfig = `
kubespawner:
  namespace: %[1]s
  cmd: [jupyterhub-singleuser]
  args: [--allow-root]
  start_timeout: 90
  delete_grace_period: 1
  course: DSC10
  node_selector: {devcluster.dsmlp.io/local-runtime: "true"}
  tolerations: [{key: devcluster.dsmlp.io/local-runtime, operator: Exists}]
  profile_list:
  - display_name: CPU notebook
    slug: cpu
    default: true
  - display_name: GPU notebook
    slug: gpu
    kubespawner_override:
      gpu_class: a5000
      extra_resource_limits: {nvidia.com/gpu: "1"}
      extra_resource_guarantees: {nvidia.com/gpu: "1"}
      node_selector: {devcluster.dsmlp.io/local-runtime: "true", gpu-class: a5000}
      extra_annotations: {galends/minimum-runtime-seconds: "1"}
reservation:
  lease_buffer: 1s
  classes:
  - {label: a5000, node_selector: {gpu-class: a5000}}
  workspaces:
  - {name: DSC10}
`

// stack is a proxy, spawnerd and a hub for one test.
type stack struct {
	ns          string
	proxy       *harness.Proxy
	api         *harness.Spawnerd
	hub         *harness.Hub
	cullerToken string
	dsn         string
}

// stackOptions tune newStack.
type stackOptions struct {
	dsn     string   // the history DSN; empty: a SQLite file of the test's
	args    []string // more spawnerd flags
	hubEnv  []string // more hub environment
	hubPoll int      // the hub's poll_interval, seconds (default 600: every reaction seen is spawnerd's)
}

func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	ns := env.Namespace(t)
	if o.dsn == "" {
		o.dsn = harness.SQLiteDSN(t)
	}
	if o.hubPoll == 0 {
		o.hubPoll = 600
	}
	proxy := harness.StartProxy(t)
	hubPort := harness.FreePort(t)
	hubToken := fmt.Sprintf("hub-token-%d", time.Now().UnixNano())
	cullerToken := fmt.Sprintf("culler-token-%d", time.Now().UnixNano())
	api := env.StartSpawnerd(t, bin, harness.SpawnerdOptions{
		Config: fmt.Sprintf(spawnerConfig, ns),
		Args: append([]string{"--hub-api-url", fmt.Sprintf("http://127.0.0.1:%d/hub/api", hubPort), "--proxy-api-url", proxy.APIURL,
			"--namespace", ns, "--leader-elect=false", "--reservation-tick", "1s", "--history-dsn", o.dsn}, o.args...),
		Env: []string{"SPAWNERD_HUB_TOKEN=" + hubToken, "CONFIGPROXY_AUTH_TOKEN=" + proxy.Token},
	})
	hub := env.StartHub(t, harness.HubOptions{
		Proxy: proxy, Spawnerd: api.URL, Secret: api.Secret, HubToken: hubToken, Port: hubPort,
		ExtraEnv: append([]string{fmt.Sprintf("HUB_POLL_INTERVAL=%d", o.hubPoll), "HUB_START_TIMEOUT=120", "HUB_CULLER_TOKEN=" + cullerToken}, o.hubEnv...),
	})
	return &stack{ns: ns, proxy: proxy, api: api, hub: hub, cullerToken: cullerToken, dsn: o.dsn}
}

// start asks the hub for user's server with token (the user's own, or the
// admin's) and waits until the hub shows it ready.
func (s *stack) start(t *testing.T, token, user string, opts map[string]any) {
	t.Helper()
	s.hub.EnsureUser(user)
	if code := s.hub.DoAs(token, http.MethodPost, harness.ServerAPIPath(user, ""), opts, nil); code != http.StatusCreated && code != http.StatusAccepted {
		t.Fatalf("hub start %s: %d", user, code)
	}
	s.hub.WaitReady(user, "")
}

// sessions reads user's sessions from spawnerd's API, newest first.
func (s *stack) sessions(t *testing.T, user string) []history.Session {
	t.Helper()
	var page history.SessionPage
	if code := s.api.Do(http.MethodGet, "/api/v1/sessions?user="+url.QueryEscape(user), "admin", true, nil, &page); code != http.StatusOK {
		t.Fatalf("GET sessions of %s: %d", user, code)
	}
	return page.Sessions
}

// waitEnded waits until user's newest session has ended and returns it.
func (s *stack) waitEnded(t *testing.T, user string, within time.Duration) history.Session {
	t.Helper()
	var last []history.Session
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, within, true, func(context.Context) (bool, error) {
		last = s.sessions(t, user)
		return len(last) > 0 && last[0].EndedAt != nil, nil
	})
	if err != nil {
		t.Fatalf("%s's session never ended in the history; sessions: %+v", user, last)
	}
	return last[0]
}

// why reads why user's last session ended.
func (s *stack) why(t *testing.T, user string) hubapi.WhyAnswer {
	t.Helper()
	var w hubapi.WhyAnswer
	if code := s.api.Do(http.MethodGet, "/api/v1/why/"+url.PathEscape(user), user, false, nil, &w); code != http.StatusOK {
		t.Fatalf("GET why of %s: %d", user, code)
	}
	return w
}
