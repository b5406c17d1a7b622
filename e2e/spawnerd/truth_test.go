package spawnerd_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/serverid"
	"github.com/dsmlp/spawner/spawner"
)

// hubStops is a stand-in for the hub's REST API that counts the stops
// spawnerd reports, by path.
type hubStops struct {
	srv *httptest.Server
	mu  sync.Mutex
	n   map[string]int
}

func newHubStops(t *testing.T) *hubStops {
	h := &hubStops{n: map[string]int{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			h.mu.Lock()
			h.n[r.URL.Path]++
			h.mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hubStops) count(user string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n["/hub/api/users/"+user+"/server"]
}

// truthSetup starts spawnerd with config (a format string taking the test
// namespace for every %[1]s) and a counting hub.
func truthSetup(t *testing.T, config string, args ...string) (*fixture, *hubStops) {
	t.Helper()
	ns := env.Namespace(t)
	hub := newHubStops(t)
	api := env.StartSpawnerd(t, bin, harness.SpawnerdOptions{
		Config: fmt.Sprintf(config, ns),
		Args:   append([]string{"--hub-api-url", hub.srv.URL + "/hub/api"}, args...),
		Env:    []string{"SPAWNERD_HUB_TOKEN=unused"},
	})
	return &fixture{ns: ns, api: api}, hub
}

const placementConfig = `
kubespawner:
  namespace: %[1]s
  cmd: [jupyterhub-singleuser]
  start_timeout: 60
  delete_grace_period: 1
  profile_list:
  - display_name: CPU notebook
    slug: cpu
    default: true
  - display_name: Course namespace
    slug: course
    kubespawner_override: {namespace: %[2]s}
  - display_name: Renamed pod
    slug: renamed
    kubespawner_override: {pod_name_template: "nb-{username}-{servername}"}
`

// TestPlacementSurvivesRestartAndConfigChange: servers whose profile moved
// the pod to another namespace or renamed it, and one whose name the slug
// scheme decides, stay running for the hub across a restart that changes
// slug_scheme, and stop removes each pod.
func TestPlacementSurvivesRestartAndConfigChange(t *testing.T) {
	ns, course := env.Namespace(t), env.Namespace(t)
	hub := newHubStops(t)
	config := fmt.Sprintf(placementConfig, ns, course)
	api := env.StartSpawnerd(t, bin, harness.SpawnerdOptions{
		Config: config, Args: []string{"--hub-api-url", hub.srv.URL + "/hub/api"}, Env: []string{"SPAWNERD_HUB_TOKEN=unused"},
	})
	f := &fixture{ns: ns, api: api}
	if _, ok := api.WaitForLogLine(harness.Timeout, "pod watcher started", ns, course); !ok {
		t.Fatalf("spawnerd does not watch both %s and %s:\n%s", ns, course, api.Log())
	}
	// A user name whose pod name the slug scheme changes.
	servers := []struct {
		user, profile string
	}{{"Ana.Lee", "cpu"}, {"bob", "course"}, {"carol", "renamed"}}
	pods := map[string]harness.ServerModel{}
	for _, s := range servers {
		pods[s.user] = f.start(t, s.user, "", map[string]any{"profile": s.profile})
	}
	if got := pods["bob"].Namespace; got != course {
		t.Fatalf("bob's pod is in %s, want the profile's namespace %s", got, course)
	}
	if got := pods["carol"].Pod; got != "nb-carol" {
		t.Fatalf("carol's pod is %s, want the profile's name nb-carol", got)
	}

	// The new configuration names Ana.Lee's pod differently.
	changed := strings.Replace(config, "  start_timeout: 60\n", "  start_timeout: 60\n  slug_scheme: escape\n", 1)
	before, after := buildPodName(t, config, "Ana.Lee"), buildPodName(t, changed, "Ana.Lee")
	if before == after {
		t.Fatalf("slug_scheme escape gives the same pod name %s: the test would prove nothing", before)
	}
	if err := os.WriteFile(api.ConfigPath, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	api.Restart(t)

	for _, s := range servers {
		// No hint: the identity label alone finds the pod.
		got := api.Poll(s.user, "")
		if got.Status != "running" || got.Pod != pods[s.user].Pod || got.Namespace != pods[s.user].Namespace {
			t.Errorf("%s after the restart: %s %s/%s, want running %s/%s", s.user, got.Status, got.Namespace, got.Pod,
				pods[s.user].Namespace, pods[s.user].Pod)
		}
	}
	for _, s := range servers {
		if code := api.Do(http.MethodDelete, harness.ServerPath(s.user, "")+"?now=true", s.user, false, nil, nil); code != http.StatusNoContent && code != http.StatusAccepted {
			t.Fatalf("stop %s: %d", s.user, code)
		}
		env.WaitForPodGone(t, pods[s.user].Namespace, pods[s.user].Pod)
	}
	for _, s := range servers {
		if n := hub.count(hubQuote(s.user)); n != 0 {
			t.Errorf("the hub was told %d times that %s stopped; the hub asked for it", n, s.user)
		}
	}
}

func hubQuote(s string) string { return strings.ReplaceAll(s, " ", "%20") }

func buildPodName(t *testing.T, config, user string) string {
	t.Helper()
	cfg, err := spawner.Parse([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	objs, _, err := spawner.Build(cfg, spawner.Request{User: user})
	if err != nil {
		t.Fatal(err)
	}
	return objs.Pod.Name
}

const collisionConfig = `
kubespawner:
  namespace: %s
  cmd: [jupyterhub-singleuser]
  pod_name_template: "jupyter-{username}"
  delete_grace_period: 1
`

// TestNameCollisionLeavesTheOtherServer: a name template without the server
// name gives two servers one pod name; the named server never reads, stops
// or adopts the default server's pod.
func TestNameCollisionLeavesTheOtherServer(t *testing.T) {
	f, _ := truthSetup(t, collisionConfig)
	def := f.start(t, "alice", "", nil)
	if got := f.api.Poll("alice", "project"); got.Status == "running" || got.URL != nil {
		t.Fatalf("alice/project reads as %s with URL %v: it is the default server's pod", got.Status, got.URL)
	}
	if code := f.api.Do(http.MethodDelete, harness.ServerPath("alice", "project")+"?now=true", "alice", false, nil, nil); code != http.StatusNoContent {
		t.Fatalf("stop alice/project: %d", code)
	}
	if line, ok := f.api.WaitForLogLine(harness.Timeout, "left alone", "belongs to alice's default server"); !ok {
		t.Fatalf("no log line says why the pod was left alone:\n%s", f.api.Log())
	} else {
		t.Log(line)
	}
	time.Sleep(time.Second)
	pod, err := env.Client.CoreV1().Pods(f.ns).Get(context.Background(), def.Pod, metav1.GetOptions{})
	if err != nil || pod.DeletionTimestamp != nil {
		t.Fatalf("the default server's pod was removed by a stop of alice/project: %v", err)
	}
	if got := f.api.Poll("alice", ""); got.Status != "running" {
		t.Fatalf("alice's default server is %s, want running", got.Status)
	}
	var m harness.ServerModel
	if code := f.api.Do(http.MethodPost, harness.ServerPath("alice", "project"), "alice", false, startBody("alice", "project", nil), &m); code != http.StatusConflict {
		t.Fatalf("start alice/project over the default server's pod: %d, want 409", code)
	}
}

const userNamespacesConfig = `
kubespawner:
  namespace: %[1]s
  enable_user_namespaces: true
  user_namespace_template: "%[1]s-{username}"
  cmd: [jupyterhub-singleuser]
  delete_grace_period: 1
`

// TestForgedPodStopsNobody: with user namespaces spawnerd watches every
// namespace; a Failed pod elsewhere that carries alice's identity is not
// her server: it is neither deleted nor reported, and her pod stays.
func TestForgedPodStopsNobody(t *testing.T) {
	f, hub := truthSetup(t, userNamespacesConfig)
	real := f.start(t, "alice", "", nil)
	t.Cleanup(func() {
		_ = env.Client.CoreV1().Namespaces().Delete(context.Background(), real.Namespace, metav1.DeleteOptions{})
	})
	if real.Namespace != f.ns+"-alice" {
		t.Fatalf("alice's pod is in %s, want her namespace %s-alice", real.Namespace, f.ns)
	}
	forged := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "jupyter-alice", Namespace: f.ns,
			Labels: map[string]string{"component": "singleuser-server", serverid.LabelKey: serverid.Key("alice", "")},
			Annotations: map[string]string{serverid.AnnotationUser: "alice", serverid.AnnotationServer: "",
				"hub.jupyter.org/username": "alice"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "forged"}},
			NodeSelector: map[string]string{"no-such-label": "nowhere"}},
	}
	ctx := context.Background()
	created, err := env.Client.CoreV1().Pods(f.ns).Create(ctx, forged, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The scheduler may write its Unschedulable condition in between: read
	// the pod anew on a conflict.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if created, err = env.Client.CoreV1().Pods(f.ns).Get(ctx, forged.Name, metav1.GetOptions{}); err != nil {
			return err
		}
		created.Status.Phase, created.Status.Reason = corev1.PodFailed, "Evicted"
		_, err := env.Client.CoreV1().Pods(f.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	line, ok := f.api.WaitForLogLine(harness.Timeout, "ignoring a pod that is not the server it names", f.ns, "never puts alice")
	if !ok {
		t.Fatalf("no log line says why the forged pod was ignored:\n%s", f.api.Log())
	}
	t.Log(line)
	time.Sleep(2 * time.Second)
	if n := hub.count("alice"); n != 0 {
		t.Fatalf("the hub was told %d times that alice stopped, because of a forged pod", n)
	}
	if _, err := env.Client.CoreV1().Pods(f.ns).Get(ctx, forged.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the forged pod was deleted by spawnerd: %v", err)
	}
	if got := f.api.Poll("alice", ""); got.Status != "running" || got.Namespace != real.Namespace {
		t.Fatalf("alice's server is %s in %s, want running in %s", got.Status, got.Namespace, real.Namespace)
	}
}

// TestReplicasReactOnce: two replicas of one deployment. Either serves a
// spawn another started (poll, progress); an eviction is deleted and
// reported exactly once; when the leader goes, the other takes over the
// stop reaction.
func TestReplicasReactOnce(t *testing.T) {
	lease := []string{"--lease-duration", "3s", "--lease-renew-deadline", "2s", "--lease-retry-period", "500ms"}
	f, hub := truthSetup(t, fmt.Sprintf(configTemplate, "%[1]s", 60), lease...)
	b := f.api.Replica(t)
	a := f.api

	// Started on a; b answers poll and progress from the cluster.
	f.begin(t, "alice", nil)
	events := b.Progress("alice", "")
	if len(events) == 0 || !events[len(events)-1].Ready {
		t.Fatalf("progress on the other replica did not end ready: %+v", events)
	}
	if got := b.Poll("alice", ""); got.Status != "running" {
		t.Fatalf("poll on the other replica: %s, want running", got.Status)
	}

	leader, follower := a, b
	if _, ok := b.WaitForLogLine(time.Second, "took the lead"); ok {
		leader, follower = b, a
	}
	ctx := context.Background()
	evictAndCount := func(api *harness.Spawnerd, user string) {
		t.Helper()
		pod := api.Poll(user, "").Pod
		if err := harness.Evict(ctx, env.Client, f.ns, pod); err != nil {
			t.Fatal(err)
		}
		env.WaitForPodGone(t, f.ns, pod)
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, harness.Timeout, true, func(context.Context) (bool, error) {
			return hub.count(user) > 0, nil
		})
		if err != nil {
			t.Fatalf("the hub was never told that %s stopped", user)
		}
		time.Sleep(2 * time.Second)
		if n := hub.count(user); n != 1 {
			t.Fatalf("the hub was told %d times that %s stopped, want once", n, user)
		}
	}
	evictAndCount(follower, "alice")

	// The leader goes; the follower takes over.
	f.api = follower
	f.start(t, "bob", "", nil)
	leader.Stop()
	if _, ok := follower.WaitForLogLine(harness.Timeout, "took the lead"); !ok {
		t.Fatalf("the remaining replica never took the lead:\n%s", follower.Log())
	}
	evictAndCount(follower, "bob")
}
