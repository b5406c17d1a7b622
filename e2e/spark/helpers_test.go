package spark_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/e2e/harness"
)

// configTemplate is a course whose default profile is a Spark cluster; %s
// is the namespace, %s more kubespawner keys.
const configTemplate = `
kubespawner:
  namespace: %s
  cmd: [jupyterhub-singleuser]
  start_timeout: 60
  course: DSC102
  delete_grace_period: 1
  cpu_guarantee: 0.5
  cpu_limit: 1
  mem_guarantee: 1G
  mem_limit: 1G
%s
  profile_list:
  - display_name: DSC 102 with Spark
    slug: spark
    default: true
    kubespawner_override:
      spark:
        master: {cpu: 0.5, memory: 1G}
        worker: {cpu: 1, memory: 2G}
        workers: {default: 2, min: 1, max: 4}
        conf: {spark.executor.memory: 1g}
  - display_name: Plain notebook
    slug: plain
`

type fixture struct {
	ns  string
	api *harness.Spawnerd
}

// setup starts spawnerd for a new namespace; extra are more kubespawner
// keys, indented by two spaces.
func setup(t *testing.T, extra string) *fixture {
	t.Helper()
	ns := env.Namespace(t)
	api := env.StartSpawnerd(t, bin, harness.SpawnerdOptions{Config: fmt.Sprintf(configTemplate, ns, extra)})
	return &fixture{ns: ns, api: api}
}

// server is the API's server model with its Spark status.
type server struct {
	harness.ServerModel
	Spark *struct {
		MasterURL    string   `json:"master_url"`
		MasterReady  bool     `json:"master_ready"`
		Workers      int      `json:"workers"`
		ReadyWorkers int      `json:"ready_workers"`
		Endpoints    []string `json:"endpoints"`
		Pods         []struct {
			Name, Role, Phase string
			Ready             bool
		}
		Replaced []struct{ Pod, Role, Phase, Reason string }
		Problem  string
	}
}

func startBody(user string, opts map[string]any) map[string]any {
	return map[string]any{
		"env": map[string]string{
			"JUPYTERHUB_API_TOKEN":      "tok-" + user,
			"JUPYTERHUB_USER":           user,
			"JUPYTERHUB_SERVICE_PREFIX": "/user/" + user + "/",
			"JUPYTERHUB_API_URL":        "http://127.0.0.1:8081/hub/api",
		},
		"user_options": opts,
		"api_token":    "tok-" + user,
	}
}

// post sends a start and returns the status code and the error body.
func (f *fixture) post(t testing.TB, user string, opts map[string]any) (int, struct{ Error, Field string }) {
	t.Helper()
	var e struct{ Error, Field string }
	code := f.api.Do(http.MethodPost, harness.ServerPath(user, ""), user, false, startBody(user, opts), &e)
	return code, e
}

func (f *fixture) poll(t testing.TB, user string) server {
	t.Helper()
	var s server
	if code := f.api.Do(http.MethodGet, harness.ServerPath(user, ""), user, false, nil, &s); code != http.StatusOK {
		t.Fatalf("poll %s: status %d", user, code)
	}
	return s
}

// waitFor polls the server until cond holds.
func (f *fixture) waitFor(t testing.TB, user, what string, cond func(server) bool) server {
	t.Helper()
	var s server
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, harness.Timeout, true, func(context.Context) (bool, error) {
		s = f.poll(t, user)
		return cond(s), nil
	})
	if err != nil {
		t.Fatalf("server %s never %s; last: %+v spark %+v", user, what, s.ServerModel, s.Spark)
	}
	return s
}

// start starts user's server and waits until it runs.
func (f *fixture) start(t testing.TB, user string, opts map[string]any) server {
	t.Helper()
	if code, e := f.post(t, user, opts); code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("start %s: status %d %+v", user, code, e)
	}
	return f.waitFor(t, user, "running", func(s server) bool { return s.Status == "running" })
}

// leftovers lists what the namespace holds besides what it came with and
// except the pods named in keep.
func leftovers(t testing.TB, ns string, keep ...string) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	kept := map[string]bool{}
	for _, k := range keep {
		kept[k] = true
	}
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, p := range pods.Items {
		if !kept[p.Name] {
			out = append(out, "pod/"+p.Name)
		}
	}
	deps, err := env.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, d := range deps.Items {
		out = append(out, "deployment/"+d.Name)
	}
	rss, err := env.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, r := range rss.Items {
		out = append(out, "replicaset/"+r.Name)
	}
	svcs, err := env.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, s := range svcs.Items {
		out = append(out, "service/"+s.Name)
	}
	cms, err := env.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, c := range cms.Items {
		if c.Name != "kube-root-ca.crt" {
			out = append(out, "configmap/"+c.Name)
		}
	}
	slices, err := env.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, s := range slices.Items {
		out = append(out, "endpointslice/"+s.Name)
	}
	return out
}

// waitEmpty waits until the namespace holds nothing but keep.
func waitEmpty(t testing.TB, ns string, keep ...string) {
	t.Helper()
	var left []string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, harness.Timeout, true, func(context.Context) (bool, error) {
		left = leftovers(t, ns, keep...)
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("namespace %s still holds %s", ns, strings.Join(left, ", "))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// podsBy lists the pods a label selector picks, Running or not.
func podsBy(t testing.TB, ns, selector string) []corev1.Pod {
	t.Helper()
	list, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	must(t, err)
	return list.Items
}

func deployment(t testing.TB, ns, name string) *appsv1.Deployment {
	t.Helper()
	d, err := env.Client.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	must(t, err)
	return d
}

// readyEndpoints are the ready addresses of the Service's EndpointSlices.
func readyEndpoints(t testing.TB, ns, service string) []string {
	t.Helper()
	list, err := env.Client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	must(t, err)
	var out []string
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				out = append(out, ep.Addresses...)
			}
		}
	}
	return out
}

// apiRequests scrapes spawnerd's spawner_kube_api_requests_total by method.
func apiRequests(t testing.TB, url string) map[string]float64 {
	t.Helper()
	m, err := harness.Scrape(context.Background(), url)
	must(t, err)
	const prefix = `spawner_kube_api_requests_total{method="`
	out := map[string]float64{}
	for series, v := range m {
		if rest, ok := strings.CutPrefix(series, prefix); ok {
			out[strings.TrimSuffix(rest, `"}`)] = v
		}
	}
	return out
}
