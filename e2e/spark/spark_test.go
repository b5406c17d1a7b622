package spark_test

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/e2e/harness"
)

// masterPodName is what a Deployment's pod is called: the platform's users
// look for spark-master-XXX-XXX.
var masterPodName = regexp.MustCompile(`^spark-master-[a-z0-9]{6,10}-[a-z0-9]{5}$`)

func TestStartCreatesClusterAndStopRemovesIt(t *testing.T) {
	f := setup(t, "")
	ctx := context.Background()
	if code, e := f.post(t, "alice", nil); code != http.StatusAccepted {
		t.Fatalf("start: %d %+v", code, e)
	}
	evs := f.api.Progress("alice", "")
	if len(evs) == 0 || !evs[len(evs)-1].Ready {
		t.Fatalf("progress %+v, want it to end ready", evs)
	}
	var msgs []string
	for _, e := range evs {
		msgs = append(msgs, e.Message)
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"Spark cluster requested: a master and 2 workers", "Spark master spark-master-", "Spark master reachable at spark://spark-master-svc:7077"} {
		if !strings.Contains(all, want) {
			t.Errorf("progress lacks %q:\n%s", want, all)
		}
	}
	// The spawn is ready once the master is reachable; workers that are
	// ready by then are reported one count at a time.
	workersReady := regexp.MustCompile(`Spark workers ready: (\d)/2`)
	last := "0"
	for _, m := range workersReady.FindAllStringSubmatch(all, -1) {
		if m[1] <= last {
			t.Errorf("worker counts out of order:\n%s", all)
		}
		last = m[1]
	}

	notebook, err := env.Client.CoreV1().Pods(f.ns).Get(ctx, "jupyter-alice", metav1.GetOptions{})
	must(t, err)
	nbEnv := map[string]string{}
	for _, e := range notebook.Spec.Containers[0].Env {
		nbEnv[e.Name] = e.Value
	}
	if nbEnv["SPARK_MASTER_URL"] != "spark://spark-master-svc:7077" || nbEnv["SPARK_MASTER_WEBUI_URL"] != "http://spark-master-svc:8080" {
		t.Errorf("notebook env SPARK_MASTER_URL=%q SPARK_MASTER_WEBUI_URL=%q", nbEnv["SPARK_MASTER_URL"], nbEnv["SPARK_MASTER_WEBUI_URL"])
	}

	wantLabels := map[string]string{
		"dsmlp/user": "alice", "dsmlp/course": "DSC102", "app": "jupyterhub", "heritage": "jupyterhub",
		"hub.jupyter.org/username": "alice", "hub.jupyter.org/servername": "", "spawner.dsmlp.io/spark-cluster": "jupyter-alice",
	}
	checkLabels := func(what string, got map[string]string) {
		t.Helper()
		for k, v := range wantLabels {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s: label %s = %q (present %v), want %q", what, k, g, ok, v)
			}
		}
		if got["component"] == "singleuser-server" {
			t.Errorf("%s carries component=singleuser-server", what)
		}
	}
	checkOwner := func(what string, o metav1.Object) {
		t.Helper()
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || refs[0].Kind != "Pod" || refs[0].Name != "jupyter-alice" || refs[0].UID != notebook.UID ||
			refs[0].BlockOwnerDeletion == nil || !*refs[0].BlockOwnerDeletion {
			t.Errorf("%s owner references %+v, want the notebook pod (uid %s) with blockOwnerDeletion", what, refs, notebook.UID)
		}
	}
	for _, name := range []string{"spark-master", "spark-worker"} {
		d := deployment(t, f.ns, name)
		checkLabels("deployment "+name, d.Labels)
		checkLabels("pod template of "+name, d.Spec.Template.Labels)
		checkOwner("deployment "+name, d)
	}
	svc, err := env.Client.CoreV1().Services(f.ns).Get(ctx, "spark-master-svc", metav1.GetOptions{})
	must(t, err)
	checkLabels("service", svc.Labels)
	checkOwner("service", svc)
	var ports []int32
	for _, p := range svc.Spec.Ports {
		ports = append(ports, p.Port)
	}
	if !slices.Equal(ports, []int32{7077, 8080}) {
		t.Errorf("service ports %v, want 7077 and 8080", ports)
	}
	cm, err := env.Client.CoreV1().ConfigMaps(f.ns).Get(ctx, "spark-conf", metav1.GetOptions{})
	must(t, err)
	checkLabels("configmap", cm.Labels)
	checkOwner("configmap", cm)
	if conf := cm.Data["spark-defaults.conf"]; !strings.Contains(conf, "spark.master spark://spark-master-svc:7077") || !strings.Contains(conf, "spark.executor.memory 1g") {
		t.Errorf("spark-defaults.conf = %q", conf)
	}

	masters := podsBy(t, f.ns, "component=spark-master")
	if len(masters) != 1 || !masterPodName.MatchString(masters[0].Name) || !harness.PodRunning(&masters[0]) {
		t.Fatalf("master pods %v, want one running spark-master-<hash>-<hash>", podNames(masters))
	}
	checkLabels("master pod", masters[0].Labels)
	workers := podsBy(t, f.ns, "component=spark-worker")
	if len(workers) != 2 {
		t.Errorf("worker pods %v, want 2", podNames(workers))
	}
	for _, w := range workers {
		checkLabels("worker pod", w.Labels)
	}
	if eps := readyEndpoints(t, f.ns, "spark-master-svc"); !slices.Equal(eps, []string{masters[0].Status.PodIP}) {
		t.Errorf("spark-master-svc ready endpoints %v, want the master's IP %s", eps, masters[0].Status.PodIP)
	}

	s := f.waitFor(t, "alice", "had 2 ready workers", func(s server) bool { return s.Spark != nil && s.Spark.ReadyWorkers == 2 })
	if s.Status != "running" || s.Spark == nil || !s.Spark.MasterReady || s.Spark.ReadyWorkers != 2 || s.Spark.Workers != 2 ||
		!slices.Equal(s.Spark.Endpoints, []string{masters[0].Status.PodIP + ":7077"}) || len(s.Spark.Pods) != 3 {
		t.Errorf("poll %+v spark %+v, want running with a ready master, 2/2 workers and the master's endpoint", s.ServerModel, s.Spark)
	}
	var list struct{ Servers []server }
	if code := f.api.Do(http.MethodGet, "/api/v1/servers", "admin", true, nil, &list); code != http.StatusOK || len(list.Servers) != 1 {
		t.Fatalf("admin list: %d with %d servers, want only alice's (Spark pods are not servers)", code, len(list.Servers))
	}
	if sp := list.Servers[0].Spark; sp == nil || len(sp.Pods) != 3 || sp.Pods[0].Role != "master" || sp.Pods[0].Phase != "Running" || len(sp.Endpoints) != 1 {
		t.Errorf("admin list spark %+v, want the master and 2 workers with phases and the endpoint", sp)
	}

	if code := f.api.Do(http.MethodDelete, harness.ServerPath("alice", ""), "alice", false, nil, nil); code != http.StatusNoContent {
		t.Fatalf("stop: %d, want 204", code)
	}
	if left := leftovers(t, f.ns); len(left) > 0 {
		t.Errorf("after stop answered 204 the namespace still holds %s", strings.Join(left, ", "))
	}
}

func TestWorkerCountAndOneClusterPerNamespace(t *testing.T) {
	f := setup(t, "")
	s := f.start(t, "alice", map[string]any{"spark_workers": "3"})
	if s.Spark == nil || s.Spark.Workers != 3 {
		t.Fatalf("spark %+v, want 3 workers", s.Spark)
	}
	f.waitFor(t, "alice", "had 3 ready workers", func(s server) bool { return s.Spark != nil && s.Spark.ReadyWorkers == 3 })
	if n := len(podsBy(t, f.ns, "component=spark-worker")); n != 3 {
		t.Errorf("%d worker pods, want 3", n)
	}

	cases := map[string]struct {
		user      string
		opts      map[string]any
		wantCode  int
		wantField string
		wantMsg   string
	}{
		"count above max": {"bob", map[string]any{"spark_workers": "9"}, 400, "user_options.spark_workers", "from 1 to 4"},
		"count for a profile without Spark": {"bob", map[string]any{"profile": "plain", "spark_workers": "2"}, 400,
			"user_options.spark_workers", "no Spark cluster"},
		// The answer names no other user (their server is theirs to know);
		// spawnerd's log has the details under the request ID.
		"second cluster in the namespace": {"carol", nil, 409, "", "a name spawnerd needs is taken by another object (request "},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, e := f.post(t, tc.user, tc.opts)
			if code != tc.wantCode || e.Field != tc.wantField || !strings.Contains(e.Error, tc.wantMsg) {
				t.Errorf("got %d %+v, want %d naming %q with %q", code, e, tc.wantCode, tc.wantField, tc.wantMsg)
			}
			if tc.user != "alice" && strings.Contains(e.Error, "alice") {
				t.Errorf("%s's answer names alice: %q", tc.user, e.Error)
			}
		})
	}
	if m := f.poll(t, "carol"); m.Status == "running" || m.Status == "pending" {
		t.Errorf("carol's refused start left a server: %+v", m.ServerModel)
	}
	// A plain profile beside the cluster gets no Spark objects of its own.
	plain := f.start(t, "bob", map[string]any{"profile": "plain"})
	if plain.Spark != nil {
		t.Errorf("plain server reports a Spark cluster: %+v", plain.Spark)
	}
	if n := len(podsBy(t, f.ns, "spawner.dsmlp.io/spark-cluster=jupyter-bob")); n != 0 {
		t.Errorf("plain server has %d Spark pods", n)
	}
}

func TestEvictedSparkPodsAreReplacedWhileServerRuns(t *testing.T) {
	f := setup(t, "")
	f.start(t, "alice", nil)
	ctx := context.Background()
	for component, want := range map[string]int{"spark-worker": 2, "spark-master": 1} {
		t.Run(component, func(t *testing.T) {
			// The server is ready once the master answers; the workers'
			// ReplicaSet may still be creating them.
			var before []corev1.Pod
			if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, harness.Timeout, true, func(context.Context) (bool, error) {
				before = podsBy(t, f.ns, "component="+component)
				running := 0
				for i := range before {
					if harness.PodRunning(&before[i]) {
						running++
					}
				}
				return len(before) == want && running == want, nil
			}); err != nil {
				t.Fatalf("%s: %d pods, want %d running: %v", component, len(before), want, podNames(before))
			}
			victim := before[0]
			must(t, harness.Evict(ctx, env.Client, f.ns, victim.Name))
			var s server
			err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, harness.Timeout, true, func(context.Context) (bool, error) {
				if s = f.poll(t, "alice"); s.Status != "running" {
					t.Fatalf("poll during the replacement = %+v, want running", s.ServerModel)
				}
				pods := podsBy(t, f.ns, "component="+component)
				for _, p := range pods {
					if p.Name == victim.Name || !harness.PodRunning(&p) {
						return false, nil // the evicted pod is still there, or its replacement not yet running
					}
				}
				return len(pods) == len(before) && s.Spark != nil && s.Spark.MasterReady && s.Spark.ReadyWorkers == 2 && len(s.Spark.Endpoints) == 1, nil
			})
			if err != nil {
				t.Fatalf("%s %s was not replaced: pods %v, spark %+v", component, victim.Name, podNames(podsBy(t, f.ns, "component="+component)), s.Spark)
			}
			found := false
			for _, r := range s.Spark.Replaced {
				found = found || (r.Pod == victim.Name && r.Reason == "Evicted" && r.Phase == "Failed")
			}
			if !found {
				t.Errorf("status replaced %+v does not show the evicted %s", s.Spark.Replaced, victim.Name)
			}
			if component == "spark-master" {
				master := podsBy(t, f.ns, "component=spark-master")[0]
				if eps := readyEndpoints(t, f.ns, "spark-master-svc"); !slices.Equal(eps, []string{master.Status.PodIP}) {
					t.Errorf("endpoints %v, want the new master's IP %s", eps, master.Status.PodIP)
				}
			}
		})
	}
}

func TestStoppedNotebookRemovesCluster(t *testing.T) {
	cases := map[string]struct {
		extra string
		keep  []string // pods left on purpose
	}{
		"evicted and deleted (garbage collector)":      {extra: ""},
		"evicted and kept (delete_stopped_pods false)": {extra: "  delete_stopped_pods: false", keep: []string{"jupyter-alice"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := setup(t, tc.extra)
			f.start(t, "alice", nil)
			must(t, harness.Evict(context.Background(), env.Client, f.ns, "jupyter-alice"))
			f.waitFor(t, "alice", "stopped", func(s server) bool { return s.Status == "stopped" })
			waitEmpty(t, f.ns, tc.keep...)
			if s := f.poll(t, "alice"); s.Status != "stopped" || s.Spark != nil {
				t.Errorf("poll after the cluster went: %+v spark %+v", s.ServerModel, s.Spark)
			}
		})
	}
}

func TestQuotaTooSmallFailsFastAndLeavesNothing(t *testing.T) {
	f := setup(t, "")
	ctx := context.Background()
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "allowance", Namespace: f.ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			"requests.cpu": resource.MustParse("4"), "limits.cpu": resource.MustParse("5"),
			"requests.memory": resource.MustParse("16Gi"), "limits.memory": resource.MustParse("16Gi"), "pods": resource.MustParse("10"),
		}},
	}
	_, err := env.Client.CoreV1().ResourceQuotas(f.ns).Create(ctx, q, metav1.CreateOptions{})
	must(t, err)
	// A pod admitted before the quota controller first fills in the status
	// is never counted (until a full resync), so wait for it.
	waitQuota(t, f.ns, "allowance", func(st corev1.ResourceQuotaStatus) bool { return len(st.Hard) > 0 })
	// A database started from a manifest shares the allowance.
	size := corev1.ResourceList{"cpu": resource.MustParse("2"), "memory": resource.MustParse("2Gi")}
	db := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "postgres", Namespace: f.ns, Labels: map[string]string{"app": "postgres"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17",
			Resources: corev1.ResourceRequirements{Requests: size, Limits: size}}}},
	}
	_, err = env.Client.CoreV1().Pods(f.ns).Create(ctx, db, metav1.CreateOptions{})
	must(t, err)
	waitQuota(t, f.ns, "allowance", func(st corev1.ResourceQuotaStatus) bool {
		used := st.Used["requests.cpu"]
		return used.Cmp(resource.MustParse("2")) == 0
	})

	// Two workers need requests.cpu 3 (0.5 + 0.5 + 2) and limits.cpu 3.5;
	// 2 and 3 are free.
	start := time.Now()
	code, e := f.post(t, "alice", nil)
	elapsed := time.Since(start)
	if code != http.StatusForbidden || e.Field != "resources" {
		t.Fatalf("start: %d %+v, want 403 naming resources", code, e)
	}
	for _, want := range []string{"not enough requests.cpu", "not enough limits.cpu", "ResourceQuota allowance", "already using it: pod postgres 2", "2 Spark workers 2"} {
		if !strings.Contains(e.Error, want) {
			t.Errorf("refusal %q does not say %q", e.Error, want)
		}
	}
	t.Logf("refused in %s: %s", elapsed.Round(time.Millisecond), e.Error)
	if left := leftovers(t, f.ns, "postgres"); len(left) > 0 {
		t.Errorf("the refused start left %s", strings.Join(left, ", "))
	}
	if m := f.poll(t, "alice"); m.Status == "running" || m.Status == "pending" {
		t.Errorf("poll after the refusal: %+v", m.ServerModel)
	}

	// One worker fits: requests.cpu 2 of 2, limits.cpu 2.5 of 3.
	s := f.start(t, "alice", map[string]any{"spark_workers": "1"})
	if s.Spark == nil || s.Spark.Workers != 1 {
		t.Fatalf("spark %+v, want 1 worker", s.Spark)
	}
}

func TestRestartAdoptsClusterWithoutWrites(t *testing.T) {
	f := setup(t, "")
	f.start(t, "alice", nil)
	before := deployment(t, f.ns, "spark-master").UID
	f.api.Restart(t)
	if code, e := f.post(t, "alice", nil); code != http.StatusOK && code != http.StatusAccepted {
		t.Fatalf("start after restart: %d %+v", code, e)
	}
	f.waitFor(t, "alice", "running", func(s server) bool { return s.Status == "running" })
	if after := deployment(t, f.ns, "spark-master").UID; after != before {
		t.Errorf("master Deployment replaced (%s → %s), want it adopted", before, after)
	}
	writes := apiRequests(t, f.api.URL)
	// The notebook pod's create meets AlreadyExists (it is how a start finds
	// its pod); the cluster's objects are in the cache and need no write.
	if writes["POST"] > 1 || writes["PUT"]+writes["PATCH"]+writes["DELETE"] > 0 {
		t.Errorf("writes after restart %v, want at most the notebook pod's create", writes)
	}
}

// waitQuota waits until the quota's status satisfies cond.
func waitQuota(t *testing.T, ns, name string, cond func(corev1.ResourceQuotaStatus) bool) {
	t.Helper()
	var last corev1.ResourceQuotaStatus
	err := wait.PollUntilContextTimeout(context.Background(), harness.Interval, harness.Timeout, true, func(ctx context.Context) (bool, error) {
		q, err := env.Client.CoreV1().ResourceQuotas(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = q.Status
		return cond(last), nil
	})
	if err != nil {
		t.Fatalf("quota %s/%s status %+v never became as wanted", ns, name, last)
	}
}

func podNames(pods []corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name + "(" + string(p.Status.Phase) + ")"
	}
	return out
}
